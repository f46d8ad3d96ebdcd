"""Every sparse format, one by one, against scipy: index widths (32, 64, the default; scipy's
int32 and int64 index arrays), zero copies end to end, unsorted and duplicate entries,
scipy's matrix classes, results as scipy arrays of the encoding's index widths, element
types, overflow, and leaks over thousands of calls."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from pymlirjit import Session, callback
from tests.conftest import rss_bytes
from tests.runtime.test_sparsecall import MAPS, SCIPY, VECTOR_SOURCE, matrix_source

FORMATS = [*MAPS, "vector"]
WIDTHS = ["", ", posWidth = 32, crdWidth = 32", ", posWidth = 64, crdWidth = 64",
          ", posWidth = 64, crdWidth = 32"]
_compiled: dict[tuple[str, str, str], Any] = {}


def vector_source(widths: str, element: str = "f64") -> str:
    return (VECTOR_SOURCE.replace("(i : compressed) }>", f"(i : compressed){widths} }}>")
            .replace("f64", element))


def module(name: str, widths: str = "", element: str = "f64") -> Any:
    """The compiled module of format ``name`` (cached across tests: ~0.2 s each)."""
    key = (name, widths, element)
    if key not in _compiled:
        source = (vector_source(widths, element) if name == "vector"
                  else matrix_source(MAPS[name], widths, element))
        _compiled[key] = Session().compile(source)
    return _compiled[key]


def value(name: str, index_dtype: Any = np.int32, seed: int = 0, shape: Any = (9, 7),
          dtype: Any = np.float64) -> Any:
    """A random scipy.sparse array for format ``name`` (canonical), with all-zero rows
    and columns, index arrays of ``index_dtype``."""
    if name == "vector":
        a = sp.random_array((shape[0] * 3,), density=0.4, format="coo", rng=seed,
                            dtype=dtype)
        a.sum_duplicates()
    else:
        a = sp.random_array(shape, density=0.4, format="csr", rng=seed, dtype=dtype).tolil()
        a[1, :] = 0
        a[:, 2] = 0
        a = a.asformat(SCIPY[name])
        a.sum_duplicates()
    return with_index_dtype(a, index_dtype)


def with_index_dtype(a: Any, dtype: Any) -> Any:
    if a.format == "coo":
        a.coords = tuple(c.astype(dtype) for c in a.coords)
    else:
        a.indptr, a.indices = a.indptr.astype(dtype), a.indices.astype(dtype)
    return a


def index_arrays(a: Any) -> tuple[np.ndarray, ...]:
    return tuple(a.coords) if a.format == "coo" else (a.indptr, a.indices)


def product(m: Any, a: Any) -> tuple[Any, Any]:
    """What the kernel computes from ``a`` (a matvec or a dot), and scipy's value."""
    w = np.random.default_rng(1).random(a.shape[-1]).astype(a.dtype)
    if a.ndim == 1:
        return m.dot(a, w), float(a.toarray() @ w)
    return m.matvec(a, w, np.zeros(a.shape[0], a.dtype)), a @ w


def elementwise(m: Any, a: Any) -> tuple[Any, Any]:
    """A sparse result of the kernel (a square or a negation), and scipy's array."""
    return (m.negate(a), -a.toarray()) if a.ndim == 1 else (m.square(a), a.toarray() ** 2)


@pytest.mark.parametrize("widths", WIDTHS)
@pytest.mark.parametrize("name", FORMATS)
def test_index_widths_of_every_format(name: str, widths: str) -> None:
    m = module(name, widths)
    width = 32 if "crdWidth = 32" in widths else 64
    for index_dtype in (np.int32, np.int64):
        a = value(name, index_dtype)
        kept = [x.copy() for x in (a.data, *index_arrays(a))]
        got, expected = product(m, a)
        np.testing.assert_allclose(got, expected)
        result, dense = elementwise(m, a)
        assert isinstance(result, sp.sparray) and result.format == a.format
        np.testing.assert_allclose(result.toarray(), dense)
        if "posWidth = 64, crdWidth = 32" not in widths:  # (scipy unifies mixed widths)
            assert {x.dtype for x in index_arrays(result)} == {np.dtype(f"int{width}")}
        for before, after in zip(kept, (a.data, *index_arrays(a))):
            np.testing.assert_array_equal(before, after)  # the input as it was
            assert after.dtype in (index_dtype, a.dtype)


