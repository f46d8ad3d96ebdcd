// pymlirjit's own runner test: an i32 entry result with mlir-runner's double-dash
// spelling of the optimization level (--O3), computing a greatest common divisor with
// scf.while.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-scf-to-cf),convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner --O3 -e gcd_of_constants -entry-point-result=i32 | FileCheck %s

func.func @gcd(%a: i32, %b: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %r:2 = scf.while (%x = %a, %y = %b) : (i32, i32) -> (i32, i32) {
    %more = arith.cmpi ne, %y, %zero : i32
    scf.condition(%more) %x, %y : i32, i32
  } do {
  ^bb0(%x: i32, %y: i32):
    %rem = arith.remui %x, %y : i32
    scf.yield %y, %rem : i32, i32
  }
  return %r#0 : i32
}

// CHECK: 21
func.func @gcd_of_constants() -> i32 {
  %a = arith.constant 1071 : i32
  %b = arith.constant 462 : i32
  %g = func.call @gcd(%a, %b) : (i32, i32) -> i32
  return %g : i32
}
