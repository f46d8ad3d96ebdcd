// pymlirjit's own runner test: sparse_tensor ops on plain memrefs, with no sparse encoding
// anywhere: pymlirjit's default pipeline still hands the module to MLIR's sparsifier, the
// only pipeline that lowers them. Two arrays sorted jointly by the first, then a value
// appended to a buffer that grows.
// RUN: mlir-opt %s --sparsifier="enable-runtime-library=false" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

#identity = affine_map<(d0) -> (d0)>

func.func @fill(%m: memref<?xi32>, %a: i32, %b: i32, %c: i32, %d: i32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  memref.store %a, %m[%c0] : memref<?xi32>
  memref.store %b, %m[%c1] : memref<?xi32>
  memref.store %c, %m[%c2] : memref<?xi32>
  memref.store %d, %m[%c3] : memref<?xi32>
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %pad = arith.constant -1 : i32
  %k0 = arith.constant 40 : i32
  %k1 = arith.constant 10 : i32
  %k2 = arith.constant 30 : i32
  %k3 = arith.constant 20 : i32
  %v0 = arith.constant 4 : i32
  %v1 = arith.constant 1 : i32
  %v2 = arith.constant 3 : i32
  %v3 = arith.constant 2 : i32
  %keys = memref.alloc(%c4) : memref<?xi32>
  %values = memref.alloc(%c4) : memref<?xi32>
  call @fill(%keys, %k0, %k1, %k2, %k3) : (memref<?xi32>, i32, i32, i32, i32) -> ()
  call @fill(%values, %v0, %v1, %v2, %v3) : (memref<?xi32>, i32, i32, i32, i32) -> ()

  sparse_tensor.sort insertion_sort_stable %c4, %keys jointly %values
    {perm_map = #identity, ny = 0 : index} : memref<?xi32> jointly memref<?xi32>

  // CHECK: ( 10, 20, 30, 40 )
  // CHECK-NEXT: ( 1, 2, 3, 4 )
  %sorted_keys = vector.transfer_read %keys[%c0], %pad : memref<?xi32>, vector<4xi32>
  vector.print %sorted_keys : vector<4xi32>
  %sorted_values = vector.transfer_read %values[%c0], %pad : memref<?xi32>, vector<4xi32>
  vector.print %sorted_values : vector<4xi32>

  // push_back grows a one-element buffer to hold a second value.
  %buffer = memref.alloc(%c1) : memref<?xf64>
  %one = arith.constant 1.5 : f64
  %two = arith.constant 2.5 : f64
  %b1, %n1 = sparse_tensor.push_back %c0, %buffer, %one : index, memref<?xf64>, f64
  %b2, %n2 = sparse_tensor.push_back %n1, %b1, %two : index, memref<?xf64>, f64
  // CHECK-NEXT: 2
  // CHECK-NEXT: ( 1.5, 2.5 )
  vector.print %n2 : index
  %zero = arith.constant 0.0 : f64
  %pushed = vector.transfer_read %b2[%c0], %zero : memref<?xf64>, vector<2xf64>
  vector.print %pushed : vector<2xf64>

  memref.dealloc %keys : memref<?xi32>
  memref.dealloc %values : memref<?xi32>
  memref.dealloc %b2 : memref<?xf64>
  return
}
