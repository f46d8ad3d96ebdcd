// pymlirjit's own runner test: vector.contract (dot product, matrix-vector, matrix-matrix
// with a transposed result map, full 2-D reduction), vector.constant_mask and
// vector.create_mask (sizes from loop indices, negative and past-the-end ones clamped),
// vector.extract_strided_slice and vector.outerproduct, lowered by -test-lower-to-llvm.
// RUN: mlir-opt %s -test-lower-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_c_runner_utils | FileCheck %s

#dot = {indexing_maps = [affine_map<(k) -> (k)>, affine_map<(k) -> (k)>,
                         affine_map<(k) -> ()>],
        iterator_types = ["reduction"]}
#matvec = {indexing_maps = [affine_map<(i, k) -> (i, k)>, affine_map<(i, k) -> (k)>,
                            affine_map<(i, k) -> (i)>],
           iterator_types = ["parallel", "reduction"]}
// C^T += A * B: the result map swaps i and j.
#matmul_t = {indexing_maps = [affine_map<(i, j, k) -> (i, k)>,
                              affine_map<(i, j, k) -> (k, j)>,
                              affine_map<(i, j, k) -> (j, i)>],
             iterator_types = ["parallel", "parallel", "reduction"]}
#sum2d = {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j, i)>,
                           affine_map<(i, j) -> ()>],
          iterator_types = ["reduction", "reduction"]}

func.func @main() {
  %a = arith.constant dense<[2.0, -1.0, 0.5]> : vector<3xf32>
  %b = arith.constant dense<[4.0, 3.0, -6.0]> : vector<3xf32>
  %ten = arith.constant 10.0 : f32
  %d = vector.contract #dot %a, %b, %ten : vector<3xf32>, vector<3xf32> into f32
  vector.print %d : f32
  // CHECK: 12

  %m = arith.constant dense<[[1, 2, 3], [-4, 0, 5]]> : vector<2x3xi32>
  %v = arith.constant dense<[7, -1, 2]> : vector<3xi32>
  %acc = arith.constant dense<[100, 200]> : vector<2xi32>
  %mv = vector.contract #matvec %m, %v, %acc : vector<2x3xi32>, vector<3xi32> into vector<2xi32>
  vector.print %mv : vector<2xi32>
  // CHECK-NEXT: ( 111, 182 )

  %x = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [0.0, -1.0]]> : vector<3x2xf64>
  %y = arith.constant dense<[[1.0, 0.0, 2.0, -1.0], [0.5, 1.0, 0.0, 3.0]]> : vector<2x4xf64>
  %z = arith.constant dense<0.0> : vector<4x3xf64>
  %mm = vector.contract #matmul_t %x, %y, %z : vector<3x2xf64>, vector<2x4xf64> into vector<4x3xf64>
  vector.print %mm : vector<4x3xf64>
  // CHECK-NEXT: ( ( 2, 5, -0.5 ), ( 2, 4, -1 ), ( 2, 6, 0 ), ( 5, 9, -3 ) )

  %p = arith.constant dense<[[1, 2], [3, 4]]> : vector<2x2xi64>
  %q = arith.constant dense<[[5, 6], [7, 8]]> : vector<2x2xi64>
  %zero = arith.constant 0 : i64
  %s = vector.contract #sum2d %p, %q, %zero : vector<2x2xi64>, vector<2x2xi64> into i64
  vector.print %s : i64
  // 1*5 + 2*7 + 3*6 + 4*8
  // CHECK-NEXT: 69

  %cm1 = vector.constant_mask [3] : vector<6xi1>
  vector.print %cm1 : vector<6xi1>
  // CHECK-NEXT: ( 1, 1, 1, 0, 0, 0 )
  %cm2 = vector.constant_mask [2, 1] : vector<3x3xi1>
  vector.print %cm2 : vector<3x3xi1>
  // CHECK-NEXT: ( ( 1, 0, 0 ), ( 1, 0, 0 ), ( 0, 0, 0 ) )

  %lo = arith.constant -2 : index
  %hi = arith.constant 7 : index
  %three = arith.constant 3 : index
  scf.for %i = %lo to %hi step %three {
    %cr = vector.create_mask %i : vector<4xi1>
    vector.print %cr : vector<4xi1>
  }
  // -2, 1, 4 (all four set), then nothing past 7.
  // CHECK-NEXT: ( 0, 0, 0, 0 )
  // CHECK-NEXT: ( 1, 0, 0, 0 )
  // CHECK-NEXT: ( 1, 1, 1, 1 )
  %two = arith.constant 2 : index
  %cr2 = vector.create_mask %two, %three : vector<3x4xi1>
  vector.print %cr2 : vector<3x4xi1>
  // CHECK-NEXT: ( ( 1, 1, 1, 0 ), ( 1, 1, 1, 0 ), ( 0, 0, 0, 0 ) )

  %big = arith.constant dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]> : vector<3x4xi16>
  %slice = vector.extract_strided_slice %big {offsets = [1, 1], sizes = [2, 2], strides = [1, 1]}
      : vector<3x4xi16> to vector<2x2xi16>
  vector.print %slice : vector<2x2xi16>
  // CHECK-NEXT: ( ( 5, 6 ), ( 9, 10 ) )

  %u = arith.constant dense<[1.0, -2.0]> : vector<2xf32>
  %w = arith.constant dense<[3.0, 0.0, 4.0]> : vector<3xf32>
  %o = vector.outerproduct %u, %w : vector<2xf32>, vector<3xf32>
  vector.print %o : vector<2x3xf32>
  // CHECK-NEXT: ( ( 3, 0, 4 ), ( -6, -0, -8 ) )
  return
}
