// pymlirjit's own runner test: llvm.mlir.global_ctors and global_dtors: two constructors
// run by priority before the entry, the destructor after it; the first constructor
// prints 1, the entry 2 and the destructor 3, and the second constructor sets a
// global the entry reads.
// RUN: mlir-opt %s -convert-func-to-llvm -convert-arith-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s

// CHECK: 1
// CHECK-NEXT: 2
// CHECK-NEXT: 30
// CHECK-NEXT: 3
// CHECK-NOT: {{.}}

module {
  // Listed out of order: priority 5 runs before priority 70.
  llvm.mlir.global_ctors ctors = [@set_answer, @say_one], priorities = [70 : i32, 5 : i32],
      data = [#llvm.zero, #llvm.zero]
  llvm.mlir.global_dtors dtors = [@say_three], priorities = [0 : i32], data = [#llvm.zero]

  llvm.mlir.global internal @answer(7 : i64) : i64

  // Declared in the LLVM dialect: constructors must be llvm.func, and what an
  // llvm.call names must be one when it is verified.
  llvm.func @printI64(i64)
  llvm.func @printNewline()

  llvm.func @say_one() {
    %one = llvm.mlir.constant(1 : i64) : i64
    llvm.call @printI64(%one) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    llvm.return
  }

  // Runs after @say_one and replaces the global's initial 7: the entry sees 30.
  llvm.func @set_answer() {
    %addr = llvm.mlir.addressof @answer : !llvm.ptr
    %v = llvm.mlir.constant(30 : i64) : i64
    llvm.store %v, %addr : i64, !llvm.ptr
    llvm.return
  }

  llvm.func @say_three() {
    %three = llvm.mlir.constant(3 : i64) : i64
    llvm.call @printI64(%three) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    llvm.return
  }

  func.func @main() {
    %two = arith.constant 2 : i64
    llvm.call @printI64(%two) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    %addr = llvm.mlir.addressof @answer : !llvm.ptr
    %v = llvm.load %addr : !llvm.ptr -> i64
    llvm.call @printI64(%v) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    return
  }
}
