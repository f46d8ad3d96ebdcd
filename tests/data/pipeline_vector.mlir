func.func @main() {
  %v = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
  vector.print %v : vector<4xf32>
  %r = vector.reduction <add>, %v : vector<4xf32> into f32
  vector.print %r : f32
  %m = memref.alloc() : memref<8xf32>
  %c0 = arith.constant 0 : index
  %f = arith.constant 5.0 : f32
  linalg.fill ins(%f : f32) outs(%m : memref<8xf32>)
  %t = vector.transfer_read %m[%c0], %f : memref<8xf32>, vector<8xf32>
  vector.print %t : vector<8xf32>
  %a = arith.constant dense<1.0> : vector<2x2xf32>
  %acc = arith.constant dense<0.0> : vector<2x2xf32>
  %c = vector.contract {indexing_maps = [affine_map<(i,j,k) -> (i,k)>, affine_map<(i,j,k) -> (k,j)>, affine_map<(i,j,k) -> (i,j)>], iterator_types = ["parallel","parallel","reduction"]} %a, %a, %acc : vector<2x2xf32>, vector<2x2xf32> into vector<2x2xf32>
  vector.print %c : vector<2x2xf32>
  memref.dealloc %m : memref<8xf32>
  affine.for %i = 0 to 2 {
    %mm = memref.alloc() : memref<2xf32>
    linalg.fill ins(%f : f32) outs(%mm : memref<2xf32>)
    memref.dealloc %mm : memref<2xf32>
  }
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%c1) step (%c1) { vector.print %f : f32
 scf.reduce }
  return
}
