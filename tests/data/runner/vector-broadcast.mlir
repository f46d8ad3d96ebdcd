// pymlirjit's own runner test: vector.broadcast of scalars and of vectors to higher
// ranks, with dimensions of size one stretched, printed with vector.print.
// RUN: mlir-opt %s -convert-vector-to-scf -convert-scf-to-cf -convert-vector-to-llvm \
// RUN:   -convert-func-to-llvm -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func @main() {
  %f = arith.constant -2.75 : f32
  %s = vector.broadcast %f : f32 to vector<3xf32>
  vector.print %s : vector<3xf32>
  // CHECK: ( -2.75, -2.75, -2.75 )

  %i = arith.constant 9 : i64
  %si = vector.broadcast %i : i64 to vector<2x3xi64>
  vector.print %si : vector<2x3xi64>
  // CHECK-NEXT: ( ( 9, 9, 9 ), ( 9, 9, 9 ) )

  // A row to every row of a matrix.
  %row = arith.constant dense<[1.5, 0.0, -8.0, 4.0]> : vector<4xf32>
  %m = vector.broadcast %row : vector<4xf32> to vector<2x4xf32>
  vector.print %m : vector<2x4xf32>
  // CHECK-NEXT: ( ( 1.5, 0, -8, 4 ), ( 1.5, 0, -8, 4 ) )

  // A column (unit trailing dimension) stretched along it.
  %col = arith.constant dense<[[3], [-1], [6]]> : vector<3x1xi32>
  %c = vector.broadcast %col : vector<3x1xi32> to vector<3x2xi32>
  vector.print %c : vector<3x2xi32>
  // CHECK-NEXT: ( ( 3, 3 ), ( -1, -1 ), ( 6, 6 ) )

  // Unit dimensions in the middle, with a leading dimension added.
  %mid = arith.constant dense<[[[1, 2]], [[3, 4]]]> : vector<2x1x2xi8>
  %b = vector.broadcast %mid : vector<2x1x2xi8> to vector<2x2x3x2xi8>
  vector.print %b : vector<2x2x3x2xi8>
  // CHECK-NEXT: ( ( ( ( 1, 2 ), ( 1, 2 ), ( 1, 2 ) ), ( ( 3, 4 ), ( 3, 4 ), ( 3, 4 ) ) ), ( ( ( 1, 2 ), ( 1, 2 ), ( 1, 2 ) ), ( ( 3, 4 ), ( 3, 4 ), ( 3, 4 ) ) ) )

  // A 0-d vector to a 1-d one, and a 1-element vector to several.
  %z = arith.constant dense<true> : vector<i1>
  %zb = vector.broadcast %z : vector<i1> to vector<5xi1>
  vector.print %zb : vector<5xi1>
  // CHECK-NEXT: ( 1, 1, 1, 1, 1 )
  %one = arith.constant dense<0.125> : vector<1xf64>
  %ob = vector.broadcast %one : vector<1xf64> to vector<2x3xf64>
  vector.print %ob : vector<2x3xf64>
  // CHECK-NEXT: ( ( 0.125, 0.125, 0.125 ), ( 0.125, 0.125, 0.125 ) )
  return
}
