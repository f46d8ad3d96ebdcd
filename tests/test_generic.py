"""Generic kernels (type aliases bound per call) and kernels built with MLIR's Python
bindings: every test compiles for real."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import MLIRError, Session, SignatureError, f32, mlir_kernel
from pymlirjit.generic import free_aliases
from pymlirjit.kernel import BoundKernel, GenericKernel, Kernel
from pymlirjit.vectorcall import has_entry

AXPY = """
func.func @axpy(%a: !T, %x: memref<?x!T>, %y: memref<?x!T>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?x!T>
  scf.for %i = %c0 to %n step %c1 {
    %xi = memref.load %x[%i] : memref<?x!T>
    %yi = memref.load %y[%i] : memref<?x!T>
    %p = arith.mulf %a, %xi : !T
    %s = arith.addf %p, %yi : !T
    memref.store %s, %y[%i] : memref<?x!T>
  }
  return
}
"""

ADD = """
func.func @add(%a: !T, %b: !T) -> !T {
  %r = arith.addf %a, %b : !T
  return %r : !T
}
"""

# Two aliases; one only in a scalar parameter.
SCALE_SUM = """
func.func @scale_sum(%x: memref<?x!E>, %k: !K) -> !E {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?x!E>
  %zero = arith.constant 0.0 : !E
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> !E {
    %v = memref.load %x[%i] : memref<?x!E>
    %t = arith.addf %acc, %v : !E
    scf.yield %t : !E
  }
  %kf = arith.sitofp %k : !K to !E
  %r = arith.mulf %s, %kf : !E
  return %r : !E
}
"""


def axpy_kernel(session: Session) -> Any:
    @mlir_kernel(source=AXPY, session=session)
    def axpy(a: Any, x: np.ndarray, y: np.ndarray) -> None: ...
    return axpy


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_one_source_serves_every_dtype(session: Session, dtype: Any) -> None:
    axpy = axpy_kernel(session)
    assert isinstance(axpy, GenericKernel) and axpy.aliases == ("T",)
    x = np.arange(5, dtype=dtype)
    y = np.ones(5, dtype=dtype)
    axpy(2.0, x, y)
    np.testing.assert_array_equal(y, (2 * np.arange(5) + 1).astype(dtype))
    assert y.dtype == dtype
    assert axpy.signatures == [{"T": np.dtype(dtype).name.replace("float", "f")}]


def test_each_binding_compiles_once_and_dispatch_follows_the_dtype(session: Session) -> None:
    axpy = axpy_kernel(session)
    arrays = {dt: (np.arange(3, dtype=dt), np.zeros(3, dtype=dt)) for dt in (np.float32,
                                                                           np.float64)}
    for _ in range(3):
        for x, y in arrays.values():
            axpy(1.0, x, y)
    assert session.cache_info().misses == 2
    assert axpy.signatures == [{"T": "f32"}, {"T": "f64"}]
    for x, y in arrays.values():
        np.testing.assert_array_equal(y, 3 * x)
    assert has_entry(axpy)  # every alias bound by arrays: a chain of native entries


def test_scalars_bind_weakly_and_numpy_scalars_by_type(session: Session) -> None:
    @mlir_kernel(source=ADD, session=session)
    def add(a: Any, b: Any) -> Any: ...
    assert add(1.5, 2.25) == 3.75
    assert add.signatures == [{"T": "f64"}]
    got = add(np.float32(0.1), np.float32(0.2))
    assert type(got) in (float, np.float32)
    assert got == pytest.approx(float(np.float32(0.1) + np.float32(0.2)), abs=0)
    assert add.signatures == [{"T": "f64"}, {"T": "f32"}]
    assert add(1.5, np.float32(2.0)) == 3.5  # the numpy scalar wins: f32
    assert add.signatures == [{"T": "f64"}, {"T": "f32"}]
    assert has_entry(add)  # scalar-bound too: a chain of native entries


def test_int_binds_i64_and_mulf_on_ints_names_the_binding(session: Session) -> None:
    axpy = axpy_kernel(session)
    with pytest.raises(MLIRError, match=r"(?s)'axpy' bound to !T = i32.*arith\.mulf"):
        axpy(2, np.ones(3, np.int32), np.ones(3, np.int32))
    source = ADD.replace("arith.addf", "arith.addi")

    @mlir_kernel(source=source, session=session)
    def add(a: Any, b: Any) -> Any: ...
    assert add(2**40, 1) == 2**40 + 1
    assert add.signatures == [{"T": "i64"}]


def test_two_aliases_one_bound_by_a_scalar(session: Session) -> None:
    @mlir_kernel(source=SCALE_SUM, session=session)
    def scale_sum(x: np.ndarray, k: Any) -> Any: ...
    assert scale_sum.aliases == ("E", "K")
    assert scale_sum(np.ones(4, np.float32), np.int8(3)) == 12.0
    assert scale_sum(np.ones(4), 2) == 8.0
    assert scale_sum.signatures == [{"E": "f32", "K": "i8"}, {"E": "f64", "K": "i64"}]


def test_binding_errors_name_the_parameter_and_the_alias(session: Session) -> None:
    axpy = axpy_kernel(session)
    with pytest.raises(TypeError, match=r"argument 3 \('y'\) binds !T to f64, but argument "
                                        r"2 \('x'\) binds it to f32"):
        axpy(1.0, np.ones(2, np.float32), np.ones(2))
    with pytest.raises(TypeError, match=r"argument 2 \('x'\) must be a numpy array.*!T.*list"):
        axpy(1.0, [1.0, 2.0], np.ones(2))
    with pytest.raises(TypeError, match=r"argument 1 \('a'\) binds no type to !T.*str"):

        @mlir_kernel(source=ADD, session=session)
        def add(a: Any, b: Any) -> Any: ...
        add("x", "y")
    with pytest.raises(TypeError, match="no argument binds !T"):
        axpy()
    assert axpy.signatures == []


def test_specialize_returns_a_kernel_compiled_eagerly(session: Session) -> None:
    axpy = axpy_kernel(session)
    bound = axpy.specialize(T=f32)
    assert isinstance(bound, BoundKernel) and isinstance(bound, Kernel)
    assert bound is axpy.specialize(T="f32") is axpy.specialize(T=np.float32)
    assert session.cache_info().misses == 0
    function = bound.compile()
    assert session.cache_info().misses == 1
    assert str(function.signature.mlir) == "(f32, memref<?xf32>, memref<?xf32>) -> ()"
    y = np.zeros(2, np.float32)
    bound(3.0, np.ones(2, np.float32), y)
    np.testing.assert_array_equal(y, [3.0, 3.0])
    with pytest.raises(TypeError, match=r"!T is missing"):
        axpy.specialize()
    with pytest.raises(TypeError, match=r"no alias !U"):
        axpy.specialize(T="f32", U="f64")
    with pytest.raises(MLIRError, match=r"bound to !T = i16"):
        axpy.specialize(T="i16").compile()


def test_non_generic_kernels_are_plain_kernels(session: Session) -> None:
    @mlir_kernel(source=ADD.replace("!T", "f64"), session=session)
    def add(a: float, b: float) -> float: ...
    assert type(add).__name__ == "Kernel" and not isinstance(add, GenericKernel)
    assert add.signatures == []
    assert add(1.0, 2.0) == 3.0
    assert add.signatures == [{}]
    assert add.specialize() is add
    with pytest.raises(TypeError, match="not generic"):
        add.specialize(T="f32")


def test_free_aliases_skip_defined_aliases_dialect_types_and_comments() -> None:
    assert free_aliases(AXPY) == ("T",)
    assert free_aliases("!U = f32\nfunc.func @f(%a: !U, %p: !llvm.ptr) // !C\n") == ()
    assert free_aliases('func.func @f(%a: !A) attributes {s = "!B"} : !C') == ("A", "C")


def test_bound_text_keeps_line_numbers(session: Session) -> None:
    bad = AXPY.replace("%p = arith.mulf %a, %xi : !T", "%p = arith.mulf %a, %nope : !T")

    @mlir_kernel(source=bad, session=session)
    def axpy(a: Any, x: np.ndarray, y: np.ndarray) -> None: ...
    with pytest.raises(MLIRError) as info:
        axpy(1.0, np.ones(1), np.ones(1))
    line = bad.splitlines().index(next(s for s in bad.splitlines() if "%nope" in s)) + 1
    assert f":{line}:" in str(info.value)


def test_invalidation_recompiles_bindings(session: Session) -> None:
    axpy = axpy_kernel(session)
    y = np.zeros(2, np.float32)
    axpy(1.0, np.ones(2, np.float32), y)
    session.clear_cache()
    assert not has_entry(axpy)
    axpy(1.0, np.ones(2, np.float32), y)
    np.testing.assert_array_equal(y, [2.0, 2.0])
    assert has_entry(axpy)


def test_generic_kernels_pickle_by_value_and_copy(session: Session) -> None:
    axpy = axpy_kernel(session)
    assert pickle.loads(pickle.dumps(axpy)) is axpy  # interned in the sending process
    bound = axpy.specialize(T="f64")
    assert pickle.loads(pickle.dumps(bound)) is bound
    other = copy.copy(axpy)
    assert isinstance(other, GenericKernel) and other is not axpy
    y = np.zeros(2)
    other(2.0, np.ones(2), y)
    np.testing.assert_array_equal(y, [2.0, 2.0])


def test_generic_kernel_unpickled_in_another_process(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import pickle, sys
        import numpy as np
        from pymlirjit import mlir_kernel
        @mlir_kernel(source={AXPY!r})
        def axpy(a, x, y): ...
        sys.stdout.buffer.write(pickle.dumps(axpy))
    """)
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert made.returncode == 0, made.stderr.decode()
    axpy = pickle.loads(made.stdout)
    assert isinstance(axpy, GenericKernel)
    y = np.zeros(3, np.float32)
    axpy(2.0, np.ones(3, np.float32), y)
    np.testing.assert_array_equal(y, [2.0, 2.0, 2.0])


