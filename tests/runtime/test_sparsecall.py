"""Sparse tensors at the Python boundary, end to end: kernels with CSR, CSC, DCSR, COO and
sparse-vector parameters and results called with scipy.sparse arrays, against scipy."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from pymlirjit import Session, SignatureError, callback, f64, mlir_kernel
from tests.conftest import rss_bytes
from tests.threads import run_in_threads

MAPS = {
    "CSR": "(i, j) -> (i : dense, j : compressed)",
    "CSC": "(i, j) -> (j : dense, i : compressed)",
    "DCSR": "(i, j) -> (i : compressed, j : compressed)",
    "COO": "(i, j) -> (i : compressed(nonunique), j : singleton)",
    "COO (SoA)": "(i, j) -> (i : compressed(nonunique), j : singleton(soa))",
}
SCIPY = {"CSR": "csr", "CSC": "csc", "DCSR": "csr", "COO": "coo", "COO (SoA)": "coo"}


def matrix_source(map_: str, widths: str = "", element: str = "f64") -> str:
    t = f"tensor<?x?x{element}, #S>"
    return f"""
#S = #sparse_tensor.encoding<{{ map = {map_}{widths} }}>
#ew = {{indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>],
        iterator_types = ["parallel", "parallel"]}}
func.func @matvec(%a: {t}, %x: tensor<?x{element}>, %y: tensor<?x{element}>)
    -> tensor<?x{element}> {{
  %r = linalg.matvec ins(%a, %x : {t}, tensor<?x{element}>) outs(%y : tensor<?x{element}>)
      -> tensor<?x{element}>
  return %r : tensor<?x{element}>
}}
func.func @square(%a: {t}) -> {t} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %d0 = tensor.dim %a, %c0 : {t}
  %d1 = tensor.dim %a, %c1 : {t}
  %e = tensor.empty(%d0, %d1) : {t}
  %r = linalg.generic #ew ins(%a : {t}) outs(%e : {t}) {{
    ^bb0(%v: {element}, %o: {element}):
      %m = arith.mulf %v, %v : {element}
      linalg.yield %m : {element}
  }} -> {t}
  return %r : {t}
}}
func.func @same(%a: {t}) -> {t} {{
  return %a : {t}
}}
"""


VECTOR_SOURCE = """
#V = #sparse_tensor.encoding<{ map = (i) -> (i : compressed) }>
#dot = {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> ()>],
        iterator_types = ["reduction"]}
#ew = {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
       iterator_types = ["parallel"]}
