// pymlirjit's own runner test: an entry returning f32, printed by the runner with
// -entry-point-result=f32: a Newton iteration for the cube root of 10 in scf.while,
// plus the iteration count, computed in f32.
// RUN: mlir-opt %s -convert-scf-to-cf -convert-math-to-llvm -convert-func-to-llvm \
// RUN:   -convert-cf-to-llvm -convert-arith-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=f32 | FileCheck %s

// cbrt(10) = 2.15443..., reached in 8 steps from 10 (the last one moving less than 1e-4);
// the entry returns root + 1000 * steps.
// CHECK: 8.002154e+03

func.func @cbrt(%a: f32) -> (f32, i32) {
  %three = arith.constant 3.0 : f32
  %two = arith.constant 2.0 : f32
  %tol = arith.constant 1.0e-4 : f32
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %r:2 = scf.while (%x = %a, %n = %zero) : (f32, i32) -> (f32, i32) {
    // x' = (2x + a / x^2) / 3
    %xx = arith.mulf %x, %x : f32
    %q = arith.divf %a, %xx : f32
    %t = arith.mulf %two, %x : f32
    %s = arith.addf %t, %q : f32
    %next = arith.divf %s, %three : f32
    %d = arith.subf %next, %x : f32
    %ad = math.absf %d : f32
    %more = arith.cmpf ogt, %ad, %tol : f32
    %n1 = arith.addi %n, %one : i32
    scf.condition(%more) %next, %n1 : f32, i32
  } do {
  ^bb0(%x: f32, %n: i32):
    scf.yield %x, %n : f32, i32
  }
  return %r#0, %r#1 : f32, i32
}

func.func @main() -> f32 {
  %ten = arith.constant 10.0 : f32
  %root, %steps = call @cbrt(%ten) : (f32) -> (f32, i32)
  %k = arith.constant 1000.0 : f32
  %fs = arith.sitofp %steps : i32 to f32
  %w = arith.mulf %fs, %k : f32
  %r = arith.addf %w, %root : f32
  return %r : f32
}
