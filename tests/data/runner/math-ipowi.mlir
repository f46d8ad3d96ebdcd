// pymlirjit's own runner test: math.ipowi (integer powers, which no LLVM intrinsic
// lowers; convert-math-to-funcs outlines them) on i32 and i64, positive and negative bases.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(convert-math-to-funcs,func.func(convert-scf-to-cf),convert-vector-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

func.func @power_i32(%b: i32, %e: i32) -> i32 {
  %r = math.ipowi %b, %e : i32
  return %r : i32
}

func.func @main() {
  %c3 = arith.constant 3 : i32
  %c5 = arith.constant 5 : i32
  %cm2 = arith.constant -2 : i32
  %c0 = arith.constant 0 : i32
  // CHECK: 243
  %a = call @power_i32(%c3, %c5) : (i32, i32) -> i32
  vector.print %a : i32
  // CHECK-NEXT: -32
  %b = call @power_i32(%cm2, %c5) : (i32, i32) -> i32
  vector.print %b : i32
  // CHECK-NEXT: 1
  %c = call @power_i32(%cm2, %c0) : (i32, i32) -> i32
  vector.print %c : i32
  // 7^20 = 79792266297612001 fits in i64
  // CHECK-NEXT: 79792266297612001
  %base = arith.constant 7 : i64
  %exp = arith.constant 20 : i64
  %d = math.ipowi %base, %exp : i64
  vector.print %d : i64
  return
}
