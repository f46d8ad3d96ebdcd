// pymlirjit's own runner test: one-shot-bufferize of functions on tensors across
// function boundaries (tensor.insert, extract_slice / insert_slice, linalg on tensors,
// a result written in place), the result printed through bufferization.to_buffer.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},func.func(convert-linalg-to-loops),expand-strided-metadata,lower-affine,convert-scf-to-cf,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>)

// Doubles the middle 2x2 block of a 4x4 tensor and sets its corner to %corner.
func.func @patch(%t: tensor<4x4xf32>, %corner: f32) -> tensor<4x4xf32> {
  %c3 = arith.constant 3 : index
  %block = tensor.extract_slice %t[1, 1] [2, 2] [1, 1] : tensor<4x4xf32> to tensor<2x2xf32>
  %init = tensor.empty() : tensor<2x2xf32>
  %doubled = linalg.generic {
      indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%block : tensor<2x2xf32>) outs(%init : tensor<2x2xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<2x2xf32>
  %back = tensor.insert_slice %doubled into %t[1, 1] [2, 2] [1, 1]
      : tensor<2x2xf32> into tensor<4x4xf32>
  %r = tensor.insert %corner into %back[%c3, %c3] : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// Sums the rows of a tensor into a new one.
func.func @row_sums(%t: tensor<4x4xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.reduce ins(%t : tensor<4x4xf32>) outs(%init : tensor<4xf32>) dimensions = [1]
    (%x: f32, %acc: f32) {
      %a = arith.addf %x, %acc : f32
      linalg.yield %a : f32
    }
  return %s : tensor<4xf32>
}

func.func @main() {
  %t = arith.constant dense<[[1.0, 2.0, 3.0, 4.0],
                             [5.0, 6.0, 7.0, 8.0],
                             [-1.0, -2.0, -3.0, -4.0],
                             [0.5, 0.25, 0.125, 0.0]]> : tensor<4x4xf32>
  %corner = arith.constant 42.0 : f32
  %p = call @patch(%t, %corner) : (tensor<4x4xf32>, f32) -> tensor<4x4xf32>
  %pm = bufferization.to_buffer %p : tensor<4x4xf32> to memref<4x4xf32>
  %pu = memref.cast %pm : memref<4x4xf32> to memref<*xf32>
  call @printMemrefF32(%pu) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [4, 4] strides = [4, 1] data =
  // CHECK-NEXT: [1,   2,   3,   4],
  // CHECK-NEXT: [5,   12,   14,   8],
  // CHECK-NEXT: [-1,   -4,   -6,   -4],
  // CHECK-NEXT: [0.5,   0.25,   0.125,   42]]

  // The constant itself is unchanged: @patch wrote a copy.
  %s = call @row_sums(%t) : (tensor<4x4xf32>) -> tensor<4xf32>
  %sm = bufferization.to_buffer %s : tensor<4xf32> to memref<4xf32>
  %su = memref.cast %sm : memref<4xf32> to memref<*xf32>
  call @printMemrefF32(%su) : (memref<*xf32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [4] strides = [1] data =
  // CHECK-NEXT: [10,  26,  -10,  0.875]
  return
}
