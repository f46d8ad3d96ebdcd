"""Sparse kernels under hostile use: operands whose shapes disagree, callbacks given
scipy.sparse views that raise or re-enter the kernel, threads, a cache cleared during a
call, fork, ``parallel=True``. Each ends in a Python exception or the right values,
never a crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from pymlirjit import Session, callback, mlir_kernel
from tests.threads import run_in_threads

MAPS = {
    "CSR": "(i, j) -> (i : dense, j : compressed)",
    "CSC": "(i, j) -> (j : dense, i : compressed)",
    "DCSR": "(i, j) -> (i : compressed, j : compressed)",
    "COO": "(i, j) -> (i : compressed(nonunique), j : singleton)",
    "COO (SoA)": "(i, j) -> (i : compressed(nonunique), j : singleton(soa))",
}
SCIPY = {"CSR": "csr", "CSC": "csc", "DCSR": "csr", "COO": "coo", "COO (SoA)": "coo"}


def sparse_type(map_: str) -> str:
    return f"tensor<?x?xf64, #sparse_tensor.encoding<{{ map = {map_} }}>>"


def matvec_source(map_: str) -> str:
    t = sparse_type(map_)
    return f"""
func.func @matvec(%a: {t}, %x: tensor<?xf64>, %y: tensor<?xf64>) -> tensor<?xf64> {{
  %r = linalg.matvec ins(%a, %x : {t}, tensor<?xf64>) outs(%y : tensor<?xf64>)
      -> tensor<?xf64>
  return %r : tensor<?xf64>
}}
"""


def matrix(fmt: str, shape: tuple[int, int] = (7, 5), seed: int = 0) -> Any:
    return sp.random_array(shape, density=0.4, format="csr", rng=seed).asformat(fmt)


@pytest.mark.parametrize("name", list(MAPS))
def test_operands_whose_shapes_disagree_raise_naming_the_op(session: Session,
                                                             name: str) -> None:
    # MLIR's shape checks of linalg ops, which aborted the process in a sparse module
    # (the sparsifier lowers in one pass, past checked mode's hook), raise ValueError.
    m = session.compile(matvec_source(MAPS[name]))
    a = matrix(SCIPY[name])
    for x, y in ((np.ones(6), np.zeros(7)), (np.ones(4), np.zeros(7)),
                 (np.ones(5), np.zeros(6)), (np.ones(5), np.zeros(8))):
        with pytest.raises(ValueError, match=r"^shape mismatch in @matvec \(MLIR line 3\): "
                                             r"dimension #0 of input/output operand #[12]"):
            m.matvec(a, x, y)
    np.testing.assert_allclose(m.matvec(a, np.arange(5.0), np.zeros(7)), a @ np.arange(5.0))


def test_a_mismatch_names_the_parameter_by_the_stubs_name(session: Session) -> None:
    @mlir_kernel(source=matvec_source(MAPS["CSR"]), session=session)
    def matvec(matrix: sp.csr_array, vector: np.ndarray, out: np.ndarray) -> np.ndarray: ...

    a = matrix("csr")
    with pytest.raises(ValueError, match=r"^shape mismatch in @matvec \(.*\): dimension #0 of "
                                         r"input/output operand #1 is incompatible with "
                                         r"inferred dimension size \(operand #1 is argument "
                                         r"2 \('vector'\) of @matvec\)$"):
        matvec(a, np.ones(6), np.zeros(7))
    with pytest.raises(ValueError, match=r"\(operand #2 is argument 3 \('out'\) of @matvec\)$"):
        matvec(a, np.ones(5), np.zeros(8))
    # A module's function (of another text: a kernel's names go with its text, as its
    # Python line does): no stub, so its position only.
    with pytest.raises(ValueError, match=r"\(operand #1 is argument 2 of @matvec\)$"):
        session.compile(matvec_source(MAPS["CSR"]) + "\n").matvec(a, np.ones(6), np.zeros(7))


def test_a_sparse_vector_and_a_dense_one_of_another_length(session: Session) -> None:
    m = session.compile("""
