// pymlirjit's own runner test: memref.copy between an identity layout, a transposed
// view, a strided subview and a dynamically shaped buffer.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-scf-to-cf),expand-strided-metadata,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>)

// src[i][j] = 10 * i + j - 0.5
func.func @fill(%m: memref<2x3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %ten = arith.constant 10.0 : f32
  %half = arith.constant 0.5 : f32
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %ii = arith.index_cast %i : index to i32
      %jj = arith.index_cast %j : index to i32
      %fi = arith.sitofp %ii : i32 to f32
      %fj = arith.sitofp %jj : i32 to f32
      %t = arith.mulf %fi, %ten : f32
      %u = arith.addf %t, %fj : f32
      %v = arith.subf %u, %half : f32
      memref.store %v, %m[%i, %j] : memref<2x3xf32>
    }
  }
  return
}

func.func @main() {
  %src = memref.alloc() : memref<2x3xf32>
  call @fill(%src) : (memref<2x3xf32>) -> ()

  // Identity layout into a transposed view: dst (3x2) ends up as src transposed.
  %dst = memref.alloc() : memref<3x2xf32>
  %view = memref.transpose %dst (i, j) -> (j, i)
      : memref<3x2xf32> to memref<2x3xf32, strided<[1, 2]>>
  memref.copy %src, %view : memref<2x3xf32> to memref<2x3xf32, strided<[1, 2]>>
  %u0 = memref.cast %dst : memref<3x2xf32> to memref<*xf32>
  call @printMemrefF32(%u0) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
  // CHECK-NEXT: [-0.5,   9.5],
  // CHECK-NEXT: [0.5,   10.5],
  // CHECK-NEXT: [1.5,   11.5]]

  // A strided subview (the last two columns) into a contiguous buffer.
  %sub = memref.subview %src[0, 1] [2, 2] [1, 1]
      : memref<2x3xf32> to memref<2x2xf32, strided<[3, 1], offset: 1>>
  %dense = memref.alloc() : memref<2x2xf32>
  memref.copy %sub, %dense
      : memref<2x2xf32, strided<[3, 1], offset: 1>> to memref<2x2xf32>
  %u1 = memref.cast %dense : memref<2x2xf32> to memref<*xf32>
  call @printMemrefF32(%u1) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 2] strides = [2, 1] data =
  // CHECK-NEXT: [0.5,   1.5],
  // CHECK-NEXT: [10.5,   11.5]]

  // A transposed, strided source into a dynamically shaped buffer.
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %dyn = memref.alloc(%c3, %c2) : memref<?x?xf32>
  %srcT = memref.transpose %src (i, j) -> (j, i)
      : memref<2x3xf32> to memref<3x2xf32, strided<[1, 3]>>
  memref.copy %srcT, %dyn : memref<3x2xf32, strided<[1, 3]>> to memref<?x?xf32>
  %u2 = memref.cast %dyn : memref<?x?xf32> to memref<*xf32>
  call @printMemrefF32(%u2) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
  // CHECK-NEXT: [-0.5,   9.5],
  // CHECK-NEXT: [0.5,   10.5],
  // CHECK-NEXT: [1.5,   11.5]]

  // Copying an empty buffer touches nothing (printMemref of an empty buffer reads one
  // element, so a strided column is printed instead).
  %c0 = arith.constant 0 : index
  %e0 = memref.alloc(%c0) : memref<?x3xf32>
  %e1 = memref.alloc(%c0) : memref<?x3xf32>
  memref.copy %e0, %e1 : memref<?x3xf32> to memref<?x3xf32>
  %col = memref.subview %src[0, 2] [2, 1] [1, 1]
      : memref<2x3xf32> to memref<2xf32, strided<[3], offset: 2>>
  %packed = memref.alloca() : memref<2xf32>
  memref.copy %col, %packed : memref<2xf32, strided<[3], offset: 2>> to memref<2xf32>
  %u3 = memref.cast %packed : memref<2xf32> to memref<*xf32>
  call @printMemrefF32(%u3) : (memref<*xf32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [2] strides = [1] data =
  // CHECK-NEXT: [1.5,  11.5]

  memref.dealloc %e0 : memref<?x3xf32>
  memref.dealloc %e1 : memref<?x3xf32>
  memref.dealloc %dyn : memref<?x?xf32>
  memref.dealloc %dense : memref<2x2xf32>
  memref.dealloc %dst : memref<3x2xf32>
  memref.dealloc %src : memref<2x3xf32>
  return
}
