// pymlirjit's own runner test: vector ops that convert-vector-to-llvm leaves as they are.
// vector.scan has no registered lowering pass in MLIR 22 (mlir-opt's is test-only): the
// RUN line lowers it with the schedule below; pymlirjit lowers it before its vector
// conversion in any pipeline (its default pipeline applies no schedule). vector.mask and
// vector.multi_reduction go through -lower-vector-mask and -lower-vector-multi-reduction,
// which pymlirjit's default pipeline runs too.
// RUN: mlir-opt %s -transform-interpreter -test-transform-dialect-erase-schedule \
// RUN:   -lower-vector-mask -lower-vector-multi-reduction -test-lower-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils \
// RUN: | FileCheck %s

func.func @main() {
  %x = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : vector<2x3xf32>
  %init2 = arith.constant dense<100.0> : vector<2xf32>
  %init3 = arith.constant dense<0.5> : vector<3xf32>

  // Running products along each row, then running sums down the columns after the
  // initial value (exclusive); the second result is the scan's last slice.
  %p:2 = vector.scan <mul>, %x, %init2 {inclusive = true, reduction_dim = 1}
    : vector<2x3xf32>, vector<2xf32>
  vector.print %p#0 : vector<2x3xf32>
  vector.print %p#1 : vector<2xf32>
  // CHECK: ( ( 1, 2, 6 ), ( 4, 20, 120 ) )
  // CHECK-NEXT: ( 6, 120 )
  %s:2 = vector.scan <add>, %x, %init3 {inclusive = false, reduction_dim = 0}
    : vector<2x3xf32>, vector<3xf32>
  vector.print %s#0 : vector<2x3xf32>
  vector.print %s#1 : vector<3xf32>
  // CHECK-NEXT: ( ( 0.5, 0.5, 0.5 ), ( 1.5, 2.5, 3.5 ) )
  // CHECK-NEXT: ( 1.5, 2.5, 3.5 )

  // A masked load: the lanes past the mask read the padding.
  %mem = memref.alloca() : memref<5xi32>
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %seven = arith.constant 7 : i32
  linalg.fill ins(%seven : i32) outs(%mem : memref<5xi32>)
  %pad = arith.constant -1 : i32
  %mask = vector.create_mask %c2 : vector<4xi1>
  %v = vector.mask %mask { vector.transfer_read %mem[%c0], %pad : memref<5xi32>, vector<4xi32> }
    : vector<4xi1> -> vector<4xi32>
  vector.print %v : vector<4xi32>
  // CHECK-NEXT: ( 7, 7, -1, -1 )

  // A masked reduction, and row maxima folded into an accumulator.
  %r = vector.mask %mask { vector.reduction <add>, %v : vector<4xi32> into i32 }
    : vector<4xi1> -> i32
  vector.print %r : i32
  // CHECK-NEXT: 14
  %acc = arith.constant dense<[2.5, 7.5]> : vector<2xf32>
  %max = vector.multi_reduction <maximumf>, %x, %acc [1] : vector<2x3xf32> to vector<2xf32>
  vector.print %max : vector<2xf32>
  // CHECK-NEXT: ( 3, 7.5 )
  return
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %f = transform.structured.match ops{["func.func"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.lower_scan
    } : !transform.any_op
    transform.yield
  }
}
