// pymlirjit's own runner test: math.ctlz on i32 and i64, lowered to a software loop
// (convert-math-to-funcs) and to LLVM's intrinsic (convert-math-to-llvm), the counts
// summed into the entry's result, printed by -entry-point-result=i32 / i64.
// RUN: mlir-opt %s -convert-math-to-funcs=convert-ctlz -convert-scf-to-cf \
// RUN:   -convert-func-to-llvm -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e ctlz32 -entry-point-result=i32 \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s --check-prefix=I32
// RUN: mlir-opt %s -convert-math-to-funcs=convert-ctlz -convert-scf-to-cf \
// RUN:   -convert-func-to-llvm -convert-cf-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e ctlz64 -entry-point-result=i64 \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s --check-prefix=I64
// RUN: mlir-opt %s -convert-math-to-llvm -convert-func-to-llvm -convert-arith-to-llvm \
// RUN:   -reconcile-unrealized-casts \
// RUN: | mlir-runner -e ctlz64 -entry-point-result=i64 \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s --check-prefix=I64

// ctlz: 0 -> 32, 1 -> 31, 0x00F00000 -> 8, -1 -> 0, 0x7FFFFFFF -> 1, 4096 -> 19.
// The weighted sum (1, 10, 100, ...) keeps every count visible:
// 32 + 310 + 800 + 0 + 10000 + 1900000 = 1911142
// I32: 1911142

// Outlined so that nothing folds math.ctlz of a constant away.
func.func @clz32(%x: i32) -> i32 {
  %n = math.ctlz %x : i32
  return %n : i32
}

func.func @clz64(%x: i64) -> i64 {
  %n = math.ctlz %x : i64
  return %n : i64
}
func.func @ctlz32() -> i32 {
  %r0 = arith.constant 0 : i32
  %r1 = arith.constant 1 : i32
  %r2 = arith.constant 15728640 : i32
  %r3 = arith.constant -1 : i32
  %r4 = arith.constant 2147483647 : i32
  %r5 = arith.constant 4096 : i32
  %ten = arith.constant 10 : i32
  %n0 = func.call @clz32(%r0) : (i32) -> i32
  %n1 = func.call @clz32(%r1) : (i32) -> i32
  %n2 = func.call @clz32(%r2) : (i32) -> i32
  %n3 = func.call @clz32(%r3) : (i32) -> i32
  %n4 = func.call @clz32(%r4) : (i32) -> i32
  %n5 = func.call @clz32(%r5) : (i32) -> i32
  // Horner from the last count: ((((n5*10 + n4)*10 + n3)*10 + n2)*10 + n1)*10 + n0.
  %a5 = arith.muli %n5, %ten : i32
  %a4 = arith.addi %a5, %n4 : i32
  %b4 = arith.muli %a4, %ten : i32
  %a3 = arith.addi %b4, %n3 : i32
  %b3 = arith.muli %a3, %ten : i32
  %a2 = arith.addi %b3, %n2 : i32
  %b2 = arith.muli %a2, %ten : i32
  %a1 = arith.addi %b2, %n1 : i32
  %b1 = arith.muli %a1, %ten : i32
  %a0 = arith.addi %b1, %n0 : i32
  return %a0 : i32
}

// ctlz: 0 -> 64, 1 -> 63, 2^40 -> 23, -2^62 (0xC000...) -> 0, 2^32 - 1 -> 32.
// 64 + 63 * 100 + 23 * 10^4 + 0 * 10^6 + 32 * 10^8 = 3200236364
// I64: 3200236364
func.func @ctlz64() -> i64 {
  %x0 = arith.constant 0 : i64
  %x1 = arith.constant 1 : i64
  %x2 = arith.constant 1099511627776 : i64
  %x3 = arith.constant -4611686018427387904 : i64
  %x4 = arith.constant 4294967295 : i64
  %hundred = arith.constant 100 : i64
  %n0 = func.call @clz64(%x0) : (i64) -> i64
  %n1 = func.call @clz64(%x1) : (i64) -> i64
  %n2 = func.call @clz64(%x2) : (i64) -> i64
  %n3 = func.call @clz64(%x3) : (i64) -> i64
  %n4 = func.call @clz64(%x4) : (i64) -> i64
  %a4 = arith.muli %n4, %hundred : i64
  %a3 = arith.addi %a4, %n3 : i64
  %b3 = arith.muli %a3, %hundred : i64
  %a2 = arith.addi %b3, %n2 : i64
  %b2 = arith.muli %a2, %hundred : i64
  %a1 = arith.addi %b2, %n1 : i64
  %b1 = arith.muli %a1, %hundred : i64
  %a0 = arith.addi %b1, %n0 : i64
  return %a0 : i64
}
