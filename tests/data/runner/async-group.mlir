// pymlirjit's own runner test: async groups: tokens added to a group created for a
// dynamic number of tasks (scf.for launching async.execute), async.await_all, and
// an empty group awaited at once.
// RUN: mlir-opt %s -async-to-async-runtime -async-runtime-ref-counting \
// RUN:   -async-runtime-ref-counting-opt -convert-async-to-llvm -convert-scf-to-cf \
// RUN:   -finalize-memref-to-llvm -convert-func-to-llvm -convert-cf-to-llvm \
// RUN:   -convert-arith-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void -O0 \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%mlir_async_runtime \
// RUN: | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>)
func.func private @printI64(i64)
func.func private @printNewline()

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index

  // Each task i writes i * i * i - 1 to its own slot.
  %cubes = memref.alloc(%c6) : memref<?xi32>
  %group = async.create_group %c6 : !async.group
  scf.for %i = %c0 to %c6 step %c1 {
    %token = async.execute {
      %ii = arith.index_cast %i : index to i32
      %sq = arith.muli %ii, %ii : i32
      %cu = arith.muli %sq, %ii : i32
      %one = arith.constant 1 : i32
      %v = arith.subi %cu, %one : i32
      memref.store %v, %cubes[%i] : memref<?xi32>
      async.yield
    }
    %rank = async.add_to_group %token, %group : !async.token
  }
  async.await_all %group

  %u = memref.cast %cubes : memref<?xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [6] strides = [1] data =
  // CHECK-NEXT: [-1,  0,  7,  26,  63,  124]

  // Two fixed tasks, their group indices printed, then awaited together.
  %c2 = arith.constant 2 : index
  %pair = async.create_group %c2 : !async.group
  %cell = memref.alloca() : memref<2xi32>
  %ta = async.execute {
    %a = arith.constant 11 : i32
    memref.store %a, %cell[%c0] : memref<2xi32>
    async.yield
  }
  %tb = async.execute [%ta] {
    %a = memref.load %cell[%c0] : memref<2xi32>
    %b = arith.addi %a, %a : i32
    memref.store %b, %cell[%c1] : memref<2xi32>
    async.yield
  }
  %ia = async.add_to_group %ta, %pair : !async.token
  %ib = async.add_to_group %tb, %pair : !async.token
  async.await_all %pair
  %ia64 = arith.index_cast %ia : index to i64
  %ib64 = arith.index_cast %ib : index to i64
  call @printI64(%ia64) : (i64) -> ()
  call @printNewline() : () -> ()
  call @printI64(%ib64) : (i64) -> ()
  call @printNewline() : () -> ()
  // CHECK-NEXT: 0
  // CHECK-NEXT: 1
  %uc = memref.cast %cell : memref<2xi32> to memref<*xi32>
  call @printMemrefI32(%uc) : (memref<*xi32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [2] strides = [1] data =
  // CHECK-NEXT: [11,  22]

  // A group nothing is added to is complete at once.
  %empty = async.create_group %c0 : !async.group
  async.await_all %empty
  %done = arith.constant 77 : i64
  call @printI64(%done) : (i64) -> ()
  call @printNewline() : () -> ()
  // CHECK-NEXT: 77

  memref.dealloc %cubes : memref<?xi32>
  return
}
