// pymlirjit's own runner test: a dense constant of complex numbers (which the Python
// bindings cannot read back: touching it from Python once aborted pymlirjit), passed to
// a runtime printer declared on tensor<*xcomplex<f64>>, and the modulus of one element.
// RUN: mlir-opt %s -one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   -buffer-deallocation-pipeline -convert-bufferization-to-memref \
// RUN:   -finalize-memref-to-llvm -convert-complex-to-standard -convert-math-to-llvm \
// RUN:   -convert-complex-to-llvm -convert-vector-to-llvm -convert-arith-to-llvm \
// RUN:   -convert-func-to-llvm -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils,%mlir_runner_utils \
// RUN: | FileCheck %s

func.func private @printMemrefC64(tensor<*xcomplex<f64>>) attributes { llvm.emit_c_interface }

func.func @main() {
  %z = arith.constant dense<[[(3.0, 4.0), (0.0, -2.0)], [(-1.5, 0.5), (6.0, 8.0)]]>
      : tensor<2x2xcomplex<f64>>
  // |6 + 8i| = 10 (read before the tensor goes to the printer, which may write it)
  // CHECK: 10
  %c1 = arith.constant 1 : index
  %e = tensor.extract %z[%c1, %c1] : tensor<2x2xcomplex<f64>>
  %m = complex.abs %e : complex<f64>
  vector.print %m : f64
  // CHECK-NEXT: rank = 2 offset = 0 sizes = [2, 2] strides = [2, 1] data =
  // CHECK-NEXT: [(3,4),   (0,-2)],
  // CHECK-NEXT: [(-1.5,0.5),   (6,8)]]
  %u = tensor.cast %z : tensor<2x2xcomplex<f64>> to tensor<*xcomplex<f64>>
  call @printMemrefC64(%u) : (tensor<*xcomplex<f64>>) -> ()
  return
}
