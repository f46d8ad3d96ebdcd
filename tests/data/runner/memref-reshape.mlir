// pymlirjit's own runner test: memref.reshape with static, dynamic and unranked result
// shapes, memref.expand_shape and memref.collapse_shape, all viewing the same buffer.
// RUN: mlir-opt %s -convert-scf-to-cf -expand-strided-metadata -lower-affine \
// RUN:   -finalize-memref-to-llvm -convert-func-to-llvm -convert-cf-to-llvm \
// RUN:   -convert-arith-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>)
func.func private @printMemrefI32(memref<*xi32>)

func.func @print(%m: memref<*xf32>) {
  call @printMemrefF32(%m) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c6 = arith.constant 6 : index
  %c12 = arith.constant 12 : index

  // flat[k] = k * 1.25
  %flat = memref.alloc() : memref<12xf32>
  %step = arith.constant 1.25 : f32
  scf.for %k = %c0 to %c12 step %c1 {
    %ki = arith.index_cast %k : index to i64
    %kf = arith.sitofp %ki : i64 to f32
    %v = arith.mulf %kf, %step : f32
    memref.store %v, %flat[%k] : memref<12xf32>
  }

  // A static shape operand: 12 -> 3x4.
  %shape34 = memref.alloca() : memref<2xindex>
  %c4 = arith.constant 4 : index
  memref.store %c3, %shape34[%c0] : memref<2xindex>
  memref.store %c4, %shape34[%c1] : memref<2xindex>
  %m34 = memref.reshape %flat(%shape34)
      : (memref<12xf32>, memref<2xindex>) -> memref<3x4xf32>
  %u0 = memref.cast %m34 : memref<3x4xf32> to memref<*xf32>
  call @print(%u0) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [3, 4] strides = [4, 1] data =
  // CHECK-NEXT: [0,   1.25,   2.5,   3.75],
  // CHECK-NEXT: [5,   6.25,   7.5,   8.75],
  // CHECK-NEXT: [10,   11.25,   12.5,   13.75]]

  // Dynamic sizes: 12 -> ?x? with (6, 2).
  %shape62 = memref.alloca() : memref<2xindex>
  memref.store %c6, %shape62[%c0] : memref<2xindex>
  memref.store %c2, %shape62[%c1] : memref<2xindex>
  %m62 = memref.reshape %flat(%shape62)
      : (memref<12xf32>, memref<2xindex>) -> memref<?x?xf32>
  %d0 = memref.dim %m62, %c0 : memref<?x?xf32>
  %d1 = memref.dim %m62, %c1 : memref<?x?xf32>
  %last = memref.load %m62[%c3, %c1] : memref<?x?xf32>
  %dims = memref.alloca() : memref<3xi32>
  %d0i = arith.index_cast %d0 : index to i32
  %d1i = arith.index_cast %d1 : index to i32
  %lasti = arith.fptosi %last : f32 to i32
  memref.store %d0i, %dims[%c0] : memref<3xi32>
  memref.store %d1i, %dims[%c1] : memref<3xi32>
  memref.store %lasti, %dims[%c2] : memref<3xi32>
  %ud = memref.cast %dims : memref<3xi32> to memref<*xi32>
  call @printMemrefI32(%ud) : (memref<*xi32>) -> ()
  // m62[3][1] = flat[7] = 8.75, truncated to 8
  // CHECK: rank = 1 offset = 0 sizes = [3] strides = [1] data =
  // CHECK-NEXT: [6,  2,  8]

  // A shape of unknown length: the result is unranked (here rank 3, 2x3x2).
  %shape3 = memref.alloc(%c3) : memref<?xindex>
  memref.store %c2, %shape3[%c0] : memref<?xindex>
  memref.store %c3, %shape3[%c1] : memref<?xindex>
  memref.store %c2, %shape3[%c2] : memref<?xindex>
  %mu = memref.reshape %flat(%shape3)
      : (memref<12xf32>, memref<?xindex>) -> memref<*xf32>
  call @print(%mu) : (memref<*xf32>) -> ()
  // CHECK: rank = 3 offset = 0 sizes = [2, 3, 2] strides = [6, 2, 1] data =
  // CHECK-NEXT: {{\[}}{{\[}}[0,     1.25],
  // CHECK-NEXT:   [2.5,     3.75],
  // CHECK-NEXT:   [5,     6.25]],
  // CHECK-NEXT:  {{\[}}[7.5,     8.75],
  // CHECK-NEXT:   [10,     11.25],
  // CHECK-NEXT:   [12.5,     13.75]]]

  // expand_shape 12 -> 2x6 with a dynamic leading size, then collapse 2x6 -> 12
  // after writing through the expanded view.
  %dynflat = memref.cast %flat : memref<12xf32> to memref<?xf32>
  %ex = memref.expand_shape %dynflat [[0, 1]] output_shape [%c2, 6]
      : memref<?xf32> into memref<?x6xf32>
  %minus = arith.constant -1.0 : f32
  memref.store %minus, %ex[%c1, %c0] : memref<?x6xf32>
  %ue = memref.cast %ex : memref<?x6xf32> to memref<*xf32>
  call @print(%ue) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 6] strides = [6, 1] data =
  // CHECK-NEXT: [0,   1.25,   2.5,   3.75,   5,   6.25],
  // CHECK-NEXT: [-1,   8.75,   10,   11.25,   12.5,   13.75]]

  %m3d = memref.expand_shape %flat [[0, 1, 2]] output_shape [3, 2, 2]
      : memref<12xf32> into memref<3x2x2xf32>
  %co = memref.collapse_shape %m3d [[0], [1, 2]]
      : memref<3x2x2xf32> into memref<3x4xf32>
  %uc = memref.cast %co : memref<3x4xf32> to memref<*xf32>
  call @print(%uc) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [3, 4] strides = [4, 1] data =
  // CHECK-NEXT: [0,   1.25,   2.5,   3.75],
  // CHECK-NEXT: [5,   6.25,   -1,   8.75],
  // CHECK-NEXT: [10,   11.25,   12.5,   13.75]]

  memref.dealloc %shape3 : memref<?xindex>
  memref.dealloc %flat : memref<12xf32>
  return
}
