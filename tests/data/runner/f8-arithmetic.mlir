// pymlirjit's own runner test: arithmetic on an 8-bit float LLVM has no type for
// (f8E5M2; 3 - 0.75 rounds to 2 there), done through MLIR's APFloat runtime, next to f32 math that stays native.
// RUN: mlir-opt %s --convert-arith-to-apfloat --convert-math-to-apfloat --convert-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils,%mlir_apfloat_wrappers | FileCheck %s

func.func @scaled_sum(%x: f8E5M2, %y: f8E5M2, %k: f8E5M2) -> f8E5M2 {
  %s = arith.addf %x, %y : f8E5M2
  %p = arith.mulf %s, %k : f8E5M2
  return %p : f8E5M2
}

func.func @main() {
  %x = arith.constant 3.0 : f8E5M2
  %y = arith.constant -0.75 : f8E5M2
  %k = arith.constant 4.0 : f8E5M2
  %r = func.call @scaled_sum(%x, %y, %k) : (f8E5M2, f8E5M2, f8E5M2) -> f8E5M2
  vector.print %r : f8E5M2
  // CHECK: 8
  %w = arith.extf %r : f8E5M2 to f32
  %d = arith.constant 3.2 : f32
  %h = arith.divf %w, %d : f32
  vector.print %h : f32
  // CHECK-NEXT: 2.5
  return
}