def test_bindings_hit_the_disk_cache_in_a_new_process(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from pymlirjit import Session, mlir_kernel
        session = Session(cache_dir=sys.argv[1])
        @mlir_kernel(source={AXPY!r}, session=session)
        def axpy(a, x, y): ...
        y = np.zeros(2, np.float32)
        axpy(1.0, np.ones(2, np.float32), y)
        assert list(y) == [1.0, 1.0]
        print(session.cache_info().disk_hits)
    """)
    runs = [subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert [r.stdout.split()[-1] for r in runs] == ["0", "1"]


def test_a_missing_function_is_reported_at_the_call(session: Session) -> None:
    @mlir_kernel(source=AXPY, name="nothere", session=session)
    def f(a: Any) -> None: ...
    with pytest.raises(SignatureError, match=r"no func\.func @nothere"):
        f(1.0)


# Kernels built with MLIR's Python bindings.

def build_fma() -> Any:
    from mlir import ir
    from mlir.dialects import arith, func

    module = ir.Module.create()
    t = ir.F32Type.get()
    with ir.InsertionPoint(module.body):
        @func.FuncOp.from_py_func(t, t, name="fma")
        def fma(a: Any, b: Any) -> Any:
            return arith.addf(arith.mulf(a, b), a)
    return module


def test_source_may_be_a_callable_building_a_module(session: Session) -> None:
    @mlir_kernel(source=build_fma, session=session)
    def fma(a: f32, b: f32) -> f32: ...
    assert fma(2.0, 3.0) == 8.0
    assert "func.func @fma" in fma.mlir


def test_source_may_be_a_module_or_an_operation(session: Session) -> None:
    from mlir import ir

    with ir.Context(), ir.Location.unknown():
        module = build_fma()
        by_module = Kernel(None, module, "fma", session=session)
        by_op = Kernel(None, module.body.operations[0], "fma", session=session)
    assert by_module(2.0, 3.0) == by_op(2.0, 3.0) == 8.0
    assert session.cache_info().misses == 2  # `module {...}` and the bare func differ
    assert session.compile(build_fma).fma(1.0, 1.0) == 2.0
    assert session.cache_info().hits == 1  # the same text as the module's


def test_python_built_kernels_pickle_by_value(session: Session) -> None:
    @mlir_kernel(source=build_fma, session=session)
    def fma(a: f32, b: f32) -> f32: ...
    again = pickle.loads(pickle.dumps(fma))
    assert again is fma or again(2.0, 3.0) == 8.0
    assert fma(1.0, 2.0) == 3.0


def test_a_source_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"mlir\.ir\.Module.*got int"):
        mlir_kernel(source=3)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"the source callable .*returned.*got str"):
        Session().compile(lambda: "func.func @f() { return }")
