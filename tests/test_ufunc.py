"""mlir_ufunc and mlir_gufunc: real numpy ufuncs whose loops are compiled MLIR."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import MLIRError, Session, SignatureError, callback, f64, mlir_gufunc, mlir_ufunc
from tests.threads import run_in_threads

ROOT = Path(__file__).resolve().parent.parent

ADD = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}"""

GENERIC_MUL = """
func.func @mul(%a: !T, %b: !T) -> !T {
  %r = arith.mulf %a, %b : !T
  return %r : !T
}"""

DOT = """
func.func @dot(%a: memref<?xf64>, %b: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %b[%i] : memref<?xf64>
    %p = arith.mulf %x, %y : f64
    %t = arith.addf %acc, %p : f64
    scf.yield %t : f64
  }
  return %s : f64
}"""

STRIDED = "memref<?xf64, strided<[?], offset: ?>>"
NORMALIZE = f"""
func.func @normalize(%a: {STRIDED}, %out: {STRIDED}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : {STRIDED}
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {{
    %x = memref.load %a[%i] : {STRIDED}
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }}
  scf.for %i = %c0 to %n step %c1 {{
    %x = memref.load %a[%i] : {STRIDED}
    %y = arith.divf %x, %s : f64
    memref.store %y, %out[%i] : {STRIDED}
  }}
  return
}}"""


@pytest.fixture(scope="module")
def add() -> np.ufunc:
    return mlir_ufunc(source=ADD, identity=0, session=Session())


@pytest.fixture(scope="module")
def dot() -> np.ufunc:
    return mlir_gufunc(source=DOT, layout="(n),(n)->()", session=Session())


def test_is_a_real_ufunc(add: np.ufunc) -> None:
    assert isinstance(add, np.ufunc)
    assert (add.nin, add.nout, add.types, add.__name__) == (2, 1, ["dd->d"], "add")


def test_broadcasting_and_scalars(add: np.ufunc) -> None:
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(add(a, np.arange(4.0)), a + np.arange(4.0))
    np.testing.assert_array_equal(add(a, 1.5), a + 1.5)
    assert add(2.0, 3.0) == 5.0  # 0-d inputs give a scalar
    assert isinstance(add(np.float64(1), np.float64(2)), np.float64)


def test_out_and_where(add: np.ufunc) -> None:
    a, b = np.arange(6.0), np.full(6, 10.0)
    out = np.full(6, -1.0)
    result = add(a, b, out=out, where=a % 2 == 0)
    assert result is out
    np.testing.assert_array_equal(out, [10.0, -1, 12, -1, 14, -1])
    add(a, a, out=a)  # in place: the output is an input
    np.testing.assert_array_equal(a, np.arange(6.0) * 2)


def test_reduce_and_accumulate(add: np.ufunc) -> None:
    a = np.arange(1.0, 13.0).reshape(3, 4)
    np.testing.assert_array_equal(add.reduce(a, axis=0), a.sum(axis=0))
    np.testing.assert_array_equal(add.reduce(a, axis=1), a.sum(axis=1))
    assert add.reduce(a, axis=None) == a.sum()  # identity 0: several axes at once
    assert add.reduce(np.array([])) == 0.0
    np.testing.assert_array_equal(add.accumulate(a[0]), np.cumsum(a[0]))
    np.testing.assert_array_equal(add.outer(np.arange(3.0), np.arange(2.0)),
                                  np.add.outer(np.arange(3.0), np.arange(2.0)))


def test_no_identity_reduces_one_axis_and_refuses_empty() -> None:
    maximum = mlir_ufunc(session=Session(), source="""
    func.func @biggest(%a: f64, %b: f64) -> f64 {
      %r = arith.maximumf %a, %b : f64
      return %r : f64
    }""")
    assert maximum.reduce(np.array([3.0, 7.0, 1.0])) == 7.0
    with pytest.raises(ValueError, match="identity"):
        maximum.reduce(np.array([]))


