// pymlirjit's own runner test: vector.reduction <add>, <mul>, <minimumf>, <maximumf>
// on f32 vectors, with and without an accumulator, with -0.0 and NaN lanes.
// RUN: mlir-opt %s -convert-vector-to-scf -convert-scf-to-cf -convert-vector-to-llvm \
// RUN:   -convert-func-to-llvm -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func @reduce_all(%v: vector<6xf32>) {
  %sum = vector.reduction <add>, %v : vector<6xf32> into f32
  %prod = vector.reduction <mul>, %v : vector<6xf32> into f32
  %min = vector.reduction <minimumf>, %v : vector<6xf32> into f32
  %max = vector.reduction <maximumf>, %v : vector<6xf32> into f32
  vector.print %sum : f32
  vector.print %prod : f32
  vector.print %min : f32
  vector.print %max : f32
  return
}

func.func @main() {
  %a = arith.constant dense<[0.5, -4.0, 2.0, 8.0, -0.25, 3.0]> : vector<6xf32>
  call @reduce_all(%a) : (vector<6xf32>) -> ()
  // CHECK: 9.25
  // CHECK-NEXT: 24
  // CHECK-NEXT: -4
  // CHECK-NEXT: 8

  // With an accumulator folded in.
  %acc = arith.constant 100.0 : f32
  %s = vector.reduction <add>, %a, %acc : vector<6xf32> into f32
  vector.print %s : f32
  // CHECK-NEXT: 109.25
  %two = arith.constant 2.0 : f32
  %p = vector.reduction <mul>, %a, %two : vector<6xf32> into f32
  vector.print %p : f32
  // CHECK-NEXT: 48
  %lo = arith.constant -10.0 : f32
  %mn = vector.reduction <minimumf>, %a, %lo : vector<6xf32> into f32
  vector.print %mn : f32
  // CHECK-NEXT: -10

  // minimumf orders -0.0 below +0.0; the product of the signed zeros is -0.0.
  %z = arith.constant dense<[0.0, 1.0, -0.0, 2.0, 0.0, 5.0]> : vector<6xf32>
  call @reduce_all(%z) : (vector<6xf32>) -> ()
  // CHECK-NEXT: {{^}}8{{$}}
  // CHECK-NEXT: {{^}}-0{{$}}
  // CHECK-NEXT: {{^}}-0{{$}}
  // CHECK-NEXT: {{^}}5{{$}}

  // A NaN lane propagates through minimumf and maximumf (and add, mul).
  %nan = arith.constant 0x7FC00000 : f32
  %b = vector.insert %nan, %a [2] : f32 into vector<6xf32>
  call @reduce_all(%b) : (vector<6xf32>) -> ()
  // CHECK-NEXT: nan
  // CHECK-NEXT: nan
  // CHECK-NEXT: nan
  // CHECK-NEXT: nan

  // One lane and many lanes.
  %one = arith.constant dense<[-7.5]> : vector<1xf32>
  %m1 = vector.reduction <maximumf>, %one : vector<1xf32> into f32
  vector.print %m1 : f32
  // CHECK-NEXT: -7.5
  %wide = arith.constant dense<1.5> : vector<16xf32>
  %w = vector.reduction <mul>, %wide : vector<16xf32> into f32
  vector.print %w : f32
  // CHECK-NEXT: 656.841
  return
}
