// pymlirjit's own runner test: arithmetic on a vector of 8-bit floats LLVM has no type
// for, which MLIR's APFloat passes unroll into runtime calls; the default pipeline must
// see the element type inside the vector type (vector<3xf8E4M3FN>) to run them.
// RUN: mlir-opt %s --convert-arith-to-apfloat --convert-vector-to-scf --convert-scf-to-cf \
// RUN:   --convert-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils,%mlir_apfloat_wrappers | FileCheck %s

// A call keeps the operands from being folded at compile time.
func.func @halves() -> vector<3xf8E4M3FN> {
  %h = arith.constant dense<[0.5, 1.5, -2.0]> : vector<3xf8E4M3FN>
  return %h : vector<3xf8E4M3FN>
}

func.func @main() {
  %a = arith.constant dense<[1.0, 2.0, 3.0]> : vector<3xf8E4M3FN>
  %b = func.call @halves() : () -> vector<3xf8E4M3FN>
  %s = arith.subf %a, %b : vector<3xf8E4M3FN>
  vector.print %s : vector<3xf8E4M3FN>
  // CHECK: ( 0.5, 0.5, 5 )
  return
}