func.func @dot(%x: tensor<?xf64, #V>, %w: tensor<?xf64>) -> f64 {
  %zero = arith.constant 0.0 : f64
  %init = tensor.empty() : tensor<f64>
  %acc = linalg.fill ins(%zero : f64) outs(%init : tensor<f64>) -> tensor<f64>
  %r = linalg.generic #dot ins(%x, %w : tensor<?xf64, #V>, tensor<?xf64>)
      outs(%acc : tensor<f64>) {
    ^bb0(%a: f64, %b: f64, %s: f64):
      %p = arith.mulf %a, %b : f64
      %t = arith.addf %s, %p : f64
      linalg.yield %t : f64
  } -> tensor<f64>
  %v = tensor.extract %r[] : tensor<f64>
  return %v : f64
}
func.func @negate(%x: tensor<?xf64, #V>) -> tensor<?xf64, #V> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf64, #V>
  %e = tensor.empty(%n) : tensor<?xf64, #V>
  %r = linalg.generic #ew ins(%x : tensor<?xf64, #V>) outs(%e : tensor<?xf64, #V>) {
    ^bb0(%a: f64, %o: f64):
      %m = arith.negf %a : f64
      linalg.yield %m : f64
  } -> tensor<?xf64, #V>
  return %r : tensor<?xf64, #V>
}
"""


@pytest.fixture(scope="module")
def modules() -> dict[str, Any]:
    session = Session()
    found = {name: session.compile(matrix_source(m)) for name, m in MAPS.items()}
    found["vector"] = session.compile(VECTOR_SOURCE)
    return found


SHAPES = [(1, 1), (7, 9), (40, 30), (5, 0), (0, 5), (0, 0)]


def random_matrix(shape: tuple[int, int], density: float, fmt: str, seed: int) -> Any:
    a = sp.random_array(shape, density=density, format="csr", rng=seed)
    if shape[0] > 2:  # all-zero rows and columns among the others
        a = a.tolil()
        a[1, :] = 0
        if shape[1] > 2:
            a[:, 2] = 0
        a = a.tocsr()
    return a.asformat(fmt)


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_every_format_against_scipy(modules: dict[str, Any], name: str,
                                    shape: tuple[int, int], density: float) -> None:
    m = modules[name]
    a = random_matrix(shape, density, SCIPY[name], seed=hash((name, shape, density)) % 1000)
    kept = (a.data.copy(), *(c.copy() for c in _index_arrays(a)))
    x = np.random.default_rng(0).random(shape[1])
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(shape[0])), a @ x, atol=1e-12)
    squared = m.square(a)
    assert squared.format == SCIPY[name] and squared.shape == shape
    np.testing.assert_allclose(squared.toarray(), a.toarray() ** 2)
    same = m.same(a)
    np.testing.assert_array_equal(same.toarray(), a.toarray())
    assert not np.shares_memory(same.data, a.data)  # a tensor is a value
    for before, after in zip(kept, (a.data, *_index_arrays(a))):
        np.testing.assert_array_equal(before, after)  # inputs never modified


def _index_arrays(a: Any) -> tuple[np.ndarray, ...]:
    return tuple(a.coords) if a.format == "coo" else (a.indptr, a.indices)


@pytest.mark.parametrize("n", [0, 1, 12, 300])
def test_sparse_vectors_against_scipy(modules: dict[str, Any], n: int) -> None:
    m = modules["vector"]
    rng = np.random.default_rng(n)
    v = sp.random_array((n,), density=0.4, format="coo", rng=rng)
    w = rng.random(n)
    assert m.dot(v, w) == pytest.approx(float(v.toarray() @ w))
    negated = m.negate(v)
    assert negated.format == "coo" and negated.shape == (n,)
    np.testing.assert_array_equal(negated.toarray(), -v.toarray())


def test_unsorted_and_duplicate_entries_are_passed_as_a_sorted_copy(
        modules: dict[str, Any]) -> None:
    data = np.array([1.0, 2.0, 3.0, 4.0])
    indices = np.array([2, 0, 2, 1], dtype=np.int32)
    indptr = np.array([0, 3, 4], dtype=np.int32)
    a = sp.csr_array((data, indices, indptr), shape=(2, 3))
    assert not a.has_canonical_format
    x = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(modules["CSR"].matvec(a, x, np.zeros(2)), a @ x)
    np.testing.assert_array_equal(a.indices, indices)  # the caller's order kept
    coo = sp.coo_array((data, (np.array([1, 0, 1, 0]), np.array([0, 2, 0, 1]))), shape=(2, 3))
    np.testing.assert_allclose(modules["COO"].matvec(coo, x, np.zeros(2)), coo @ x)
    v = sp.coo_array((data, (np.array([5, 1, 5, 0]),)), shape=(6,))
    assert modules["vector"].dot(v, np.arange(6.0)) == pytest.approx(v.toarray() @ np.arange(6.0))


@pytest.mark.parametrize("widths", [", posWidth = 32, crdWidth = 32",
                                    ", posWidth = 64, crdWidth = 64",
                                    ", posWidth = 32", ", crdWidth = 16",
                                    ", posWidth = 8, crdWidth = 8"])
def test_index_widths(session: Session, widths: str) -> None:
    m = session.compile(matrix_source(MAPS["CSR"], widths))
    for index_dtype in (np.int32, np.int64):
        a = random_matrix((20, 30), 0.2, "csr", seed=3)
        a.indices, a.indptr = a.indices.astype(index_dtype), a.indptr.astype(index_dtype)
        x = np.arange(30.0)
        np.testing.assert_allclose(m.matvec(a, x, np.zeros(20)), a @ x)
        np.testing.assert_allclose(m.square(a).toarray(), a.toarray() ** 2)


def test_index_overflow_of_the_declared_width_names_the_parameter(session: Session) -> None:
    m = session.compile(matrix_source(MAPS["CSR"], ", posWidth = 8, crdWidth = 8"))
    dense = sp.csr_array(np.ones((2, 100)))  # 200 entries: beyond an i8 position
    with pytest.raises(ValueError, match=r"argument 1.*position of 200 overflows the "
                                         r"encoding's posWidth \(i8\)"):
        m.matvec(dense, np.ones(100), np.zeros(2))
    wide = sp.csr_array(([1.0], ([0], [199])), shape=(1, 200))
    with pytest.raises(ValueError, match=r"a dim of 200 \(coordinates up to 199\) overflows "
                                         r"the encoding's crdWidth \(i8\)"):
        m.matvec(wide, np.ones(200), np.zeros(1))


def test_bad_arguments_get_errors_naming_the_parameter(modules: dict[str, Any]) -> None:
    @mlir_kernel(source=matrix_source(MAPS["CSR"]))
    def matvec(a: Any, x: Any, y: Any) -> Any: ...

    a = random_matrix((3, 4), 0.5, "csr", seed=1)
    x, y = np.ones(4), np.zeros(3)
    cases = [
        (a.toarray(), TypeError, r"matvec\(\) argument 1 \('a'\): expected a CSR scipy.sparse "
                                 r"matrix or array .* got a dense numpy array; pass "
                                 r"scipy.sparse.csr_array\(a\)"),
        (a.tocsc(), TypeError, r"argument 1 \('a'\): .* got a CSC one; pass a.tocsr\(\)"),
        (a.astype(np.float32), TypeError, r"'a'\): expected float64 values .* got float32"),
        (sp.coo_array(np.ones(3)), ValueError, r"'a'\): expected a 2-D sparse array"),
        ([[1.0]], TypeError, r"'a'\): expected a CSR .* got list"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            matvec(value, x, y)
    bad = sp.csr_array((np.ones(2), np.array([0, 4]), np.array([0, 1, 2, 2])), shape=(3, 4))
    with pytest.raises(ValueError, match=r"'a'\): index 4 is out of range \[0, 4\)"):
        matvec(bad, x, y)
    broken = a.copy()
    broken.indptr = broken.indptr.copy()
    broken.indptr[-1] += 1
    with pytest.raises(ValueError, match=r"'a'\): inconsistent CSR arrays"):
        matvec(broken, x, y)
    coo = sp.coo_array(([1.0], ([0], [7])), shape=(3, 8))
    coo.coords[1][0] = 9  # in place, after scipy built it
    with pytest.raises(ValueError, match=r"argument 1: coordinate of dim 1: 9 is out of "
                                         r"range \[0, 8\)"):
        modules["COO"].matvec(coo, np.ones(8), y)


def test_static_shapes_are_checked(session: Session) -> None:
    m = session.compile("""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @matvec(%a: tensor<3x4xf64, #CSR>, %x: tensor<4xf64>, %y: tensor<3xf64>)
    -> tensor<3xf64> {
  %r = linalg.matvec ins(%a, %x : tensor<3x4xf64, #CSR>, tensor<4xf64>)
      outs(%y : tensor<3xf64>) -> tensor<3xf64>
  return %r : tensor<3xf64>
}
""")
    a = random_matrix((3, 4), 0.5, "csr", seed=2)
    np.testing.assert_allclose(m.matvec(a, np.ones(4), np.zeros(3)), a @ np.ones(4))
    with pytest.raises(ValueError, match=r"argument 1: dim 1 is 5, but tensor<3x4xf64"):
        m.matvec(random_matrix((3, 5), 0.5, "csr", seed=2), np.ones(4), np.zeros(3))


def test_scipy_matrices_and_keyword_arguments(modules: dict[str, Any]) -> None:
    @mlir_kernel(source=matrix_source(MAPS["CSR"]))
    def matvec(a: Any, x: Any, y: Any) -> Any: ...

    a = sp.csr_matrix(random_matrix((6, 5), 0.5, "csr", seed=4))
    x = np.arange(5.0)
    np.testing.assert_allclose(matvec(a, y=np.zeros(6), x=x), a @ x)
    with pytest.raises(TypeError, match="missing argument 3"):
        matvec(a, x)


def test_threads_share_a_sparse_kernel(modules: dict[str, Any]) -> None:
    m = modules["CSR"]
    a = random_matrix((300, 200), 0.05, "csr", seed=5)
    x = np.arange(200.0)
    expected, squared = a @ x, a.toarray() ** 2
    failures: list[str] = []

    def work() -> None:
        for _ in range(50):
            if not np.allclose(m.matvec(a, x, np.zeros(300)), expected):
                failures.append("matvec")
            if not np.array_equal(m.square(a).toarray(), squared):
                failures.append("square")

    run_in_threads(lambda _: work(), range(4))
    assert failures == []


def test_a_callback_raising_in_a_sparse_kernel(session: Session) -> None:
    @callback(session=session)
    def check(v: f64) -> f64:
        if v > 1.0:
            raise KeyError("too big")
        return v

    # (MLIR 22's sparsifier cannot lower a call inside a sparse linalg.generic: the
    # callback runs before the loops, and after them, once the result is allocated.)
    m = session.compile("""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
#ew = {indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>],
       iterator_types = ["parallel", "parallel"]}
func.func @scaled(%a: tensor<?x?xf64, #CSR>, %k: f64, %after: f64) -> tensor<?x?xf64, #CSR> {
  %k2 = func.call @check(%k) : (f64) -> f64
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %d0 = tensor.dim %a, %c0 : tensor<?x?xf64, #CSR>
  %d1 = tensor.dim %a, %c1 : tensor<?x?xf64, #CSR>
  %e = tensor.empty(%d0, %d1) : tensor<?x?xf64, #CSR>
  %r = linalg.generic #ew ins(%a : tensor<?x?xf64, #CSR>) outs(%e : tensor<?x?xf64, #CSR>) {
    ^bb0(%v: f64, %o: f64):
      %m = arith.mulf %v, %k2 : f64
      linalg.yield %m : f64
  } -> tensor<?x?xf64, #CSR>
  %unused = func.call @check(%after) : (f64) -> f64
  return %r : tensor<?x?xf64, #CSR>
}
func.func private @check(f64) -> f64
""")
    a = random_matrix((30, 20), 0.3, "csr", seed=8)
    np.testing.assert_allclose(m.scaled(a, 0.5, 0.0).toarray(), a.toarray() * 0.5)
    for k, after in ((2.0, 0.0), (0.5, 2.0)):
        with pytest.raises(KeyError, match="too big"):
            m.scaled(a, k, after)
    np.testing.assert_allclose(m.scaled(a, 0.5, 0.0).toarray(), a.toarray() * 0.5)


def test_options_and_the_disk_cache(tmp_path: Any) -> None:
    a = random_matrix((50, 40), 0.2, "csr", seed=6)
    x = np.arange(40.0)
    for session in (Session(parallel=True), Session(boundscheck=True),
                    Session(fastmath=True), Session(opt_level=0),
                    Session(cache_dir=tmp_path),
                    Session(cache_dir=tmp_path)):  # the last one loads from disk
        m = session.compile(matrix_source(MAPS["CSR"]))
        np.testing.assert_allclose(m.matvec(a, x, np.zeros(50)), a @ x)
        np.testing.assert_allclose(m.square(a).toarray(), a.toarray() ** 2)


def test_no_leaks_over_thousands_of_calls(modules: dict[str, Any]) -> None:
    m = modules["CSR"]
    a = random_matrix((400, 400), 0.05, "csr", seed=7)  # ~8000 entries: ~130 KB a result
    x = np.ones(400)
    for _ in range(200):
        m.square(a)
        m.matvec(a, x, np.zeros(400))
    gc.collect()
    refs = (sys.getrefcount(a), sys.getrefcount(a.data), sys.getrefcount(a.indices))
    start = rss_bytes()
    for _ in range(3000):  # ~400 MB if results were never freed
        m.square(a)
        m.matvec(a, x, np.zeros(400))
    gc.collect()
    assert rss_bytes() - start < 48 << 20
    assert (sys.getrefcount(a), sys.getrefcount(a.data), sys.getrefcount(a.indices)) == refs


def test_a_forked_child_calls_a_sparse_kernel() -> None:
    script = f"""
