// pymlirjit's own runner test: a naive sgemm, C = A * B + C, as affine.for loops over
// 2x2 tiles of C, each a linalg.matmul on subviews of the operands; inputs made by
// linalg.generic with linalg.index, C initialised with linalg.fill.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-linalg-to-affine-loops),lower-affine,convert-scf-to-cf,expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

#id = affine_map<(i, j) -> (i, j)>

func.func private @printMemrefF32(memref<*xf32>)

// m[i][j] = a * i + b * j + c
func.func @init(%m: memref<?x?xf32>, %a: f32, %b: f32, %c: f32) {
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%m : memref<?x?xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i32
    %jj = arith.index_cast %j : index to i32
    %fi = arith.sitofp %ii : i32 to f32
    %fj = arith.sitofp %jj : i32 to f32
    %x = arith.mulf %a, %fi : f32
    %y = arith.mulf %b, %fj : f32
    %s = arith.addf %x, %y : f32
    %r = arith.addf %s, %c : f32
    linalg.yield %r : f32
  }
  return
}

// C (4x6) += A (4x3) * B (3x6), one 2x2 tile of C at a time.
func.func @sgemm(%A: memref<4x3xf32>, %B: memref<3x6xf32>, %C: memref<4x6xf32>) {
  affine.for %i = 0 to 4 step 2 {
    affine.for %j = 0 to 6 step 2 {
      %a = memref.subview %A[%i, 0] [2, 3] [1, 1]
          : memref<4x3xf32> to memref<2x3xf32, strided<[3, 1], offset: ?>>
      %b = memref.subview %B[0, %j] [3, 2] [1, 1]
          : memref<3x6xf32> to memref<3x2xf32, strided<[6, 1], offset: ?>>
      %c = memref.subview %C[%i, %j] [2, 2] [1, 1]
          : memref<4x6xf32> to memref<2x2xf32, strided<[6, 1], offset: ?>>
      linalg.matmul
          ins(%a, %b : memref<2x3xf32, strided<[3, 1], offset: ?>>,
                       memref<3x2xf32, strided<[6, 1], offset: ?>>)
          outs(%c : memref<2x2xf32, strided<[6, 1], offset: ?>>)
    }
  }
  return
}

func.func @main() {
  %A = memref.alloc() : memref<4x3xf32>
  %B = memref.alloc() : memref<3x6xf32>
  %C = memref.alloc() : memref<4x6xf32>
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %m1 = arith.constant -1.0 : f32
  %two = arith.constant 2.0 : f32
  %dA = memref.cast %A : memref<4x3xf32> to memref<?x?xf32>
  %dB = memref.cast %B : memref<3x6xf32> to memref<?x?xf32>
  // A[i][k] = i + 0.5 k + 1 ; B[k][j] = 2 k - j
  call @init(%dA, %one, %half, %one) : (memref<?x?xf32>, f32, f32, f32) -> ()
  call @init(%dB, %two, %m1, %zero) : (memref<?x?xf32>, f32, f32, f32) -> ()
  %bias = arith.constant 100.0 : f32
  linalg.fill ins(%bias : f32) outs(%C : memref<4x6xf32>)
  call @sgemm(%A, %B, %C) : (memref<4x3xf32>, memref<3x6xf32>, memref<4x6xf32>) -> ()
  %u = memref.cast %C : memref<4x6xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  // C[i][j] = 100 + sum_k (i + 0.5k + 1)(2k - j) = 100 + 6i + 11 - j (3i + 4.5)
  // CHECK: rank = 2 offset = 0 sizes = [4, 6] strides = [6, 1] data =
  // CHECK-NEXT: [111,   106.5,   102,   97.5,   93,   88.5],
  // CHECK-NEXT: [117,   109.5,   102,   94.5,   87,   79.5],
  // CHECK-NEXT: [123,   112.5,   102,   91.5,   81,   70.5],
  // CHECK-NEXT: [129,   115.5,   102,   88.5,   75,   61.5]]
  memref.dealloc %C : memref<4x6xf32>
  memref.dealloc %B : memref<3x6xf32>
  memref.dealloc %A : memref<4x3xf32>
  return
}
