// pymlirjit's own runner test: memref.realloc, growing a static buffer and then a dynamic
// one (what a realloc adds is uninitialised: only the old elements and what is stored
// after it are printed). The default pipeline expands reallocs (expand-realloc).
// RUN: mlir-opt %s -expand-realloc -test-lower-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

// CHECK: ( 0, 0.5, 1, 1.5, 2, 2.5, 3 )
// CHECK-NEXT: ( 0, 0.5, 1, 1.5, 2, 2.5, 3, 5, 6, 7, 8 )

// m[i] = i / 2 for i in [from, to)
func.func @halves(%m: memref<?xf32>, %from: index, %to: index) {
  %c1 = arith.constant 1 : index
  %half = arith.constant 0.5 : f32
  scf.for %i = %from to %to step %c1 {
    %ii = arith.index_cast %i : index to i32
    %f = arith.sitofp %ii : i32 to f32
    %v = arith.mulf %f, %half : f32
    memref.store %v, %m[%i] : memref<?xf32>
  }
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c7 = arith.constant 7 : index
  %c11 = arith.constant 11 : index
  %a = memref.alloc() : memref<5xf32>
  %ad = memref.cast %a : memref<5xf32> to memref<?xf32>
  call @halves(%ad, %c0, %c5) : (memref<?xf32>, index, index) -> ()

  %b = memref.realloc %a : memref<5xf32> to memref<7xf32>
  %bd = memref.cast %b : memref<7xf32> to memref<?xf32>
  call @halves(%bd, %c5, %c7) : (memref<?xf32>, index, index) -> ()
  %bv = vector.load %b[%c0] : memref<7xf32>, vector<7xf32>
  vector.print %bv : vector<7xf32>

  %c = memref.realloc %bd(%c11) : memref<?xf32> to memref<?xf32>
  %c1 = arith.constant 1 : index
  %c2i = arith.constant 2 : i32
  scf.for %i = %c7 to %c11 step %c1 {
    %ii = arith.index_cast %i : index to i32
    %im = arith.subi %ii, %c2i : i32
    %f = arith.sitofp %im : i32 to f32
    memref.store %f, %c[%i] : memref<?xf32>
  }
  %cs = memref.cast %c : memref<?xf32> to memref<11xf32>
  %cv = vector.load %cs[%c0] : memref<11xf32>, vector<11xf32>
  vector.print %cv : vector<11xf32>
  memref.dealloc %c : memref<?xf32>
  return
}