import os, numpy as np, scipy.sparse as sp
from pymlirjit import Session
m = Session().compile({matrix_source(MAPS['CSR'])!r})
a = sp.random_array((30, 20), density=0.3, format="csr", rng=1)
x = np.arange(20.0)
assert np.allclose(m.matvec(a, x, np.zeros(30)), a @ x)
pid = os.fork()
if pid == 0:
    ok = np.allclose(m.matvec(a, x, np.zeros(30)), a @ x) and np.allclose(
        m.square(a).toarray(), a.toarray() ** 2)
    os._exit(0 if ok else 3)
assert os.waitpid(pid, 0)[1] == 0
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and done.stderr == ""


def test_index_arrays_changed_in_place_are_checked_again_once_scipy_is_told(
        modules: dict[str, Any]) -> None:
    # As scipy's own routines: a matrix's validity is checked once per index arrays, and
    # scipy's has_canonical_format flag, set False, asks for it again.
    m = modules["CSR"]
    a = random_matrix((5, 4), 0.5, "csr", seed=9)
    x = np.ones(4)
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(5)), a @ x)
    a.indices[0] = 40
    a.has_canonical_format = False
    with pytest.raises(ValueError, match=r"index 40 is out of range \[0, 4\)"):
        m.matvec(a, x, np.zeros(5))
    b = random_matrix((5, 4), 0.5, "csr", seed=9)
    np.testing.assert_allclose(m.matvec(b, x, np.zeros(5)), b @ x)
    b.indices = b.indices.copy()  # another array, though scipy still calls it canonical
    b.indices[0] = 40
    with pytest.raises(ValueError, match=r"index 40 is out of range \[0, 4\)"):
        m.matvec(b, x, np.zeros(5))


