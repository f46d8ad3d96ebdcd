// pymlirjit's own runner test: mlir-runner's default entry (@main) and default
// -entry-point-result (f32), neither given on the command line; an LLVM-dialect module
// computing the area of a triangle with sides 5, 6 and 7 by Heron's formula.
// RUN: mlir-runner %s | FileCheck %s

// s = 9, area = sqrt(9 * 4 * 3 * 2) = sqrt(216) = 14.6969...
// CHECK: 1.469694e+01
llvm.func @main() -> f32 {
  %a = llvm.mlir.constant(5.0 : f32) : f32
  %b = llvm.mlir.constant(6.0 : f32) : f32
  %c = llvm.mlir.constant(7.0 : f32) : f32
  %half = llvm.mlir.constant(0.5 : f32) : f32
  %ab = llvm.fadd %a, %b : f32
  %abc = llvm.fadd %ab, %c : f32
  %s = llvm.fmul %abc, %half : f32
  %sa = llvm.fsub %s, %a : f32
  %sb = llvm.fsub %s, %b : f32
  %sc = llvm.fsub %s, %c : f32
  %p1 = llvm.fmul %s, %sa : f32
  %p2 = llvm.fmul %p1, %sb : f32
  %p3 = llvm.fmul %p2, %sc : f32
  %area = llvm.intr.sqrt(%p3) : (f32) -> f32
  llvm.return %area : f32
}
