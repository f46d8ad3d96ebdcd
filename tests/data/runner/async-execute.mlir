// pymlirjit's own runner test: async.execute returning tokens and values, regions that
// wait on other tokens and values, and async.await on both, run on the async runtime.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(async-to-async-runtime,func.func(async-runtime-ref-counting,async-runtime-ref-counting-opt),convert-async-to-llvm,func.func(convert-linalg-to-loops,convert-scf-to-cf),convert-vector-to-llvm,finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void -O0 \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%mlir_async_runtime \
// RUN: | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>)

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %buf = memref.alloc() : memref<3xi32>
  %zero = arith.constant 0 : i32
  linalg.fill ins(%zero : i32) outs(%buf : memref<3xi32>)

  // A value: 6 * 7, computed off the main thread.
  %t1, %v1 = async.execute -> !async.value<i32> {
    %a = arith.constant 6 : i32
    %b = arith.constant 7 : i32
    %p = arith.muli %a, %b : i32
    async.yield %p : i32
  }

  // A token only: writes slot 0 once %v1 is ready.
  %t2 = async.execute [%t1] (%v1 as %x : !async.value<i32>) {
    memref.store %x, %buf[%c0] : memref<3xi32>
    async.yield
  }

  // A value depending on a value: slot 1 and a result, after %t2 wrote slot 0.
  %t3, %v3 = async.execute [%t2] (%v1 as %x : !async.value<i32>) -> !async.value<f32> {
    %w = memref.load %buf[%c0] : memref<3xi32>
    %s = arith.addi %w, %x : i32
    memref.store %s, %buf[%c1] : memref<3xi32>
    %f = arith.sitofp %s : i32 to f32
    %q = arith.constant 0.25 : f32
    %r = arith.mulf %f, %q : f32
    async.yield %r : f32
  }

  // Nested execute: the inner region's token is awaited inside the outer one.
  %t4 = async.execute {
    %inner = async.execute {
      %n = arith.constant -5 : i32
      memref.store %n, %buf[%c2] : memref<3xi32>
      async.yield
    }
    async.await %inner : !async.token
    async.yield
  }

  async.await %t4 : !async.token
  %r3 = async.await %v3 : !async.value<f32>
  vector.print %r3 : f32
  // CHECK: 21
  %r1 = async.await %v1 : !async.value<i32>
  vector.print %r1 : i32
  // CHECK-NEXT: 42
  %u = memref.cast %buf : memref<3xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [3] strides = [1] data =
  // CHECK-NEXT: [42,  84,  -5]
  memref.dealloc %buf : memref<3xi32>
  return
}