def test_a_matrix_resized_or_told_unsorted_in_place_is_not_passed_as_remembered(
        modules: dict[str, Any]) -> None:
    # A matrix passed before is passed again without its checks, unless its arrays, its
    # shape or scipy's flags changed since: each of those takes the checked path.
    m = modules["CSR"]
    a = random_matrix((5, 4), 0.5, "csr", seed=12)
    for _ in range(2):
        np.testing.assert_allclose(m.matvec(a, np.ones(4), np.zeros(5)), a @ np.ones(4))
    a.resize((5, 6))  # scipy changes only the shape: the arrays are the same
    x = np.arange(6.0)
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(5)), a @ x)
    with pytest.raises(ValueError):
        m.matvec(a, np.ones(4), np.zeros(5))  # the old width no longer fits
    a.has_sorted_indices = False  # told unsorted: passed as a sorted copy
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(5)), a @ x)
    a.data = a.data * 2  # new values: seen
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(5)), a @ x)


def test_a_matrix_passed_is_not_changed_and_pickles_without_pymlirjit(
        modules: dict[str, Any]) -> None:
    # What pymlirjit remembers of a matrix lives in pymlirjit, not in the matrix: it
    # pickles (and unpickles where pymlirjit is not installed) as before, and goes away
    # with it.
    import pickle
    import weakref

    from pymlirjit.boundary import sparsearrays

    a = random_matrix((8, 6), 0.4, "csr", seed=10)
    state = dict(a.__dict__)
    x = np.ones(6)
    for _ in range(3):
        np.testing.assert_allclose(modules["CSR"].matvec(a, x, np.zeros(8)), a @ x)
    assert set(a.__dict__) == set(state) | {"_has_canonical_format", "_has_sorted_indices"}
    assert b"pymlirjit" not in pickle.dumps(a)
    key, gone = id(a), weakref.ref(a)
    assert key in sparsearrays._checked
    del a
    gc.collect()
    assert gone() is None and key not in sparsearrays._checked


