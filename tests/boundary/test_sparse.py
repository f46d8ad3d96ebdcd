"""Sparse tensor types at the boundary, without compiling: the formats table, the flat
signature of a function's wrapper, the cache encoding, the MLIR wrapper's text, and the
checks of scipy.sparse arguments."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pymlirjit import SignatureError
from pymlirjit.boundary.signature import as_signature, decode_signature, encode_signature
from pymlirjit.boundary.sparse import flat_signature, has_sparse, sparse_wrapper
from pymlirjit.boundary.sparsearrays import from_buffers, to_buffers
from pymlirjit.boundary.sparseformat import FORMATS, SparseTensorType
from pymlirjit.boundary.types import f64, parse_type


def encoded(map_: str, extra: str = "", shape: str = "?x?") -> str:
    return f"tensor<{shape}xf64, #sparse_tensor.encoding<{{ map = {map_}{extra} }}>>"


@pytest.mark.parametrize(("map_", "name"), [
    ("(i, j) -> (i : dense, j : compressed)", "CSR"),
    ("(i, j) -> (j : dense, i : compressed)", "CSC"),
    ("(i, j) -> (i : compressed, j : compressed)", "DCSR"),
    ("(i, j) -> (i : compressed(nonunique), j : singleton)", "COO"),
    ("(i, j) -> (i : compressed(nonunique), j : singleton(soa))", "COO (SoA)"),
    ("(i) -> (i : compressed)", "sparse vector"),
])
def test_each_format_is_read_from_its_encoding(map_: str, name: str) -> None:
    shape = "?" if map_.startswith("(i)") else "?x4"
    t = parse_type(encoded(map_, ", posWidth = 32, crdWidth = 16", shape))
    assert isinstance(t, SparseTensorType)
    assert (t.format.name, t.pos_width, t.crd_width, t.element) == (name, 32, 16, f64)
    assert t.shape == ((None,) if shape == "?" else (None, 4))
    assert t.mlir.startswith(f"tensor<{shape}xf64, #sparse_tensor.encoding")


@pytest.mark.parametrize("text", [
    encoded("(i, j) -> (i : dense, j : dense)"),
    encoded("(i, j) -> (i : dense, j : loose_compressed)"),
    encoded("(i, j) -> (i : dense, j : compressed)", ", explicitVal = 1.0 : f64"),
    encoded("(i, j, k) -> (i : dense, j : compressed, k : compressed)", shape="?x?x?"),
])
def test_other_encodings_name_the_formats_that_cross(text: str) -> None:
    with pytest.raises(TypeError, match=r"xf64, #sparse_tensor.encoding<.*>>: not a sparse "
                                        r"format that crosses the Python boundary \(those "
                                        r"that do: CSR, CSC, DCSR, COO"):
        parse_type(text)
    with pytest.raises(SignatureError, match="not a sparse format"):
        as_signature(f"({text}) -> ()")


def test_flat_signature_and_cache_encoding() -> None:
    csr = encoded("(i, j) -> (i : dense, j : compressed)", ", posWidth = 32")
    coo = encoded("(i, j) -> (i : compressed(nonunique), j : singleton)")
    signature = as_signature(f"({csr}, tensor<?xf64>, f64) -> ({coo}, f64)")
    assert has_sparse(signature) and not has_sparse(as_signature("(f64) -> f64"))
    assert flat_signature(signature).mlir == (
        "(memref<?xi32>, memref<?xindex>, memref<?xf64>, index, index, tensor<?xf64>, f64) "
        "-> (memref<?xindex>, memref<?xindex>, memref<?xf64>, index, index, f64)")
    assert decode_signature(encode_signature(signature)) == signature
    text = sparse_wrapper("f", "__pymlirjit_sparse_f", signature)
    assert "builtin.unrealized_conversion_cast %a0, %a1, %a2, %t0_s" in text
    assert "sparse_tensor.coordinates_buffer %r#0" in text  # COO's (row, column) pairs
    assert "%a5: tensor<?xf64> {bufferization.writable = false}" in text


def test_every_format_round_trips_through_its_buffers() -> None:
    dense = np.array([[0.0, 1.5, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, -3.0]])
    for fmt in FORMATS:
        rank = fmt.rank
        t = SparseTensorType(f64, (None,) * rank, fmt, 0, 0, f"<{fmt.name}>")
        value = (sp.coo_array(dense[2]) if rank == 1
                 else sp.csr_array(dense).asformat(fmt.scipy))
        flat = to_buffers(value, t, "argument 1", "a")
        buffers, sizes = flat[:-rank], flat[-rank:]
        assert all(b.flags.c_contiguous for b in buffers)
        shape = tuple(sizes[fmt.dim_order.index(d)] for d in range(rank))
        back = from_buffers(t, buffers, shape)
        assert back.format == fmt.scipy and back.shape == value.shape
        np.testing.assert_array_equal(back.toarray(), value.toarray())


def test_data_never_copied_where_the_dtypes_match() -> None:
    t = parse_type(encoded("(i, j) -> (i : dense, j : compressed)",
                           ", posWidth = 32, crdWidth = 32"))
    assert isinstance(t, SparseTensorType)
    a = sp.random_array((30, 20), density=0.2, format="csr", rng=0)
    indptr, indices, data, rows, cols = to_buffers(a, t, "argument 1", "a")
    assert indptr is a.indptr and indices is a.indices and data is a.data
    assert (rows, cols) == (30, 20)