#: The arrays of each format a kernel reads where they are (the others are derived:
#: DCSR's non-empty rows, COO's interleaved (row, column) pairs).
ZERO_COPY = {"CSR": ("data", "indptr", "indices"), "CSC": ("data", "indptr", "indices"),
             "DCSR": ("data", "indices"), "COO": ("data",),
             "COO (SoA)": ("data", "row", "col"), "vector": ("data", "coords")}


@pytest.mark.parametrize(("widths", "index_dtype"), [
    (", posWidth = 32, crdWidth = 32", np.int32), (", posWidth = 64, crdWidth = 64", np.int64)])
@pytest.mark.parametrize("name", FORMATS)
def test_zero_copy_where_the_index_widths_match(session: Session, name: str, widths: str,
                                                index_dtype: Any) -> None:
    # A callback given the tensor the kernel received sees the caller's own memory.
    map_ = "(i) -> (i : compressed)" if name == "vector" else MAPS[name]
    shape = "?" if name == "vector" else "?x?"
    t = f"tensor<{shape}xf64, #sparse_tensor.encoding<{{ map = {map_}{widths} }}>>"
    seen: dict[str, int] = {}

    @callback(f"({t}) -> ()", session=session)
    def look(view: Any) -> None:
        for field in ZERO_COPY[name]:
            array = view.coords[0] if field == "coords" else getattr(view, field)
            seen[field] = array.ctypes.data

    m = session.compile(f"""
func.func @f(%a: {t}) {{
  func.call @look(%a) : ({t}) -> ()
  return
}}
func.func private @look({t})
""")
    a = value(name, index_dtype)
    m.f(a)
    for field in ZERO_COPY[name]:
        array = a.coords[0] if field == "coords" else getattr(a, field)
        assert seen[field] == array.ctypes.data, field


@pytest.mark.parametrize("name", FORMATS)
def test_unsorted_and_duplicate_entries_of_every_format(name: str) -> None:
    # Passed as a sorted copy with duplicates added (scipy's meaning), COO's too: a
    # square of the duplicates' sum, not a sum of their squares.
    m = module(name)
    rng = np.random.default_rng(5)
    n = 40
    shape: tuple[int, ...] = (n,) if name == "vector" else (6, 8)
    coords = tuple(rng.integers(0, size, n) for size in shape)  # duplicates likely
    coo = sp.coo_array((rng.random(n), coords), shape=shape)
    a = coo if SCIPY.get(name, "coo") == "coo" else coo.asformat(SCIPY[name])
    if a.format != "coo":  # scipy sums duplicates converting; unsort and split them
        a = type(a)((np.repeat(a.data / 2, 2), np.repeat(a.indices, 2)[::-1].copy(),
                     a.indptr * 2), shape=a.shape)
        a.indices[:] = np.concatenate([row[::-1] for row in np.split(
            a.indices, a.indptr[1:-1])]) if a.nnz else a.indices
    assert not a.has_canonical_format
    kept = [x.copy() for x in (a.data, *index_arrays(a))]
    got, expected = product(m, a)
    np.testing.assert_allclose(got, expected)
    result, dense = elementwise(m, a)
    np.testing.assert_allclose(result.toarray(), dense)
    for before, after in zip(kept, (a.data, *index_arrays(a))):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("name", FORMATS)
