// pymlirjit's own runner test: a module that carries its own transform schedule (in the
// root module, marked as holding named sequences). The first RUN line applies it and then
// drops it; the second drops it unapplied. pymlirjit drops what a pipeline leaves of it
// (its default pipeline applies none), so every way prints the same matmul.
// RUN: mlir-opt %s -transform-interpreter -test-transform-dialect-erase-schedule -convert-linalg-to-loops -lower-affine -convert-scf-to-cf -expand-strided-metadata -lower-affine -finalize-memref-to-llvm -convert-arith-to-llvm -convert-func-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s
// RUN: mlir-opt %s -test-transform-dialect-erase-schedule -convert-linalg-to-loops -convert-scf-to-cf -expand-strided-metadata -lower-affine -finalize-memref-to-llvm -convert-arith-to-llvm -convert-func-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// C[i][j] = sum over k of (i + k) * (k - j) = 10 i - 5 i j + 30 - 10 j
// CHECK: rank = 2 offset = 0 sizes = [3, 4] strides = [4, 1] data =
// CHECK-NEXT: [30,   20,   10,   0],
// CHECK-NEXT: [40,   25,   10,   -5],
// CHECK-NEXT: [50,   30,   10,   -10]]

module attributes {transform.with_named_sequence} {
  func.func private @printMemrefF32(memref<*xf32>)

  // m[r][c] = r * rs + c * cs
  func.func @ramp(%m: memref<?x?xf32>, %rs: f32, %cs: f32) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = memref.dim %m, %c0 : memref<?x?xf32>
    %cols = memref.dim %m, %c1 : memref<?x?xf32>
    scf.for %r = %c0 to %rows step %c1 {
      scf.for %c = %c0 to %cols step %c1 {
        %ri = arith.index_cast %r : index to i32
        %ci = arith.index_cast %c : index to i32
        %rf = arith.sitofp %ri : i32 to f32
        %cf = arith.sitofp %ci : i32 to f32
        %a = arith.mulf %rf, %rs : f32
        %b = arith.mulf %cf, %cs : f32
        %v = arith.addf %a, %b : f32
        memref.store %v, %m[%r, %c] : memref<?x?xf32>
      }
    }
    return
  }

  func.func @product(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
    linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
    return
  }

  func.func @main() {
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %one = arith.constant 1.0 : f32
    %minus = arith.constant -1.0 : f32
    %zero = arith.constant 0.0 : f32
    %a = memref.alloc(%c3, %c5) : memref<?x?xf32>
    %b = memref.alloc(%c5, %c4) : memref<?x?xf32>
    %c = memref.alloc(%c3, %c4) : memref<?x?xf32>
    call @ramp(%a, %one, %one) : (memref<?x?xf32>, f32, f32) -> ()
    call @ramp(%b, %one, %minus) : (memref<?x?xf32>, f32, f32) -> ()
    linalg.fill ins(%zero : f32) outs(%c : memref<?x?xf32>)
    call @product(%a, %b, %c) : (memref<?x?xf32>, memref<?x?xf32>, memref<?x?xf32>) -> ()
    %u = memref.cast %c : memref<?x?xf32> to memref<*xf32>
    call @printMemrefF32(%u) : (memref<*xf32>) -> ()
    memref.dealloc %a : memref<?x?xf32>
    memref.dealloc %b : memref<?x?xf32>
    memref.dealloc %c : memref<?x?xf32>
    return
  }

  // Tile sizes that divide none of the dimensions: partial tiles on every edge.
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %tiled, %loops:3 = transform.structured.tile_using_for %mm tile_sizes [2, 3, 2]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
}
