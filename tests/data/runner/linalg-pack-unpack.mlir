// pymlirjit's own runner test: linalg.pack with padding (static inner tiles) and
// linalg.unpack with an inner tile of dynamic size. The RUN line lowers them with the
// file's transform script (tile to unit steps, decompose); pymlirjit's default pipeline,
// which drops that script, must lower them itself (it failed: "op was not bufferized").
// RUN: mlir-opt %s -transform-interpreter -test-transform-dialect-erase-schedule \
// RUN:   -one-shot-bufferize="bufferize-function-boundaries" -test-lower-to-llvm \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

// The 5x6 matrix in 2x4 tiles, the last row of tiles padded with -1.
// CHECK: rank = 4 offset = 0 sizes = [3, 2, 2, 4] strides = [16, 8, 4, 1] data =
// CHECK-NEXT{LITERAL}: [[[[0,     1,     2,     3],
// CHECK-NEXT{LITERAL}:    [6,     7,     8,     9]],
// CHECK-NEXT{LITERAL}:   [[4,     5,     -1,     -1],
// CHECK-NEXT{LITERAL}:    [10,     11,     -1,     -1]]],
// CHECK{LITERAL}:  [[[24,     25,     26,     27],
// CHECK-NEXT:    [-1,     -1,     -1,     -1]],
// CHECK-NEXT{LITERAL}:   [[28,     29,     -1,     -1],
// And back: the tiles unpacked (tile height given at run time) are the matrix again.
// CHECK: rank = 2 offset = 0 sizes = [5, 6] strides = [6, 1] data =
// CHECK-NEXT{LITERAL}: [[0,   1,   2,   3,   4,   5],
// CHECK-NEXT: [6,   7,   8,   9,   10,   11],
// CHECK-NEXT: [12,   13,   14,   15,   16,   17],
// CHECK-NEXT: [18,   19,   20,   21,   22,   23],
// CHECK-NEXT: [24,   25,   26,   27,   28,   29]]

func.func private @printMemrefF32(tensor<*xf32>)

func.func @pack(%matrix: tensor<5x6xf32>) -> tensor<3x2x2x4xf32> {
  %pad = arith.constant -1.0 : f32
  %empty = tensor.empty() : tensor<3x2x2x4xf32>
  %packed = linalg.pack %matrix padding_value(%pad : f32) inner_dims_pos = [0, 1]
      inner_tiles = [2, 4] into %empty : tensor<5x6xf32> -> tensor<3x2x2x4xf32>
  return %packed : tensor<3x2x2x4xf32>
}

func.func @unpack(%tiles: tensor<?x2x?x4xf32>, %height: index) -> tensor<5x6xf32> {
  %empty = tensor.empty() : tensor<5x6xf32>
  %matrix = linalg.unpack %tiles inner_dims_pos = [0, 1] inner_tiles = [%height, 4]
      into %empty : tensor<?x2x?x4xf32> -> tensor<5x6xf32>
  return %matrix : tensor<5x6xf32>
}

func.func @main() {
  %matrix = arith.constant dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                                  [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                                  [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                                  [18.0, 19.0, 20.0, 21.0, 22.0, 23.0],
                                  [24.0, 25.0, 26.0, 27.0, 28.0, 29.0]]> : tensor<5x6xf32>
  %packed = func.call @pack(%matrix) : (tensor<5x6xf32>) -> tensor<3x2x2x4xf32>
  %two = arith.constant 2 : index
  %dynamic = tensor.cast %packed : tensor<3x2x2x4xf32> to tensor<?x2x?x4xf32>
  %back = func.call @unpack(%dynamic, %two) : (tensor<?x2x?x4xf32>, index) -> tensor<5x6xf32>
  // Printed last: a cast to an unranked tensor cannot bufferize with a read after it.
  %printed = tensor.cast %packed : tensor<3x2x2x4xf32> to tensor<*xf32>
  func.call @printMemrefF32(%printed) : (tensor<*xf32>) -> ()
  %printed_back = tensor.cast %back : tensor<5x6xf32> to tensor<*xf32>
  func.call @printMemrefF32(%printed_back) : (tensor<*xf32>) -> ()
  return
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.structured.match ops{["linalg.pack", "linalg.unpack"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.foreach %ops : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tiled, %loops:2 = transform.structured.tile_using_for %op tile_sizes [1, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    }
    %funcs = transform.structured.match ops{["func.func"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.linalg.decompose_pack_unpack
      transform.apply_patterns.linalg.decompose_pad
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.yield
  }
}