def test_scipy_matrix_classes_are_taken_and_arrays_returned(name: str) -> None:
    m = module(name)
    a = value(name)
    if name != "vector":  # scipy's matrix classes are 2-D only
        a = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}[a.format](a)
    got, expected = product(m, a)
    np.testing.assert_allclose(got, expected)
    result, dense = elementwise(m, a)
    assert isinstance(result, sp.sparray) and not isinstance(result, sp.spmatrix)
    np.testing.assert_allclose(result.toarray(), dense)


@pytest.mark.parametrize("name", FORMATS)
def test_element_types_must_match_exactly(name: str) -> None:
    m32 = module(name, element="f32")
    a = value(name, dtype=np.float32)
    got, expected = product(m32, a)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    result, dense = elementwise(m32, a)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result.toarray(), dense, rtol=1e-6)
    for other in (np.float64, np.int32, np.complex64):
        with pytest.raises(TypeError, match=rf"argument 1: expected float32 values for "
                                            rf"tensor<.*>, got {np.dtype(other).name}; pass "
                                            rf"x.astype\(np.float32\)"):
            product(m32, a.astype(other))
    with pytest.raises(TypeError, match=r"argument 1: expected a .* got a dense numpy "
                                        r"array; pass scipy.sparse.(csr|csc|coo)_array"):
        (m32.negate if name == "vector" else m32.square)(a.toarray())


@pytest.mark.parametrize("name", FORMATS)
def test_index_values_overflowing_the_declared_width(name: str) -> None:
    m = module(name, ", posWidth = 8, crdWidth = 8")
    small = value(name)
    got, expected = product(m, small)
    np.testing.assert_allclose(got, expected)
    if name == "vector":
        many = sp.coo_array(np.ones(300))  # 300 entries, coordinates up to 299
    else:
        many = sp.csr_array(np.ones((2, 100))).asformat(SCIPY[name])  # 200 entries
    with pytest.raises(ValueError, match=r"argument 1: (a position of \d+|a dim of \d+ "
                                         r"\(coordinates up to \d+\)) overflows the "
                                         r"encoding's (pos|crd)Width \(i8\)"):
        product(m, many)


@pytest.mark.parametrize("name", FORMATS)
def test_no_leaks_of_any_format_over_thousands_of_calls(name: str) -> None:
    # Each result owns the buffers the kernel allocated and frees them when collected.
    m = module(name)
    a = value(name, shape=(7500, 1) if name == "vector" else (150, 150), seed=7)
    for _ in range(100):
        elementwise(m, a)
        product(m, a)
    gc.collect()
    refs = [sys_refs(x) for x in (a, a.data, *index_arrays(a))]
    start = rss_bytes()
    for _ in range(2000):  # ~9000 entries, 70-220 KB a result: 140-440 MB if kept
        elementwise(m, a)
        product(m, a)
    gc.collect()
    assert rss_bytes() - start < 48 << 20
    assert [sys_refs(x) for x in (a, a.data, *index_arrays(a))] == refs


def sys_refs(x: Any) -> int:
    import sys

    return sys.getrefcount(x)


def test_no_leaks_of_callbacks_given_views_over_thousands_of_calls(session: Session) -> None:
    t = ("tensor<?x?xf64, #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, "
         "j : compressed) }>>")

    @callback(f"({t}) -> f64", session=session)
    def total(view: Any) -> float:
        return float(view.data.sum())

    m = session.compile(f"""
func.func @f(%a: {t}) -> f64 {{
  %r = func.call @total(%a) : ({t}) -> f64
  return %r : f64
}}
func.func private @total({t}) -> f64
""")
    a = value("CSR", shape=(300, 300), seed=8)
    for _ in range(100):
        m.f(a)
    gc.collect()
    objects, start = len(gc.get_objects()), rss_bytes()
    for _ in range(3000):
        assert m.f(a) == pytest.approx(a.data.sum())
    gc.collect()
    assert rss_bytes() - start < 16 << 20
    assert len(gc.get_objects()) - objects < 100
