// Builds a 2x3 memref and prints it with the MLIR C runner utils (like mlir-runner tests).
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %m = memref.alloc() : memref<2x3xf32>
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %k = arith.muli %i, %c3 : index
      %l = arith.addi %k, %j : index
      %li = arith.index_cast %l : index to i32
      %f = arith.sitofp %li : i32 to f32
      memref.store %f, %m[%i, %j] : memref<2x3xf32>
    }
  }
  %u = memref.cast %m : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  memref.dealloc %m : memref<2x3xf32>
  return
}
func.func private @printMemrefF32(memref<*xf32>) attributes { llvm.emit_c_interface }
