// pymlirjit's own runner test: a module already in the LLVM dialect (no mlir-opt):
// llvm.func @main with a loop of blocks, a call to another llvm.func and an internal
// global, printing with printI64 / printNewline from the runner utilities.
// RUN: mlir-runner %s -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s

module {
  llvm.func @printI64(i64)
  llvm.func @printNewline()

  llvm.mlir.global internal @calls(0 : i64) : i64

  // Collatz steps of %n to 1 (counting calls in @calls).
  llvm.func @collatz(%n: i64) -> i64 {
    %addr = llvm.mlir.addressof @calls : !llvm.ptr
    %c = llvm.load %addr : !llvm.ptr -> i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %c1 = llvm.add %c, %one : i64
    llvm.store %c1, %addr : i64, !llvm.ptr
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.br ^loop(%n, %zero : i64, i64)
  ^loop(%x: i64, %steps: i64):
    %done = llvm.icmp "eq" %x, %one : i64
    llvm.cond_br %done, ^exit(%steps : i64), ^body
  ^body:
    %two = llvm.mlir.constant(2 : i64) : i64
    %three = llvm.mlir.constant(3 : i64) : i64
    %bit = llvm.and %x, %one : i64
    %odd = llvm.icmp "ne" %bit, %zero : i64
    %half = llvm.udiv %x, %two : i64
    %t = llvm.mul %x, %three : i64
    %up = llvm.add %t, %one : i64
    %next = llvm.select %odd, %up, %half : i1, i64
    %s = llvm.add %steps, %one : i64
    llvm.br ^loop(%next, %s : i64, i64)
  ^exit(%r: i64):
    llvm.return %r : i64
  }

  llvm.func @show(%v: i64) {
    llvm.call @printI64(%v) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    llvm.return
  }

  llvm.func @main() {
    %six = llvm.mlir.constant(6 : i64) : i64
    %s6 = llvm.call @collatz(%six) : (i64) -> i64
    llvm.call @show(%s6) : (i64) -> ()
    // CHECK: 8
    %big = llvm.mlir.constant(27 : i64) : i64
    %s27 = llvm.call @collatz(%big) : (i64) -> i64
    llvm.call @show(%s27) : (i64) -> ()
    // CHECK-NEXT: 111
    %one = llvm.mlir.constant(1 : i64) : i64
    %s1 = llvm.call @collatz(%one) : (i64) -> i64
    llvm.call @show(%s1) : (i64) -> ()
    // CHECK-NEXT: 0
    %addr = llvm.mlir.addressof @calls : !llvm.ptr
    %n = llvm.load %addr : !llvm.ptr -> i64
    llvm.call @show(%n) : (i64) -> ()
    // CHECK-NEXT: 3
    llvm.return
  }
}
