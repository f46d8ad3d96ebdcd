// pymlirjit's own runner test: a module with sparse tensors, which pymlirjit's default
// pipeline hands to MLIR's sparsifier: a compressed vector built from a dense constant,
// its stored entries counted, and a weighted sum over the stored entries only.
// RUN: mlir-opt %s --sparsifier="enable-runtime-library=false" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

#Compressed = #sparse_tensor.encoding<{ map = (i) -> (i : compressed) }>

#weighted_sum = {
  indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> ()>],
  iterator_types = ["reduction"]
}

// sum over i of x[i] * w[i], visiting only the entries x stores.
func.func @dot_sparse_dense(%x: tensor<12xf64, #Compressed>, %w: tensor<12xf64>)
    -> tensor<f64> {
  %zero = arith.constant 0.0 : f64
  %init = tensor.empty() : tensor<f64>
  %acc = linalg.fill ins(%zero : f64) outs(%init : tensor<f64>) -> tensor<f64>
  %r = linalg.generic #weighted_sum
      ins(%x, %w : tensor<12xf64, #Compressed>, tensor<12xf64>) outs(%acc : tensor<f64>) {
    ^bb0(%a: f64, %b: f64, %s: f64):
      %p = arith.mulf %a, %b : f64
      %t = arith.addf %s, %p : f64
      linalg.yield %t : f64
  } -> tensor<f64>
  return %r : tensor<f64>
}

func.func @main() {
  %dense = arith.constant dense<[0.0, 2.5, 0.0, 0.0, -1.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 3.0]>
      : tensor<12xf64>
  %weights = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]>
      : tensor<12xf64>
  %x = sparse_tensor.convert %dense : tensor<12xf64> to tensor<12xf64, #Compressed>

  // CHECK: 4
  %n = sparse_tensor.number_of_entries %x : tensor<12xf64, #Compressed>
  vector.print %n : index

  // 2.5 * 2 - 1 * 5 + 4 * 8 + 3 * 12 = 68
  // CHECK-NEXT: 68
  %r = call @dot_sparse_dense(%x, %weights)
      : (tensor<12xf64, #Compressed>, tensor<12xf64>) -> tensor<f64>
  %v = tensor.extract %r[] : tensor<f64>
  vector.print %v : f64

  bufferization.dealloc_tensor %x : tensor<12xf64, #Compressed>
  return
}