@pytest.mark.parametrize("name", ["CSR", "COO (SoA)"])
def test_read_only_matrices_are_passed_as_copies(modules: dict[str, Any], name: str) -> None:
    m = modules[name]
    a = random_matrix((7, 5), 0.5, SCIPY[name], seed=11)
    for array in (a.data, *_index_arrays(a)):
        array.flags.writeable = False
    x = np.arange(5.0)
    for _ in range(2):  # the second time: what was remembered of it holds
        np.testing.assert_allclose(m.matvec(a, x, np.zeros(7)), a @ x)
    a.data = a.data.copy()
    a.data.flags.writeable = True
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(7)), a @ x)


def test_a_generic_sparse_kernel_binds_its_alias_from_the_scipy_values() -> None:
    @mlir_kernel(source="""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @spmv(%a: tensor<?x?x!T, #CSR>, %x: tensor<?x!T>, %y: tensor<?x!T>)
    -> tensor<?x!T> {
  %r = linalg.matvec ins(%a, %x : tensor<?x?x!T, #CSR>, tensor<?x!T>)
      outs(%y : tensor<?x!T>) -> tensor<?x!T>
  return %r : tensor<?x!T>
}
""")
    def spmv(a: Any, x: Any, y: Any) -> Any: ...

    a = random_matrix((6, 4), 0.5, "csr", seed=12)
    for dtype in (np.float64, np.float32):
        typed = a.astype(dtype)
        x = np.arange(4, dtype=dtype)
        result = spmv(typed, x, np.zeros(6, dtype))
        assert result.dtype == dtype
        np.testing.assert_allclose(result, typed @ x, rtol=1e-6)


