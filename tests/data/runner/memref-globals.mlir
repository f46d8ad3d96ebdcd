// pymlirjit's own runner test: memref.global, constant and mutable, scalar and ranked:
// read through memref.get_global, written, and seen written by a later get_global.
// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(convert-scf-to-cf),finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,convert-arith-to-llvm,reconcile-unrealized-casts)" \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

memref.global "private" constant @weights : memref<5xi32> = dense<[7, -2, 9, 0, 4]>
memref.global "private" @calls : memref<i32> = dense<100>
memref.global "private" @grid : memref<2x3xf32> = dense<[[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]>
memref.global @scratch : memref<4xi32> = uninitialized

func.func private @printMemrefI32(memref<*xi32>)
func.func private @printMemrefF32(memref<*xf32>)

// Adds the sum of @weights to @calls and returns the new count.
func.func @bump() -> i32 {
  %w = memref.get_global @weights : memref<5xi32>
  %n = memref.get_global @calls : memref<i32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %zero = arith.constant 0 : i32
  %sum = scf.for %i = %c0 to %c5 step %c1 iter_args(%acc = %zero) -> (i32) {
    %x = memref.load %w[%i] : memref<5xi32>
    %a = arith.addi %acc, %x : i32
    scf.yield %a : i32
  }
  %old = memref.load %n[] : memref<i32>
  %new = arith.addi %old, %sum : i32
  memref.store %new, %n[] : memref<i32>
  return %new : i32
}

// Scales row %r of @grid by %k in place.
func.func @scale_row(%r: index, %k: f32) {
  %g = memref.get_global @grid : memref<2x3xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  scf.for %j = %c0 to %c3 step %c1 {
    %x = memref.load %g[%r, %j] : memref<2x3xf32>
    %y = arith.mulf %x, %k : f32
    memref.store %y, %g[%r, %j] : memref<2x3xf32>
  }
  return
}

func.func @main() {
  %w = memref.get_global @weights : memref<5xi32>
  %uw = memref.cast %w : memref<5xi32> to memref<*xi32>
  call @printMemrefI32(%uw) : (memref<*xi32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [5] strides = [1] data =
  // CHECK-NEXT: [7,  -2,  9,  0,  4]

  %first = call @bump() : () -> i32
  %second = call @bump() : () -> i32
  %s = memref.get_global @scratch : memref<4xi32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %n = memref.get_global @calls : memref<i32>
  %now = memref.load %n[] : memref<i32>
  %diff = arith.subi %second, %first : i32
  memref.store %first, %s[%c0] : memref<4xi32>
  memref.store %second, %s[%c1] : memref<4xi32>
  memref.store %now, %s[%c2] : memref<4xi32>
  memref.store %diff, %s[%c3] : memref<4xi32>
  %s2 = memref.get_global @scratch : memref<4xi32>
  %us = memref.cast %s2 : memref<4xi32> to memref<*xi32>
  call @printMemrefI32(%us) : (memref<*xi32>) -> ()
  // CHECK: rank = 1 offset = 0 sizes = [4] strides = [1] data =
  // CHECK-NEXT: [118,  136,  136,  18]

  %un = memref.cast %n : memref<i32> to memref<*xi32>
  call @printMemrefI32(%un) : (memref<*xi32>) -> ()
  // CHECK: rank = 0 offset = 0 sizes = [] strides = [] data =
  // CHECK-NEXT: [136]

  %two = arith.constant 2.0 : f32
  %neg = arith.constant -1.0 : f32
  call @scale_row(%c1, %two) : (index, f32) -> ()
  call @scale_row(%c0, %neg) : (index, f32) -> ()
  call @scale_row(%c1, %two) : (index, f32) -> ()
  %g = memref.get_global @grid : memref<2x3xf32>
  %ug = memref.cast %g : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%ug) : (memref<*xf32>) -> ()
  // CHECK: rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
  // CHECK-NEXT: [-0.5,   -1.5,   -2.5],
  // CHECK-NEXT: [14,   18,   22]]
  return
}
