// pymlirjit's own runner test: elementwise arith and math on tensors (addf, mulf, minimumf,
// maxsi, sitofp, divf, math.absf, math.sqrt) turned into linalg, bufferized and printed.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-elementwise-to-linalg),one-shot-bufferize{bufferize-function-boundaries},func.func(convert-linalg-to-loops),expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-math-to-llvm,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>)
func.func private @printMemrefI32(memref<*xi32>)

func.func @print(%t: tensor<2x3xf32>) {
  %m = bufferization.to_buffer %t : tensor<2x3xf32> to memref<2x3xf32>
  %u = memref.cast %m : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %a = arith.constant dense<[[1.0, -2.0, 9.0], [0.25, 16.0, -0.5]]> : tensor<2x3xf32>
  %b = arith.constant dense<[[3.0, 3.0, -1.0], [4.0, 0.5, 2.0]]> : tensor<2x3xf32>

  // (a + b) * b
  %s = arith.addf %a, %b : tensor<2x3xf32>
  %p = arith.mulf %s, %b : tensor<2x3xf32>
  call @print(%p) : (tensor<2x3xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
  // CHECK-NEXT: [12,   3,   -8],
  // CHECK-NEXT: [17,   8.25,   3]]

  // min(sqrt(|a|), b) (no tensor of i1: MLIR 22 cannot store i1 elements to memory).
  %abs = math.absf %a : tensor<2x3xf32>
  %r = math.sqrt %abs : tensor<2x3xf32>
  %mn = arith.minimumf %r, %b : tensor<2x3xf32>
  call @print(%mn) : (tensor<2x3xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
  // CHECK-NEXT: [1,   1.41421,   -1],
  // CHECK-NEXT: [0.5,   0.5,   0.707107]]

  // Integers: max with a bound, then to float.
  %i = arith.constant dense<[[-7, 0, 12], [5, -1, 3]]> : tensor<2x3xi32>
  %lo = arith.constant dense<1> : tensor<2x3xi32>
  %mx = arith.maxsi %i, %lo : tensor<2x3xi32>
  %mm = bufferization.to_buffer %mx : tensor<2x3xi32> to memref<2x3xi32>
  %mu = memref.cast %mm : memref<2x3xi32> to memref<*xi32>
  call @printMemrefI32(%mu) : (memref<*xi32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
  // CHECK-NEXT: [1,   1,   12],
  // CHECK-NEXT: [5,   1,   3]]
  %f = arith.sitofp %mx : tensor<2x3xi32> to tensor<2x3xf32>
  %q = arith.divf %f, %b : tensor<2x3xf32>
  call @print(%q) : (tensor<2x3xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
  // CHECK-NEXT: [0.333333,   0.333333,   -12],
  // CHECK-NEXT: [1.25,   2,   1.5]]
  return
}
