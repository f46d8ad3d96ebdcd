// pymlirjit's own runner test: async.func coroutines (a value result, a token result, a
// call awaited inside another async.func, a memref handed over) and an assertion failing
// inside one, which marks its token as an error instead of stopping the program.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(async-func-to-async-runtime,async-to-async-runtime,func.func(async-runtime-ref-counting,async-runtime-ref-counting-opt),convert-async-to-llvm,func.func(convert-vector-to-scf,convert-scf-to-cf),convert-vector-to-llvm,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void -O0 \
// RUN:   -shared-libs=%mlir_c_runner_utils,%mlir_async_runtime \
// RUN: | FileCheck %s

// n * (n + 1) / 2, by a loop.
async.func @triangle(%n: i64) -> !async.value<i64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %upper = arith.index_cast %n : i64 to index
  %sum = scf.for %i = %c0 to %upper step %c1 iter_args(%acc = %zero) -> i64 {
    %k = arith.index_cast %i : index to i64
    %k1 = arith.addi %k, %one : i64
    %next = arith.addi %acc, %k1 : i64
    scf.yield %next : i64
  }
  return %sum : i64
}

// Awaits two other coroutines and multiplies their results.
async.func @product_of_triangles(%a: i64, %b: i64) -> !async.value<i64> {
  %ta = async.call @triangle(%a) : (i64) -> !async.value<i64>
  %tb = async.call @triangle(%b) : (i64) -> !async.value<i64>
  %va = async.await %ta : !async.value<i64>
  %vb = async.await %tb : !async.value<i64>
  %p = arith.muli %va, %vb : i64
  return %p : i64
}

// Writes a value into a buffer it receives; a token result only.
async.func @fill_slot(%buf: memref<4xi64>, %slot: index, %value: i64) -> !async.token {
  memref.store %value, %buf[%slot] : memref<4xi64>
  return
}

// Fails unless the argument is positive.
async.func @checked(%x: i64) -> !async.token {
  %zero = arith.constant 0 : i64
  %ok = arith.cmpi sgt, %x, %zero : i64
  cf.assert %ok, "not positive"
  return
}

func.func @main() {
  %c3 = arith.constant 3 : i64
  %c5 = arith.constant 5 : i64
  %c9 = arith.constant 9 : i64
  %cm2 = arith.constant -2 : i64

  // CHECK: 45
  %t9 = async.call @triangle(%c9) : (i64) -> !async.value<i64>
  %v9 = async.await %t9 : !async.value<i64>
  vector.print %v9 : i64

  // CHECK-NEXT: 90
  %tp = async.call @product_of_triangles(%c3, %c5) : (i64, i64) -> !async.value<i64>
  %vp = async.await %tp : !async.value<i64>
  vector.print %vp : i64

  // CHECK-NEXT: ( 0, 45, 0, 90 )
  %buf = memref.alloc() : memref<4xi64>
  %zero = arith.constant 0 : i64
  %i0 = arith.constant 0 : index
  %i1 = arith.constant 1 : index
  %i2 = arith.constant 2 : index
  %i3 = arith.constant 3 : index
  memref.store %zero, %buf[%i0] : memref<4xi64>
  memref.store %zero, %buf[%i2] : memref<4xi64>
  %f1 = async.call @fill_slot(%buf, %i1, %v9) : (memref<4xi64>, index, i64) -> !async.token
  %f3 = async.call @fill_slot(%buf, %i3, %vp) : (memref<4xi64>, index, i64) -> !async.token
  async.await %f1 : !async.token
  async.await %f3 : !async.token
  %vec = vector.transfer_read %buf[%i0], %zero : memref<4xi64>, vector<4xi64>
  vector.print %vec : vector<4xi64>
  memref.dealloc %buf : memref<4xi64>

  // CHECK-NEXT: 0
  // CHECK-NEXT: 1
  %good = async.call @checked(%c5) : (i64) -> !async.token
  async.runtime.await %good : !async.token
  %good_err = async.runtime.is_error %good : !async.token
  vector.print %good_err : i1
  %bad = async.call @checked(%cm2) : (i64) -> !async.token
  async.runtime.await %bad : !async.token
  %bad_err = async.runtime.is_error %bad : !async.token
  vector.print %bad_err : i1
  return
}
