// @main(a, k) returns (a * k, the sum of a * k): an array and a scalar result.
func.func @main(%a: memref<?xf32>, %k: f32) -> (memref<?xf32>, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  %out = memref.alloc(%n) : memref<?xf32>
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f32 {
    %v = memref.load %a[%i] : memref<?xf32>
    %s = arith.mulf %v, %k : f32
    memref.store %s, %out[%i] : memref<?xf32>
    %next = arith.addf %acc, %s : f32
    scf.yield %next : f32
  }
  return %out, %sum : memref<?xf32>, f32
}