def test_non_contiguous_negative_strides_and_empty(add: np.ufunc) -> None:
    a = np.arange(40.0).reshape(5, 8)
    np.testing.assert_array_equal(add(a[:, ::3], a[::-1, 1::3]), a[:, ::3] + a[::-1, 1::3])
    np.testing.assert_array_equal(add(a.T, 1.0), a.T + 1.0)
    out = np.zeros(20)[::2]
    add(np.arange(10.0)[::-1], 1.0, out=out)
    np.testing.assert_array_equal(out, np.arange(10.0)[::-1] + 1)
    assert add(np.zeros(0), np.zeros(0)).shape == (0,)
    assert add(np.zeros((3, 0)), 1.0).shape == (3, 0)


def test_type_resolution_and_casting(add: np.ufunc) -> None:
    ints = add(np.arange(3), np.arange(3))  # int64 -> float64, safely
    assert ints.dtype == np.float64
    np.testing.assert_array_equal(add(np.arange(3, dtype=np.float32), 1), [1.0, 2.0, 3.0])
    with pytest.raises(TypeError):
        add(np.array([1 + 1j]), 1.0)  # complex does not cast safely to f64
    narrow = mlir_ufunc(session=Session(), source="""
    func.func @half(%a: f32) -> f32 {
      %c = arith.constant 0.5 : f32
      %r = arith.mulf %a, %c : f32
      return %r : f32
    }""")
    with pytest.raises(TypeError):
        narrow(np.arange(3.0))  # float64 -> float32 is not safe
    np.testing.assert_array_equal(narrow(np.arange(3.0), dtype=np.float32), [0, 0.5, 1])


def test_generic_source_one_loop_per_type() -> None:
    mul = mlir_ufunc(source=GENERIC_MUL, types=["f16", "f32", "f64"], identity=1,
                     session=Session())
    assert mul.types == ["ee->e", "ff->f", "dd->d"]
    assert mul(np.float32(2), np.float32(3)).dtype == np.float32
    assert mul(np.arange(3, dtype=np.float16), np.float16(2)).dtype == np.float16
    np.testing.assert_array_equal(mul(np.arange(3.0), 2.0), [0.0, 2.0, 4.0])
    assert mul.reduce(np.arange(1.0, 5.0)) == 24.0
    both = mlir_ufunc(session=Session(), types=[{"A": "f32", "B": "i32"}], source="""
    func.func @scale(%a: !A, %k: !B) -> !A {
      %f = arith.sitofp %k : !B to !A
      %r = arith.mulf %a, %f : !A
      return %r : !A
    }""")
    assert both.types == ["fi->f"]


