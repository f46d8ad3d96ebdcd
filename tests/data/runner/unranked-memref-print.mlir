// pymlirjit's own runner test: unranked memrefs of ranks 0 to 3 printed with
// printMemrefF32 / printMemrefI32, and inspected through memref.rank and memref.dim.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-linalg-to-loops),convert-scf-to-cf,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>)
func.func private @printMemrefI32(memref<*xi32>)
func.func private @printI64(i64)
func.func private @printNewline()

// Prints the rank and the product of the sizes of an unranked memref.
func.func @describe(%m: memref<*xf32>) {
  %rank = memref.rank %m : memref<*xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %count = scf.for %d = %c0 to %rank step %c1 iter_args(%acc = %c1) -> (index) {
    %size = memref.dim %m, %d : memref<*xf32>
    %p = arith.muli %acc, %size : index
    scf.yield %p : index
  }
  %r = arith.index_cast %rank : index to i64
  %n = arith.index_cast %count : index to i64
  call @printI64(%r) : (i64) -> ()
  call @printNewline() : () -> ()
  call @printI64(%n) : (i64) -> ()
  call @printNewline() : () -> ()
  call @printMemrefF32(%m) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %scalar = memref.alloca() : memref<f32>
  %pi = arith.constant 3.25 : f32
  memref.store %pi, %scalar[] : memref<f32>
  %u0 = memref.cast %scalar : memref<f32> to memref<*xf32>
  call @describe(%u0) : (memref<*xf32>) -> ()
  // CHECK: 0
  // CHECK-NEXT: 1
  // CHECK-NEXT: rank = 0 offset = 0 sizes = [] strides = [] data =
  // CHECK-NEXT: [3.25]

  %cube = memref.alloc() : memref<2x2x3xf32>
  %seven = arith.constant 7.0 : f32
  linalg.fill ins(%seven : f32) outs(%cube : memref<2x2x3xf32>)
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %small = arith.constant -0.125 : f32
  memref.store %small, %cube[%c1, %c0, %c2] : memref<2x2x3xf32>
  %u3 = memref.cast %cube : memref<2x2x3xf32> to memref<*xf32>
  call @describe(%u3) : (memref<*xf32>) -> ()
  // CHECK: 3
  // CHECK-NEXT: 12
  // CHECK-NEXT: rank = 3 offset = 0 sizes = [2, 2, 3] strides = [6, 3, 1] data =
  // CHECK-NEXT: {{\[}}{{\[}}[7,    7,    7],
  // CHECK-NEXT:   [7,    7,    7]],
  // CHECK-NEXT:  {{\[}}[7,    7,    -0.125],
  // CHECK-NEXT:   [7,    7,    7]]]

  // A dynamically sized vector back from unranked to ranked.
  %c5 = arith.constant 5 : index
  %row = memref.alloc(%c5) : memref<?xf32>
  %half = arith.constant 0.5 : f32
  linalg.fill ins(%half : f32) outs(%row : memref<?xf32>)
  %u1 = memref.cast %row : memref<?xf32> to memref<*xf32>
  %back = memref.cast %u1 : memref<*xf32> to memref<?xf32>
  %c4 = arith.constant 4 : index
  memref.store %seven, %back[%c4] : memref<?xf32>
  call @describe(%u1) : (memref<*xf32>) -> ()
  // CHECK: 1
  // CHECK-NEXT: 5
  // CHECK-NEXT: rank = 1 offset = 0 sizes = [5] strides = [1] data =
  // CHECK-NEXT: [0.5,  0.5,  0.5,  0.5,  7]

  %ints = memref.alloca() : memref<3x2xi32>
  %minus = arith.constant -40 : i32
  linalg.fill ins(%minus : i32) outs(%ints : memref<3x2xi32>)
  %big = arith.constant 2147483647 : i32
  memref.store %big, %ints[%c2, %c1] : memref<3x2xi32>
  %ui = memref.cast %ints : memref<3x2xi32> to memref<*xi32>
  call @printMemrefI32(%ui) : (memref<*xi32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
  // CHECK-NEXT: [-40,   -40],
  // CHECK-NEXT: [-40,   -40],
  // CHECK-NEXT: [-40,   2147483647]]

  memref.dealloc %row : memref<?xf32>
  memref.dealloc %cube : memref<2x2x3xf32>
  return
}
