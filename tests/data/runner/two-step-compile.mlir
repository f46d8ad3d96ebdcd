// pymlirjit's own runner test: two RUN lines as upstream's pack/mmt4d tests write them;
// the first lowers the file into lit's %t, the second runs %t. The harness runs them in
// order in one working directory and compares the ways on the second (its "passes" way
// takes the first line's passes). The entry sums 1..10 with scf.for and prints 55.
// RUN: mlir-opt %s -convert-scf-to-cf -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -convert-func-to-llvm -reconcile-unrealized-casts -o %t
// RUN: mlir-runner %t -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s

// CHECK: 55
// CHECK-NOT: {{.}}

func.func private @printI64(i64)
func.func private @printNewline()

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c11 = arith.constant 11 : index
  %zero = arith.constant 0 : i64
  %sum = scf.for %i = %c1 to %c11 step %c1 iter_args(%acc = %zero) -> (i64) {
    %v = arith.index_cast %i : index to i64
    %next = arith.addi %acc, %v : i64
    scf.yield %next : i64
  }
  func.call @printI64(%sum) : (i64) -> ()
  func.call @printNewline() : () -> ()
  return
}
