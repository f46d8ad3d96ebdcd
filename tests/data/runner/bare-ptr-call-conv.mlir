// pymlirjit's own runner test: the bare-pointer memref calling convention: statically
// shaped memrefs passed between functions as plain pointers, written by the callee
// and read back by the caller.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-scf-to-cf),finalize-memref-to-llvm,convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},convert-cf-to-llvm,convert-arith-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s

func.func private @printF32(f32)
func.func private @printI64(i64)
func.func private @printComma()
func.func private @printNewline()

// out[i] = in[i] * in[i] + bias, returns the sum of out.
func.func @square_plus(%in: memref<5xf32>, %out: memref<5xf32>, %bias: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %i = %c0 to %c5 step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %in[%i] : memref<5xf32>
    %sq = arith.mulf %x, %x : f32
    %y = arith.addf %sq, %bias : f32
    memref.store %y, %out[%i] : memref<5xf32>
    %a = arith.addf %acc, %y : f32
    scf.yield %a : f32
  }
  return %sum : f32
}

// Swaps the two rows of a 2x3 i64 matrix in place.
func.func @swap_rows(%m: memref<2x3xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  scf.for %j = %c0 to %c3 step %c1 {
    %a = memref.load %m[%c0, %j] : memref<2x3xi64>
    %b = memref.load %m[%c1, %j] : memref<2x3xi64>
    memref.store %b, %m[%c0, %j] : memref<2x3xi64>
    memref.store %a, %m[%c1, %j] : memref<2x3xi64>
  }
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %in = memref.alloca() : memref<5xf32>
  %out = memref.alloc() : memref<5xf32>
  %step = arith.constant -1.5 : f32
  scf.for %i = %c0 to %c5 step %c1 {
    %ii = arith.index_cast %i : index to i32
    %f = arith.sitofp %ii : i32 to f32
    %x = arith.mulf %f, %step : f32
    memref.store %x, %in[%i] : memref<5xf32>
  }
  %bias = arith.constant 0.25 : f32
  %sum = call @square_plus(%in, %out, %bias) : (memref<5xf32>, memref<5xf32>, f32) -> f32
  scf.for %i = %c0 to %c5 step %c1 {
    %y = memref.load %out[%i] : memref<5xf32>
    func.call @printF32(%y) : (f32) -> ()
    func.call @printComma() : () -> ()
  }
  func.call @printF32(%sum) : (f32) -> ()
  func.call @printNewline() : () -> ()
  // in = [0, -1.5, -3, -4.5, -6]: out = [0.25, 2.5, 9.25, 20.5, 36.25], sum 68.75
  // CHECK: 0.25, 2.5, 9.25, 20.5, 36.25, 68.75

  %m = memref.alloc() : memref<2x3xi64>
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %r = arith.muli %i, %c3 : index
      %k = arith.addi %r, %j : index
      %v = arith.index_cast %k : index to i64
      memref.store %v, %m[%i, %j] : memref<2x3xi64>
    }
  }
  func.call @swap_rows(%m) : (memref<2x3xi64>) -> ()
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %v = memref.load %m[%i, %j] : memref<2x3xi64>
      func.call @printI64(%v) : (i64) -> ()
      func.call @printComma() : () -> ()
    }
  }
  func.call @printNewline() : () -> ()
  // CHECK-NEXT: 3, 4, 5, 0, 1, 2,
  memref.dealloc %m : memref<2x3xi64>
  memref.dealloc %out : memref<5xf32>
  return
}