#V = #sparse_tensor.encoding<{ map = (i) -> (i : compressed) }>
func.func @dot(%x: tensor<?xf64, #V>, %w: tensor<?xf64>, %o: tensor<f64>) -> tensor<f64> {
  %r = linalg.dot ins(%x, %w : tensor<?xf64, #V>, tensor<?xf64>) outs(%o : tensor<f64>)
      -> tensor<f64>
  return %r : tensor<f64>
}
""")
    v = sp.coo_array(([1.0, 2.0], ([1, 4],)), shape=(6,))
    assert m.dot(v, np.arange(6.0), np.zeros(())) == 9.0
    with pytest.raises(ValueError, match="shape mismatch in @dot"):
        m.dot(v, np.arange(3.0), np.zeros(()))


def view_source(map_: str) -> str:
    t = sparse_type(map_)
    return f"""
func.func @f(%a: {t}, %k: f64) -> f64 {{
  %r = func.call @inspect(%a, %k) : ({t}, f64) -> f64
  return %r : f64
}}
func.func private @inspect({t}, f64) -> f64
"""


@pytest.mark.parametrize("name", list(MAPS))
def test_a_callback_given_a_view_raises_and_re_enters_the_kernel(session: Session,
                                                                 name: str) -> None:
    t = sparse_type(MAPS[name])
    a = matrix(SCIPY[name], seed=1)
    depths: list[int] = []

    @callback(f"({t}, f64) -> f64", session=session)
    def inspect(view: Any, k: float) -> float:
        depths.append(int(k))
        assert view.format == SCIPY[name] and view.shape == a.shape
        np.testing.assert_array_equal(view.toarray(), a.toarray())
        if k == 3.0:
            raise KeyError(f"deep {k}")
        if k in (1.0, 2.0):  # the same kernel again, given the view of its own argument
            return float(f(view, 0.0 if k == 1.0 else 3.0)) + 1.0
        return float(view.sum())

    @mlir_kernel(source=view_source(MAPS[name]), session=session)
    def f(a: Any, k: float) -> float: ...

    assert f(a, 0.0) == pytest.approx(a.sum())
    assert f(a, 1.0) == pytest.approx(a.sum() + 1.0)  # re-entered once
    with pytest.raises(KeyError, match="deep 3") as raised:
        f(a, 2.0)  # re-entered; the inner call's callback raises through both
    assert "inspect" in "".join(getattr(raised.value, "__notes__", []))
    assert depths == [0, 1, 0, 2, 3]
    assert f(a, 0.0) == pytest.approx(a.sum())  # and the kernel still works


def test_threads_call_a_kernel_whose_callback_gets_views(session: Session) -> None:
    t = sparse_type(MAPS["CSR"])

    @callback(f"({t}, f64) -> f64", session=session)
    def inspect(view: Any, k: float) -> float:
        if k < 0:
            raise ValueError("negative")
        return float(view.sum()) * k

    f = session.compile(view_source(MAPS["CSR"])).f
    matrices = [matrix("csr", (30, 20), seed) for seed in range(4)]
    failures: list[str] = []

    def work(a: Any) -> None:
        for i in range(100):
            if i % 10 == 9:
                try:
                    f(a, -1.0)
                    failures.append("no raise")
                except ValueError:
                    pass
            elif f(a, 2.0) != pytest.approx(2.0 * a.sum()):
                failures.append("wrong value")

    run_in_threads(work, matrices)
    assert failures == []


def test_the_cache_cleared_during_a_sparse_call(session: Session) -> None:
    t = sparse_type(MAPS["CSR"])
    cleared: list[bool] = []

    @callback(f"({t}, f64) -> f64", session=session)
    def inspect(view: Any, k: float) -> float:
        if k > 0:
            session.clear_cache()  # the kernel's own module, from inside its call
            cleared.append(True)
        return float(view.nnz)

    @mlir_kernel(source=view_source(MAPS["CSR"]), session=session)
    def f(a: Any, k: float) -> float: ...

    @mlir_kernel(source=matvec_source(MAPS["CSR"]), session=session)
    def matvec(a: Any, x: Any, y: Any) -> Any: ...

    a = matrix("csr", seed=2)
    x = np.arange(5.0)
    np.testing.assert_allclose(matvec(a, x, np.zeros(7)), a @ x)
    for _ in range(3):
        assert f(a, 1.0) == a.nnz  # compiles again on the next call
        np.testing.assert_allclose(matvec(a, x, np.zeros(7)), a @ x)
        assert f(a, 0.0) == a.nnz
    assert cleared == [True] * 3


def test_a_forked_child_calls_a_kernel_whose_callback_gets_views() -> None:
    script = textwrap.dedent(f"""
        import os, warnings
        import numpy as np, scipy.sparse as sp
        from pymlirjit import Session, callback
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        session = Session()

        @callback({"(" + sparse_type(MAPS["COO"]) + ", f64) -> f64"!r}, session=session)
        def inspect(view, k):
            if k < 0:
                raise KeyError("negative")
            return float(view.sum()) * k

        f = session.compile({view_source(MAPS["COO"])!r}).f
        a = sp.random_array((30, 20), density=0.3, format="coo", rng=1)
        assert abs(f(a, 2.0) - 2 * a.sum()) < 1e-9
        pid = os.fork()
        if pid == 0:
            ok = abs(f(a, 3.0) - 3 * a.sum()) < 1e-9
            try:
                f(a, -1.0)
                ok = False
            except KeyError:
                pass
            os._exit(0 if ok and abs(f(a, 1.0) - a.sum()) < 1e-9 else 3)
        assert os.waitpid(pid, 0)[1] == 0
        print("ok")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and done.stderr == ""


def test_a_parallel_module_with_sparse_and_dense_functions() -> None:
    # parallel=True: the sparsifier lowers the whole module, its loops serial (docs),
    # the parallel loop of the dense function included; both compute the right values.
    session = Session(parallel=True)
    m = session.compile(matvec_source(MAPS["CSR"]) + """
func.func @scale(%x: memref<?xf64>, %k: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = memref.load %x[%i] : memref<?xf64>
    %s = arith.mulf %v, %k : f64
    memref.store %s, %x[%i] : memref<?xf64>
  }
  return
}
""")
    a = matrix("csr", (300, 200), seed=3)
    x = np.arange(200.0)
    for _ in range(3):
        np.testing.assert_allclose(m.matvec(a, x, np.zeros(300)), a @ x)
    y = np.arange(1000.0)
    m.scale(y, 2.0)
    np.testing.assert_array_equal(y, 2.0 * np.arange(1000.0))
    with pytest.raises(ValueError, match="shape mismatch in @matvec"):
        m.matvec(a, np.ones(3), np.zeros(300))


def test_shapes_that_disagree_in_a_module_with_shared_libraries() -> None:
    # Such a call cannot unwind at a failure: MLIR's shape check aborted the process;
    # now it raises, and the op it checks does not run (nor do the later ones). In a
    # child process: a regression aborts it, not the test run.
    script = textwrap.dedent(f"""
        import numpy as np, scipy.sparse as sp
        from pymlirjit import Session
        session = Session(shared_libs=["mlir_c_runner_utils"])
        maps = {MAPS!r}
        scipy_formats = {SCIPY!r}
        for name, map_ in maps.items():
            m = session.compile({matvec_source("MAP")!r}.replace("MAP", map_))
            a = sp.random_array((7, 5), density=0.4, format="csr", rng=0)
            a = a.asformat(scipy_formats[name])
            for x, y in ((np.ones(6), np.zeros(7)), (np.ones(4), np.zeros(7)),
                         (np.ones(5), np.zeros(6)), (np.ones(5), np.zeros(8))):
                try:
                    m.matvec(a, x, y)
                    raise SystemExit(f"{{name}}: no error for {{x.shape}}, {{y.shape}}")
                except ValueError as error:
                    assert str(error).startswith(
                        "shape mismatch in @matvec (MLIR line 3): dimension #0 of "
                        "input/output operand #"), error
            assert np.allclose(m.matvec(a, np.arange(5.0), np.zeros(7)), a @ np.arange(5.0))
        # A sparse output (docs/sparse.md's SDDMM: S + spy(S) * (A @ B)), a checked op in a
        # loop, and an elementwise op (checked too) after it.
        m = session.compile('''
        #CSR = #sparse_tensor.encoding<{{ map = (i, j) -> (i : dense, j : compressed) }}>
        #sampled = {{indexing_maps = [affine_map<(i, j, k) -> (i, k)>,
                                      affine_map<(i, j, k) -> (k, j)>,
                                      affine_map<(i, j, k) -> (i, j)>],
                    iterator_types = ["parallel", "parallel", "reduction"]}}
        func.func @sampled(%s: tensor<?x?xf64, #CSR>, %a: tensor<?x?xf64>,
                           %b: tensor<?x?xf64>) -> tensor<?x?xf64, #CSR> {{
          %r = linalg.generic #sampled ins(%a, %b : tensor<?x?xf64>, tensor<?x?xf64>)
              outs(%s : tensor<?x?xf64, #CSR>) {{
            ^bb0(%x: f64, %y: f64, %v: f64):
              %p = sparse_tensor.unary %v : f64 to f64
                present = {{
                  ^bb0(%stored: f64):
                    %xy = arith.mulf %x, %y : f64
                    sparse_tensor.yield %xy : f64
                }}
                absent = {{}}
              %zero = arith.constant 0.0 : f64
              %sum = sparse_tensor.reduce %v, %p, %zero : f64 {{
                ^bb0(%l: f64, %r: f64):
                  %t = arith.addf %l, %r : f64
                  sparse_tensor.yield %t : f64
              }}
              linalg.yield %sum : f64
          }} -> tensor<?x?xf64, #CSR>
          return %r : tensor<?x?xf64, #CSR>
        }}
        func.func @twice(%a: tensor<?x?xf64, #CSR>, %x: tensor<?xf64>, %y: tensor<?xf64>,
                         %n: index) -> tensor<?xf64> {{
          %c0 = arith.constant 0 : index
          %c1 = arith.constant 1 : index
          %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %y) -> tensor<?xf64> {{
            %t = linalg.matvec ins(%a, %x : tensor<?x?xf64, #CSR>, tensor<?xf64>)
                outs(%acc : tensor<?xf64>) -> tensor<?xf64>
            scf.yield %t : tensor<?xf64>
          }}
          %s = arith.addf %r, %y : tensor<?xf64>
          return %s : tensor<?xf64>
        }}
        ''')
        s = sp.random_array((30, 20), density=0.2, format="csr", rng=1)
        left, right = np.random.default_rng(2).random((30, 4)), np.ones((4, 20))
        got = m.sampled(s, left, right)
        assert np.allclose((got - s).toarray(), (s != 0).multiply(left @ right).toarray())
        for bad in ((np.ones((29, 4)), right), (left, np.ones((3, 20)))):
            try:
                m.sampled(s, *bad)
                raise SystemExit("sampled: no error")
            except ValueError as error:
                assert str(error).startswith("shape mismatch in @sampled"), error
        x, y = np.arange(20.0), np.zeros(30)
        assert np.allclose(m.twice(s, x, y, 3), 3 * (s @ x))
        for x, y in ((np.ones(19), np.zeros(30)), (np.ones(20), np.zeros(29))):
            try:
                m.twice(s, x, y, 3)
                raise SystemExit("twice: no error")
            except ValueError as error:
                assert str(error).startswith("shape mismatch in @twice"), error
        # A dense function of a sparse module: its matmul on memrefs, which a schedule
        # outlines into a call, is skipped too (its output left as it was).
        m = session.compile({matvec_source(MAPS["CSR"])!r} + '''
        func.func @matmul(%a: memref<?x?xf64>, %b: memref<?x?xf64>, %c: memref<?x?xf64>) {{
          linalg.matmul ins(%a, %b : memref<?x?xf64>, memref<?x?xf64>)
              outs(%c : memref<?x?xf64>)
          return
        }}
        ''')
        c = np.zeros((2, 2))
        m.matmul(np.ones((2, 3)), np.ones((3, 2)), c)
        assert c.tolist() == [[3.0, 3.0], [3.0, 3.0]]
        try:
            m.matmul(np.ones((2, 3)), np.ones((4, 2)), c)
            raise SystemExit("matmul: no error")
        except ValueError as error:
            assert str(error).startswith("shape mismatch in @matmul"), error
        assert c.tolist() == [[3.0, 3.0], [3.0, 3.0]]
        print("ok")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and done.stderr == ""