def test_several_results_ints_bools_complex_and_index() -> None:
    session = Session()
    divmod_ = mlir_ufunc(session=session, source="""
    func.func @divmod(%a: i64, %b: i64) -> (i64, i64) {
      %q = arith.floordivsi %a, %b : i64
      %r = arith.remsi %a, %b : i64
      return %q, %r : i64, i64
    }""")
    q, r = divmod_(np.arange(10), 3)
    np.testing.assert_array_equal(q, np.arange(10) // 3)
    np.testing.assert_array_equal(r, np.arange(10) % 3)
    # Division by zero as numpy's own integer ufuncs: 0, and numpy's warning or error.
    a, b = np.array([7, -7, 5, -2**63]), np.array([0, 2, 0, -1])
    with np.errstate(divide="ignore", over="ignore"):
        q, r = divmod_(a, b)
        assert q.tolist() == (a // b).tolist() and r.tolist() == np.fmod(a, b).tolist()
    with pytest.warns(RuntimeWarning, match="divide by zero encountered in divmod"), \
            np.errstate(over="ignore"):
        divmod_(a, b)
    with pytest.raises(FloatingPointError, match="overflow"), np.errstate(all="raise"):
        divmod_(a[3:], b[3:])
    greater = mlir_ufunc(session=session, source="""
    func.func @gt(%a: f32, %b: f32) -> i1 {
      %r = arith.cmpf ogt, %a, %b : f32
      return %r : i1
    }""")
    values = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(greater(values, np.float32(2)), values > 2)
    cmul = mlir_ufunc(session=session, source="""
    func.func @cmul(%a: complex<f64>, %b: complex<f64>) -> complex<f64> {
      %r = complex.mul %a, %b : complex<f64>
      return %r : complex<f64>
    }""")
    z = np.array([1 + 2j, 3j, -1.5])
    np.testing.assert_array_equal(cmul(z, 1j), z * 1j)
    bump = mlir_ufunc(session=session, source="""
    func.func @bump(%a: index, %b: i1) -> index {
      %c1 = arith.constant 1 : index
      %r = arith.addi %a, %c1 : index
      %s = arith.select %b, %r, %a : index
      return %s : index
    }""")
    flags = np.array([True, False, True])
    np.testing.assert_array_equal(bump(np.arange(3), flags), [1, 1, 3])


def test_refuses_what_is_not_a_scalar_function() -> None:
    session = Session()
    with pytest.raises(SignatureError, match=r"mlir_ufunc 'dot': parameter #0 .*memref"):
        mlir_ufunc(source=DOT, session=session)
    with pytest.raises(SignatureError, match="returns nothing"):
        mlir_ufunc(session=session, source="func.func @f(%a: f64) { return }")
    with pytest.raises(SignatureError, match="2 public functions"):
        mlir_ufunc(session=session, source=ADD + ADD.replace("@add", "@add2"))
    with pytest.raises(SignatureError, match=r"no func\.func @nope"):
        mlir_ufunc(source=ADD, name="nope", session=session)
    with pytest.raises(TypeError, match=r"types=\[\.\.\.\]"):
        mlir_ufunc(source=GENERIC_MUL, session=session)
    with pytest.raises(TypeError, match="has none"):
        mlir_ufunc(source=ADD, types=["f32"], session=session)
    with pytest.raises(ValueError, match="same input types"):
        mlir_ufunc(source=GENERIC_MUL, types=["f32", "f32"], session=session)
    with pytest.raises(MLIRError, match="mlir_ufunc 'mul' bound to !T = i32"):
        mlir_ufunc(source=GENERIC_MUL, types=["i32"], session=session)  # mulf on ints
    with pytest.raises(MLIRError):
        mlir_ufunc(source="func.func @f(%a: f64) -> f64 { oops }", session=session)


def test_a_python_callback_in_the_body_is_refused() -> None:
    session = Session()

    @callback(session=session)
    def twice(x: f64) -> f64:
        return 2 * x

    with pytest.raises(TypeError, match=r"@twice.*without the GIL"):
        mlir_ufunc(session=session, source="""
        func.func @f(%a: f64) -> f64 {
          %r = func.call @twice(%a) : (f64) -> f64
          return %r : f64
        }
        func.func private @twice(f64) -> f64""")


@pytest.mark.parametrize("make", [mlir_ufunc, mlir_gufunc])
def test_a_cf_assert_is_refused_naming_it_not_a_python_callback(make: Any) -> None:
    # It was "calls the Python callback(s) @__pymlirjit_fail".
    options: dict[str, Any] = {"layout": "()->()"} if make is mlir_gufunc else {}
    with pytest.raises(TypeError, match=r"@pos has a check that can fail at run time "
                                        r"\(a cf.assert\).*arith.select") as caught:
        make(session=Session(), **options, source="""
        func.func @pos(%x: f64) -> f64 {
          %z = arith.constant 0.0 : f64
          %ok = arith.cmpf oge, %x, %z : f64
          cf.assert %ok, "x must be >= 0"
          return %x : f64
        }""")
    assert "__pymlirjit" not in str(caught.value)
    assert "Python callback" not in str(caught.value)


def test_the_ufunc_owns_its_code() -> None:
    session = Session()
    add = mlir_ufunc(source=ADD, session=session)
    module = weakref.ref(next(iter(session._cache.values())))
    session.clear_cache()
    gc.collect()
    assert module() is not None  # the ufunc keeps it
    assert add(1.0, 2.0) == 3.0
    del add
    gc.collect()
    assert module() is None  # and nothing else does


def test_threads_share_one_ufunc(add: np.ufunc) -> None:
    a = np.arange(100_000.0)
    errors: list[str] = []

    def work(k: float) -> None:
        for _ in range(20):
            if not np.array_equal(add(a, k), a + k):
                errors.append(f"wrong result for {k}")

    run_in_threads(work, [float(k) for k in range(4)])
    assert not errors


def test_fork_after_creating_a_ufunc() -> None:
    code = f"""
import os, numpy as np
from pymlirjit import mlir_ufunc
add = mlir_ufunc(source={ADD!r})
pid = os.fork()
if pid == 0:
    os._exit(0 if add(np.arange(3.0), 1.0).tolist() == [1.0, 2.0, 3.0] else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), add(2.0, 2.0))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "0", "4.0"], done.stdout + done.stderr


def test_disk_cache(tmp_path: Path) -> None:
    first = mlir_ufunc(source=GENERIC_MUL, types=["f64"], session=Session(cache_dir=tmp_path))
    later = Session(cache_dir=tmp_path)
    again = mlir_ufunc(source=GENERIC_MUL, types=["f64"], session=later)
    assert later.cache_info().disk_hits == 1
    np.testing.assert_array_equal(again(np.arange(3.0), 2.0), first(np.arange(3.0), 2.0))


# -- gufuncs -------------------------------------------------------------------------------

def test_gufunc_dot_over_rows(dot: np.ufunc) -> None:
    assert isinstance(dot, np.ufunc) and dot.signature == "(n),(n)->()"
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(dot(a, np.ones(4)), a.sum(axis=1))
    np.testing.assert_array_equal(dot(a, a), (a * a).sum(axis=1))
    stack = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(dot(stack, stack[0]), (stack * stack[0]).sum(axis=-1))
    assert dot(np.zeros((2, 0)), np.zeros(0)).tolist() == [0.0, 0.0]
    assert dot(np.zeros((0, 4)), np.zeros(4)).shape == (0,)
    out = np.empty(3)
    assert dot(a, a, out=out) is out
    with pytest.raises(ValueError):
        dot(a, np.ones(3))  # core sizes disagree: numpy says so


def test_gufunc_identity_layout_refuses_non_contiguous_cores(dot: np.ufunc) -> None:
    a = np.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError, match=r"mlir_gufunc 'dot': argument 0 .*contiguous"):
        dot(a.T, np.ones(3))
    # Outer dimensions may have any strides.
    np.testing.assert_array_equal(dot(a[::-2], np.ones(4)), a[::-2].sum(axis=1))
    assert dot(np.ascontiguousarray(a.T), np.ones(3)).shape == (4,)


def test_gufunc_strided_memref_takes_any_core_strides() -> None:
    normalize = mlir_gufunc(source=NORMALIZE, layout="(n)->(n)", session=Session())
    a = np.arange(1.0, 13.0).reshape(3, 4)
    np.testing.assert_allclose(normalize(a), a / a.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(normalize(a.T), a.T / a.T.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(normalize(a[:, ::-1]), a[:, ::-1] / a.sum(axis=1, keepdims=True))
    out = np.zeros((3, 3)).T
    normalize(a[:, :3], out=out)
    np.testing.assert_allclose(out, a[:, :3] / a[:, :3].sum(axis=1, keepdims=True))


UNIT_STRIDE_SUM = """
func.func @total(%a: memref<?xf64, strided<[1], offset: ?>>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f64
  %n = memref.dim %a, %c0 : memref<?xf64, strided<[1], offset: ?>>
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64, strided<[1], offset: ?>>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  return %s : f64
}"""


@pytest.mark.parametrize("shape", [(2, 3), (2, 1), (4, 1), (2, 0), (0, 3)])
def test_gufunc_unit_stride_core_takes_empty_and_one_element_cores(
        shape: tuple[int, ...]) -> None:
    # A core dimension of 0 or 1 elements has a stride that means nothing: they were
    # refused ("pass np.ascontiguousarray", which changed nothing).
    total = mlir_gufunc(source=UNIT_STRIDE_SUM, layout="(n)->()", session=Session())
    a = np.arange(float(np.prod(shape))).reshape(shape)
    np.testing.assert_array_equal(total(a), a.sum(axis=1))
    np.testing.assert_array_equal(total(np.ones((3, 4))[:, :1]), np.ones(3))
    with pytest.raises(ValueError, match="core strides"):  # a real stride is checked
        total(np.ones((3, 4))[:, ::2])


def test_gufunc_scalar_inputs_and_generic_types() -> None:
    scale = mlir_gufunc(layout="(n),()->(n)", types=["f32", "f64"], session=Session(),
                        source="""
    func.func @scale(%a: memref<?x!T>, %k: !T, %out: memref<?x!T>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %a, %c0 : memref<?x!T>
      scf.for %i = %c0 to %n step %c1 {
        %x = memref.load %a[%i] : memref<?x!T>
        %y = arith.mulf %x, %k : !T
        memref.store %y, %out[%i] : memref<?x!T>
      }
      return
    }""")
    assert scale.types == ["ff->f", "dd->d"]
    a = np.arange(6.0).reshape(2, 3)
    k = np.array([1.0, 2.0])  # one scalar per row: () broadcasts over the outer dims
    np.testing.assert_array_equal(scale(a, k), a * k[:, None])
    assert scale(a.astype(np.float32), np.float32(2)).dtype == np.float32


def test_gufunc_layout_mismatches_name_the_parameter() -> None:
    session = Session()
    with pytest.raises(SignatureError, match=r"parameter #0 \(a, memref<\?xf64>\) has rank 1; "
                                             r"the layout gives argument 0 .*\(n, m\)"):
        mlir_gufunc(source=DOT, layout="(n,m),(n)->()", session=session)
    with pytest.raises(SignatureError, match=r"3 input\(s\) .* takes 2 parameter"):
        mlir_gufunc(source=DOT, layout="(n),(n),(n)->()", session=session)
    with pytest.raises(SignatureError, match=r"result #0 .*core dimensions \(n\)"):
        mlir_gufunc(source=DOT, layout="(n),(n)->(n)", session=session)
    with pytest.raises(ValueError, match="cannot read layout"):
        mlir_gufunc(source=DOT, layout="(n),n->()", session=session)
    with pytest.raises(ValueError, match="not a name"):
        mlir_gufunc(source=DOT, layout="(3),(3)->()", session=session)


def test_gufunc_static_sizes_are_checked() -> None:
    norm3 = mlir_gufunc(layout="(k)->()", session=Session(), source="""
    func.func @sq3(%a: memref<3xf64>) -> f64 {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0] : memref<3xf64>
      return %x : f64
    }""")
    assert norm3(np.arange(6.0).reshape(2, 3)).tolist() == [0.0, 3.0]
    with pytest.raises(ValueError, match="argument 0"):
        norm3(np.arange(8.0).reshape(2, 4))


def test_identity_is_for_binary_functions_and_checked() -> None:
    session = Session()
    with pytest.raises(ValueError, match="identity= is for binary functions"):
        mlir_ufunc(identity=0, session=session, source="""
            func.func @neg(%a: f64) -> f64 {
              %r = arith.negf %a : f64
              return %r : f64
            }""")
    for wrong in ("zero", object(), [0]):   # not only a string: float() named nothing
        with pytest.raises(ValueError, match="'reorderable' or a number"):
            mlir_ufunc(source=ADD, identity=wrong, session=session)
    assert mlir_ufunc(source=ADD, identity=np.float32(0), session=session).identity == 0
    reorderable = mlir_ufunc(source=ADD, identity="reorderable", session=session)
    assert reorderable.reduce(np.ones((2, 3)), axis=None) == 6.0
    with pytest.raises(ValueError):
        reorderable.reduce(np.array([]))


def test_floating_point_errors_reach_numpy() -> None:
    divide = mlir_ufunc(session=Session(), source="""
    func.func @divide(%a: f64, %b: f64) -> f64 {
      %r = arith.divf %a, %b : f64
      return %r : f64
    }""")
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="divide"):
        divide(np.ones(3), np.zeros(3))
    with np.errstate(divide="ignore"):
        assert divide(1.0, 0.0) == np.inf