def test_the_address_and_ctypes_of_a_sparse_kernel_are_its_flat_wrappers() -> None:
    @mlir_kernel(source=matrix_source(MAPS["CSR"], ", posWidth = 32, crdWidth = 32"))
    def matvec(a: Any, x: Any, y: Any) -> Any: ...

    assert "#sparse_tensor.encoding" in matvec.signature.mlir
    # (buffers: 3 memref pointers, 2 sizes, then x and y; the result through a pointer)
    assert len(matvec.ctypes.argtypes) == 1 + 3 + 2 + 2
    assert matvec.address == ctypes.cast(matvec.ctypes, ctypes.c_void_p).value


def test_sparse_tensors_beside_scalars_that_cross_widened(session: Session) -> None:
    m = session.compile("""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @f(%a: tensor<?x?xf64, #CSR>, %flag: i1, %h: f16) -> (i1, f16, index) {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %a, %c0 : tensor<?x?xf64, #CSR>
  %true = arith.constant true
  %not = arith.xori %flag, %true : i1
  %twice = arith.addf %h, %h : f16
  return %not, %twice, %d : i1, f16, index
}
""")
    assert m.f(sp.csr_array((3, 2)), True, np.float16(1.5)) == (False, 3.0, 3)
    assert m.f(sp.csr_array((4, 2)), False, np.float16(-0.25)) == (True, -0.5, 4)


def test_a_sparse_callback_with_scalars_that_cross_widened_is_refused(
        session: Session) -> None:
    t = ("tensor<?x?xf64, #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, "
         "j : compressed) }>>")

    @callback(f"({t}, i1) -> ()", session=session)
    def cb(a: Any, flag: bool) -> None:
        raise AssertionError("never called")

    with pytest.raises(SignatureError, match=r"callback @cb: a callback taking sparse "
                                             r"tensors cannot take or return i1"):
        session.compile(f"""
func.func @f(%a: {t}, %flag: i1) {{
  func.call @cb(%a, %flag) : ({t}, i1) -> ()
  return
}}
func.func private @cb({t}, i1)
""")


def test_a_body_the_sparsifier_cannot_sparsify_gets_an_error_saying_so(
        session: Session) -> None:
    # A maximum reduction: MLIR 22 leaves the linalg.generic on the sparse tensor as it
    # was and fails with an unresolved materialization; the error says why.
    from pymlirjit import MLIRError

    with pytest.raises(MLIRError, match=r"the sparsifier could not make sparse code of an "
                                        r"operation on this sparse tensor .* a maximum "
                                        r"reduction .* MLIR said: failed to legalize"):
        session.compile("""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
#rows = {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
         iterator_types = ["parallel", "reduction"]}
func.func @row_max(%a: tensor<?x?xf64, #CSR>) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x?xf64, #CSR>
  %zero = arith.constant 0.0 : f64
  %empty = tensor.empty(%m) : tensor<?xf64>
  %init = linalg.fill ins(%zero : f64) outs(%empty : tensor<?xf64>) -> tensor<?xf64>
  %r = linalg.generic #rows ins(%a : tensor<?x?xf64, #CSR>) outs(%init : tensor<?xf64>) {
  ^bb0(%v: f64, %best: f64):
    %magnitude = math.absf %v : f64
    %larger = arith.maximumf %best, %magnitude : f64
    linalg.yield %larger : f64
  } -> tensor<?xf64>
  return %r : tensor<?xf64>
}
""")


