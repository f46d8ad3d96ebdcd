// pymlirjit's own runner test: LLVM's matrix intrinsics (a 2x3 by 3x2 product and a
// transpose, column-major) with LLVM's own options on the runner's command line.
// RUN: mlir-opt %s -convert-vector-to-scf -convert-scf-to-cf -convert-vector-to-llvm \
// RUN:   -convert-func-to-llvm -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void -O1 -enable-matrix \
// RUN:   -matrix-default-layout=column-major -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

func.func @main() {
  // Column-major 2x3: columns (1, -2), (0.5, 4), (3, 0).
  %a = arith.constant dense<[1.0, -2.0, 0.5, 4.0, 3.0, 0.0]> : vector<6xf32>
  // Column-major 3x2: columns (2, 1, -1), (0, 6, 0.25).
  %b = arith.constant dense<[2.0, 1.0, -1.0, 0.0, 6.0, 0.25]> : vector<6xf32>
  %p = llvm.intr.matrix.multiply %a, %b
    { lhs_rows = 2 : i32, lhs_columns = 3 : i32, rhs_columns = 2 : i32 }
    : (vector<6xf32>, vector<6xf32>) -> vector<4xf32>
  vector.print %p : vector<4xf32>
  // CHECK: ( -0.5, 0, 3.75, 24 )
  %t = llvm.intr.matrix.transpose %a { rows = 2 : i32, columns = 3 : i32 }
    : vector<6xf32> into vector<6xf32>
  vector.print %t : vector<6xf32>
  // CHECK-NEXT: ( 1, 0.5, 3, -2, 4, 0 )
  return
}
