// pymlirjit's own runner test: 1-D and 2-D vector.transfer_read with padding past the
// end of the memref, with masks, with a broadcasting permutation map, and masked
// vector.transfer_write, printed with vector.print.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-vector-to-scf{full-unroll=false}),lower-affine,convert-scf-to-cf,convert-vector-to-llvm,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,convert-ub-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func @read_at(%m: memref<?xf32>, %i: index) {
  %pad = arith.constant -1.0 : f32
  %v = vector.transfer_read %m[%i], %pad : memref<?xf32>, vector<4xf32>
  vector.print %v : vector<4xf32>
  return
}

func.func @read_masked(%m: memref<?xf32>, %i: index, %n: index) {
  %pad = arith.constant 99.0 : f32
  %mask = vector.create_mask %n : vector<5xi1>
  %v = vector.transfer_read %m[%i], %pad, %mask : memref<?xf32>, vector<5xf32>
  vector.print %v : vector<5xf32>
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %m = memref.alloc(%c6) : memref<?xf32>
  // m = [0, 0.5, 1, 1.5, 2, 2.5]
  %half = arith.constant 0.5 : f32
  scf.for %k = %c0 to %c6 step %c1 {
    %ki = arith.index_cast %k : index to i32
    %kf = arith.sitofp %ki : i32 to f32
    %v = arith.mulf %kf, %half : f32
    memref.store %v, %m[%k] : memref<?xf32>
  }

  call @read_at(%m, %c0) : (memref<?xf32>, index) -> ()
  call @read_at(%m, %c3) : (memref<?xf32>, index) -> ()
  call @read_at(%m, %c6) : (memref<?xf32>, index) -> ()
  // CHECK: ( 0, 0.5, 1, 1.5 )
  // CHECK-NEXT: ( 1.5, 2, 2.5, -1 )
  // CHECK-NEXT: ( -1, -1, -1, -1 )

  call @read_masked(%m, %c1, %c3) : (memref<?xf32>, index, index) -> ()
  call @read_masked(%m, %c4, %c4) : (memref<?xf32>, index, index) -> ()
  call @read_masked(%m, %c0, %c0) : (memref<?xf32>, index, index) -> ()
  // CHECK-NEXT: ( 0.5, 1, 1.5, 99, 99 )
  // CHECK-NEXT: ( 2, 2.5, 99, 99, 99 )
  // CHECK-NEXT: ( 99, 99, 99, 99, 99 )

  // A 2-D read of a 2x3 view past its last column, and one broadcasting a column.
  %mat = memref.alloc() : memref<2x3xf32>
  %v6 = vector.transfer_read %m[%c0], %half {in_bounds = [true]} : memref<?xf32>, vector<6xf32>
  %v23 = vector.shape_cast %v6 : vector<6xf32> to vector<2x3xf32>
  vector.transfer_write %v23, %mat[%c0, %c0] {in_bounds = [true, true]}
      : vector<2x3xf32>, memref<2x3xf32>
  %pad2 = arith.constant 7.0 : f32
  %r2 = vector.transfer_read %mat[%c0, %c1], %pad2 : memref<2x3xf32>, vector<3x4xf32>
  vector.print %r2 : vector<3x4xf32>
  // CHECK-NEXT: ( ( 0.5, 1, 7, 7 ), ( 2, 2.5, 7, 7 ), ( 7, 7, 7, 7 ) )
  %bc = vector.transfer_read %mat[%c0, %c2], %pad2
      {permutation_map = affine_map<(d0, d1) -> (0, d0)>, in_bounds = [true, false]}
      : memref<2x3xf32>, vector<2x3xf32>
  vector.print %bc : vector<2x3xf32>
  // CHECK-NEXT: ( ( 1, 2.5, 7 ), ( 1, 2.5, 7 ) )

  // A masked write changes only the selected lanes, an out-of-bounds one none past the end.
  %ones = arith.constant dense<[10.0, 20.0, 30.0, 40.0]> : vector<4xf32>
  %sel = arith.constant dense<[true, false, false, true]> : vector<4xi1>
  vector.transfer_write %ones, %m[%c0], %sel : vector<4xf32>, memref<?xf32>
  vector.transfer_write %ones, %m[%c4] : vector<4xf32>, memref<?xf32>
  %all = vector.transfer_read %m[%c0], %pad2 : memref<?xf32>, vector<8xf32>
  vector.print %all : vector<8xf32>
  // CHECK-NEXT: ( 10, 0.5, 1, 40, 10, 20, 7, 7 )

  memref.dealloc %mat : memref<2x3xf32>
  memref.dealloc %m : memref<?xf32>
  return
}