def test_a_bad_dense_argument_beside_a_sparse_one_is_named_by_its_own_position() -> None:
    @mlir_kernel(source=matrix_source(MAPS["CSR"]))
    def matvec(a: Any, x: Any, y: Any) -> Any: ...

    a = random_matrix((3, 4), 0.5, "csr", seed=13)
    with pytest.raises(TypeError, match=r"^matvec\(\) argument 2 \('x'\): expected a float64 "
                                        r"array for tensor<\?xf64>, got a float32 array"):
        matvec(a, np.ones(4, np.float32), np.zeros(3))
    with pytest.raises(TypeError, match=r"^matvec\(\) argument 3 \('y'\): expected a numpy "
                                        r"array of float64"):
        matvec(a, np.ones(4), [0.0, 0.0, 0.0])


def test_a_callback_calls_a_sparse_kernel_during_a_sparse_call(session: Session) -> None:
    # Re-entered: the callback of one sparse call makes another (and of the same
    # matrix, which is remembered by then).
    spmv = session.compile(matrix_source(MAPS["CSR"])).matvec
    a = random_matrix((20, 10), 0.3, "csr", seed=14)
    x = np.arange(10.0)

    @callback(session=session)
    def hook(k: f64) -> f64:
        return float(spmv(a, x, np.zeros(20)).sum()) * k

    m = session.compile("""
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @outer(%a: tensor<?x?xf64, #CSR>, %x: tensor<?xf64>, %y: tensor<?xf64>, %k: f64)
    -> (tensor<?xf64>, f64) {
  %h = func.call @hook(%k) : (f64) -> f64
  %r = linalg.matvec ins(%a, %x : tensor<?x?xf64, #CSR>, tensor<?xf64>)
      outs(%y : tensor<?xf64>) -> tensor<?xf64>
  return %r, %h : tensor<?xf64>, f64
}
func.func private @hook(f64) -> f64
""")
    for _ in range(3):
        product, hooked = m.outer(a, x, np.zeros(20), 2.0)
        np.testing.assert_allclose(product, a @ x)
        assert hooked == pytest.approx(2.0 * (a @ x).sum())


def test_one_sparse_result_returned_twice_is_freed_once() -> None:
    # Both results hold the kernel's three buffers: freeing them twice would abort
    # (MALLOC_CHECK_=3 makes glibc check), so in a child process.
    script = f"""
import gc, numpy as np, scipy.sparse as sp
from pymlirjit import Session
source = {matrix_source(MAPS['CSR'])!r}.replace(
    "func.func @square(%a: tensor<?x?xf64, #S>) -> tensor<?x?xf64, #S> {{",
    "func.func @square(%a: tensor<?x?xf64, #S>) -> (tensor<?x?xf64, #S>, tensor<?x?xf64, #S>) {{"
).replace("  return %r : tensor<?x?xf64, #S>\\n}}\\nfunc.func @same",
          "  return %r, %r : tensor<?x?xf64, #S>, tensor<?x?xf64, #S>\\n}}\\nfunc.func @same")
m = Session().compile(source)
a = sp.random_array((30, 20), density=0.3, format="csr", rng=1)
for i in range(1000):
    first, second = m.square(a)
    del first
    if i % 250 == 0:
        gc.collect()
assert abs(second - a.multiply(a)).max() == 0
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MALLOC_CHECK_": "3"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and done.stderr == ""


def test_converted_index_arrays_are_kept_and_new_values_seen(modules: dict[str, Any]) -> None:
    # The default widths (index, 64 bits) convert scipy's int32 indices once per matrix;
    # its values are passed as they are, so changing them in place is seen.
    from pymlirjit.boundary import sparsearrays

    m = modules["CSR"]
    a = random_matrix((40, 30), 0.2, "csr", seed=15)
    assert a.indices.dtype == np.int32
    x = np.arange(30.0)
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(40)), a @ x)
    kept = sparsearrays._passed[id(a)][6]
    assert kept[1].dtype == np.int64 and kept[2] is a.data
    a.data *= 3.0
    np.testing.assert_allclose(m.matvec(a, x, np.zeros(40)), a @ x)
    assert sparsearrays._passed[id(a)][6] is kept
    a.indices = a.indices.copy()  # other index arrays: converted and checked anew
    a.indices[0] = 99
    with pytest.raises(ValueError, match=r"index 99 is out of range \[0, 30\)"):
        m.matvec(a, x, np.zeros(40))
