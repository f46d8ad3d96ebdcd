module {
  llvm.mlir.global_ctors ctors = [@ctor], priorities = [0 : i32], data = [#llvm.zero]
  llvm.mlir.global_dtors dtors = [@dtor], priorities = [0 : i32], data = [#llvm.zero]
  llvm.func @printI64(i64)
  llvm.func @printNewline()
  llvm.func @ctor() {
    %0 = llvm.mlir.constant(1 : i64) : i64
    llvm.call @printI64(%0) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    llvm.return
  }
  llvm.func @dtor() {
    %0 = llvm.mlir.constant(3 : i64) : i64
    llvm.call @printI64(%0) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    llvm.return
  }
  llvm.func @main() -> f32 {
    %0 = llvm.mlir.constant(2 : i64) : i64
    llvm.call @printI64(%0) : (i64) -> ()
    llvm.call @printNewline() : () -> ()
    %1 = llvm.mlir.constant(42.5 : f32) : f32
    llvm.return %1 : f32
  }
  llvm.func @mi() -> i32 {
    %1 = llvm.mlir.constant(42 : i32) : i32
    llvm.return %1 : i32
  }
}
