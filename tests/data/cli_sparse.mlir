// pymlirjit run's sparse tensors: a CSR matrix from a scipy .npz file, squared into a
// CSR result (printed, or saved with --output as .npz), and its entries counted.
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
#ew = {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
       iterator_types = ["parallel", "parallel"]}
func.func @main(%a: tensor<?x?xf64, #CSR>) -> (tensor<?x?xf64, #CSR>, index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = tensor.dim %a, %c0 : tensor<?x?xf64, #CSR>
  %n = tensor.dim %a, %c1 : tensor<?x?xf64, #CSR>
  %empty = tensor.empty(%m, %n) : tensor<?x?xf64, #CSR>
  %r = linalg.generic #ew ins(%a : tensor<?x?xf64, #CSR>) outs(%empty : tensor<?x?xf64, #CSR>) {
    ^bb0(%v: f64, %o: f64):
      %sq = arith.mulf %v, %v : f64
      linalg.yield %sq : f64
  } -> tensor<?x?xf64, #CSR>
  %count = sparse_tensor.number_of_entries %a : tensor<?x?xf64, #CSR>
  return %r, %count : tensor<?x?xf64, #CSR>, index
}
