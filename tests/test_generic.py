"""Generic kernels (type aliases bound per call) and kernels built with MLIR's Python
bindings: every test compiles for real."""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymlirjit import MLIRError, Session, SignatureError, f32, mlir_kernel
from pymlirjit.boundary.vectorcall import NativeCallable, has_entry, set_entry
from pymlirjit.generic import free_aliases
from pymlirjit.kernel import BoundKernel, GenericKernel, Kernel

# Hypothesis imports libcst to write its failing-example patch after a failure; libcst
# warns at import, and pyproject turns warnings into errors (see test_memref.py).
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore", DeprecationWarning)
    import hypothesis.extra._patching  # noqa: F401

EXAMPLES = 2000 if os.environ.get("PYMLIRJIT_FUZZ") == "long" else 100

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
    assert not has_entry(add)  # scalar-bound: Python dispatch until hot (native_after)


def test_int_binds_i64_and_mulf_on_ints_names_the_binding(session: Session) -> None:
    axpy = axpy_kernel(session)
    with pytest.raises(MLIRError, match=r"(?s)'axpy' bound to !T = i32.*arith\.mulf"):
        axpy(2, np.ones(3, np.int32), np.ones(3, np.int32))
    source = ADD.replace("arith.addf", "arith.addi")

    @mlir_kernel(source=source, session=session)
    def add(a: Any, b: Any) -> Any: ...
    assert add(2**40, 1) == 2**40 + 1
    assert add.signatures == [{"T": "i64"}]


def test_a_call_whose_binding_does_not_compile_leaves_the_kernel_usable(
        session: Session) -> None:
    axpy = axpy_kernel(session)
    y = np.ones(2)
    axpy(2.0, np.ones(2), y)
    with pytest.raises(MLIRError, match=r"bound to !T = i64"):
        axpy(2, np.ones(2, np.int64), np.ones(2, np.int64))
    assert axpy.signatures == [{"T": "f64"}]
    # The failed binding is not kept: compile() and the address were raising for it.
    assert axpy.compile().signature.mlir == "(f64, memref<?xf64>, memref<?xf64>) -> ()"
    assert axpy.address == axpy.compile().address
    axpy(2.0, np.ones(2), y)
    assert y.tolist() == [5.0, 5.0]


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


@pytest.mark.parametrize(("value", "reason"), [
    ("notatype", "expected non-function type"),
    ("f32, f64", "found trailing characters"),
    ("!nodialect.t", "unregistered dialect"),
    ("", "the string is empty"),  # MLIR's parser would abort the process on it
    (object(), "is not a type pymlirjit knows"),
])
def test_specialize_refuses_what_is_not_a_type_at_once(session: Session, value: Any,
                                                       reason: str) -> None:
    axpy = axpy_kernel(session)
    with pytest.raises(TypeError) as caught:
        axpy.specialize(T=value)
    assert f"specialize(T={value!r})" in str(caught.value)
    assert reason in str(caught.value)
    assert axpy.signatures == []


def test_specialize_binds_a_type_string_as_mlir_prints_it(session: Session) -> None:
    """A comment or spaces in the string cannot reach the source the binding is put
    in front of, and the same type spelled two ways is one binding."""
    axpy = axpy_kernel(session)
    bound = axpy.specialize(T="f32 // a comment")
    assert bound is axpy.specialize(T=" f32") is axpy.specialize(T=np.float32)
    assert bound.binding == {"T": "f32"}
    y = np.zeros(2, np.float32)
    bound(2.0, np.ones(2, np.float32), y)
    np.testing.assert_array_equal(y, [2.0, 2.0])


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


# Native dispatch where scalars bind an alias.

PICK = """
func.func @pick(%a: !T, %b: !T, %c: !T) -> !T {
  return %a : !T
}
"""


class Int(int):
    pass


class Real(float):
    pass


# One value of every kind of scalar a call may pass (and a str, which binds nothing).
SAMPLES = [True, 1, 1.5, 1 + 0j, np.bool_(True), np.int8(1), np.int16(1), np.int32(1),
           np.int64(1), np.uint8(1), np.uint64(1), np.longlong(1), np.float16(1.5),
           np.float32(1.5), np.float64(1.5), np.complex128(1), Int(1), Real(1.5), "x"]
NUMPY_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64)
# The bindings of PICK a native entry serves, and the argument types it unboxes there
# (for values such as SAMPLES': in range, exact).
UNBOXED: dict[str, set[type]] = {
    "i1": {bool, np.bool_},
    **{f"i{bits}": {int, *NUMPY_INTS} for bits in (8, 16, 32, 64)},
    **{f"f{bits}": {float, int, np.float32, np.float64, *NUMPY_INTS} for bits in (32, 64)},
}


def pick_kernel(session: Session) -> Any:
    @mlir_kernel(source=PICK, session=session)
    def pick(a: Any, b: Any, c: Any) -> Any: ...
    return pick


class Probe(NativeCallable):
    """An object called through one native entry alone (see probe())."""


HANDED = object()


def handed(*args: Any) -> Any:
    """What a probe's entry hands the calls it does not take."""
    return HANDED


def probe(generic: Any, binding: str) -> Probe:
    """An object calling the native entry of ``generic``'s binding ``T = binding`` alone:
    a call that entry does not take returns HANDED."""
    function = generic.specialize(T=binding).compile()
    entry = {id(f): e for f, e in generic._entries()}[id(function)]
    obj = Probe()
    set_entry(obj, entry, handed, function._python_call.in_flight)
    return obj


def python_frames(call: Callable[[], Any]) -> list[str]:
    """The Python functions that run during ``call()`` (but ``call`` itself)."""
    seen: list[str] = []
    sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code.co_name)
                   if event == "call" else None)
    try:
        call()
    finally:
        sys.setprofile(None)
    return [name for name in seen if name != "<lambda>"]


def test_each_entry_takes_exactly_the_calls_bind_gives_its_binding(session: Session) -> None:
    """Every combination of argument types: the entry of a binding takes a call if and
    only if bind() gives that binding (and the entry unboxes those types there)."""
    pick = pick_kernel(session)
    for binding in UNBOXED:
        pick.specialize(T=binding)
    pick.compile()
    probes = {binding: probe(pick, binding) for binding in UNBOXED}
    taken_somewhere = 0
    for args in itertools.product(SAMPLES, repeat=3):
        try:
            bound = pick.bind(args, {})["T"]
        except TypeError:
            bound = None
        for binding, obj in probes.items():
            taken = obj(*args) is not HANDED
            unboxed = all(type(a) in UNBOXED[binding] for a in args)
            assert taken == (bound == binding and unboxed), (binding, args, bound)
            taken_somewhere += taken
    assert taken_somewhere > 0  # the test sees calls taken, not only calls handed on


def int_values(kind: Any) -> st.SearchStrategy[Any]:
    info = np.iinfo(kind)
    return st.integers(int(info.min), int(info.max)).map(kind)


ARGUMENTS = st.one_of(
    st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.complex_numbers(),
    st.booleans().map(np.bool_), *(int_values(t) for t in NUMPY_INTS),
    st.integers(-2**63, 2**63 - 1).map(np.longlong), st.floats(width=16).map(np.float16),
    st.floats(width=32).map(np.float32), st.floats().map(np.float64),
    st.complex_numbers().map(np.complex128), st.integers(-10, 10).map(Int),
    st.floats().map(Real), st.text(max_size=2))


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What ``call()`` gives, comparable: type and value (NaN equal to NaN), or the
    exception's type and message."""
    try:
        value = call()
    except Exception as exc:  # compared with what the Python path raises
        return "raises", type(exc), str(exc)
    if isinstance(value, (float, complex)) and value != value:
        return "nan", type(value), repr(value)
    return "returns", type(value), value


@functools.cache
def hot_pick() -> Any:
    """PICK with every binding UNBOXED names compiled and dispatched natively."""
    pick = pick_kernel(Session())
    for binding in UNBOXED:
        pick.specialize(T=binding)
    pick.compile()
    return pick


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.tuples(ARGUMENTS, ARGUMENTS, ARGUMENTS))
def test_native_dispatch_agrees_with_python_dispatch(args: tuple[Any, ...]) -> None:
    """Random arguments: a call of the natively dispatched kernel gives what the Python
    path of the binding bind() chooses gives (or raises as bind() does)."""
    pick = hot_pick()
    try:
        binding = pick.bind(args, {})
    except TypeError as exc:
        expected: tuple[Any, ...] = ("raises", TypeError, str(exc))
    else:
        function = pick.specialize(**binding).compile()
        expected = outcome(lambda: function.call_python(*args))
    assert outcome(lambda: pick(*args)) == expected


def test_hot_scalar_bound_calls_run_no_python(session: Session) -> None:
    @mlir_kernel(source=ADD, session=session)
    def add(a: Any, b: Any) -> Any: ...
    add.native_after = 3
    for _ in range(2):
        assert add(1.5, 2.25) == 3.75
    assert not has_entry(add)  # cold: Python dispatch (no code generated for it)
    assert add(np.float32(0.5), 1.0) == 1.5  # the third call: hot
    assert has_entry(add)
    for args, expected in (((1.5, 2.25), 3.75), ((np.float32(0.5), 1.0), 1.5),
                           ((1.5, np.float64(1.0)), 2.5)):
        got: list[Any] = []
        assert python_frames(lambda args=args, got=got: got.append(add(*args))) == [], args
        assert math.isclose(got[0], expected)
    assert add.signatures == [{"T": "f64"}, {"T": "f32"}]
    assert "dispatch" in python_frames(lambda: add(Real(1.5), 1.0))  # handed on to Python


def test_compile_dispatches_scalar_bindings_natively_at_once(session: Session) -> None:
    pick = pick_kernel(session)
    pick.specialize(T="i8")
    pick.compile()
    assert has_entry(pick)
    assert python_frames(lambda: pick(np.int8(-3), 1, 2)) == []
    assert pick(np.int8(-3), 1, 2) == -3
    with pytest.raises(TypeError, match=r"argument 2 \('b'\) binds !T to i16, but argument "
                                        r"1 \('a'\) binds it to i8"):
        pick(np.int8(-3), np.int16(1), 2)


def test_a_scalar_beside_an_array_binds_nothing(session: Session) -> None:
    """The array decides; the scalar converts, natively or not (np.uint8 binds no type
    on its own)."""
    axpy = axpy_kernel(session)
    for _ in range(2):  # the first call through Python dispatch, the second natively
        y = np.zeros(2, np.float32)
        axpy(np.uint8(3), np.ones(2, np.float32), y)
        np.testing.assert_array_equal(y, [3.0, 3.0])
    assert has_entry(axpy)
    with pytest.raises(TypeError, match=r"argument 1 \('a'\) binds no type to !T.*uint8"):
        pick_kernel(session)(np.uint8(3), 1, 2)


def test_mixed_aliases_dispatch_natively(session: Session) -> None:
    """!E bound by an array, !K by a scalar alone: one entry per binding of both."""
    @mlir_kernel(source=SCALE_SUM, session=session)
    def scale_sum(x: np.ndarray, k: Any) -> Any: ...
    scale_sum.native_after = 1
    x32, x64 = np.ones(4, np.float32), np.ones(4)
    calls = [((x32, np.int8(3)), 12.0), ((x64, 2), 8.0), ((x32, 2), 8.0),
             ((x64, np.int8(-1)), -4.0)]
    for args, expected in calls:
        assert scale_sum(*args) == expected
    assert has_entry(scale_sum) and len(scale_sum.signatures) == 4
    for args, expected in calls:
        got: list[Any] = []
        assert python_frames(lambda args=args, got=got: got.append(scale_sum(*args))) == [], args
        assert got == [expected]


HOSTILE = """
import gc, sys, threading
import numpy as np
from pymlirjit import Session, callback, i64, mlir_kernel
from pymlirjit.boundary.vectorcall import has_entry

session = Session()
done = []

@callback(session=session)
def hook(n: i64) -> i64:
    if n == 2:
        session.clear_cache()               # from the callback, during the call
        gc.collect()
        done.append(kernel(1.5, 0))         # compiles (and chains) again
    if n == 3:
        kernel.invalidate()
        gc.collect()
        done.append(kernel(np.float32(2.5), 0))
    if n == 4:
        def other():
            session.clear_cache()
            gc.collect()
            done.append(kernel(np.float32(0.25), 0))
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()                       # from another thread, during the call
    gc.collect()
    return n

@mlir_kernel(source='''
func.func @kernel(%x: !T, %n: i64) -> !T {
  %m = func.call @hook(%n) : (i64) -> i64
  return %x : !T
}
func.func private @hook(i64) -> i64
''', session=session)
def kernel(x, n): ...

kernel.native_after = 1
results = [kernel(4.0, 1), kernel(np.float32(0.5), 1)]
assert has_entry(kernel)
for round in range(2):
    results += [kernel(2.0, 2), kernel(np.float32(3.0), 3), kernel(6.0, 4),
                kernel(np.float32(7.0), 4)]
    assert has_entry(kernel)
session.clear_cache()
gc.collect()
print(results, done, len(kernel._exact), kernel._retired)
"""


def test_recompiling_the_scalar_chain_during_its_calls() -> None:
    """Clear the cache, invalidate and recompile during a call served by an entry that
    tests scalar types, from a callback and from another thread: the code each call
    runs in stays alive, and every call gives its binding's result."""
    done = subprocess.run([sys.executable, "-c", HOSTILE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stderr == ""
    rounds = [2.0, 3.0, 6.0, 7.0] * 2
    assert done.stdout.split("\n")[0] == f"{[4.0, 0.5, *rounds]} {[1.5, 2.5, 0.25, 0.25] * 2} 0 []"


def test_casts_between_types_the_binding_makes_equal_are_identities() -> None:
    # Bound to f64, `arith.extf %x : !T to f64` would be invalid MLIR (extf must widen).
    @mlir_kernel(source="""
    func.func @widened(%a: memref<?x!T>, %k: !I) -> f64 {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0] : memref<?x!T>
      %y = arith.extf %x : !T to f64
      %z = arith.truncf %y : f64 to !T
      %w = arith.extf %z : !T to f64
      %n = arith.extsi %k : !I to i64
      %f = arith.sitofp %n : i64 to f64
      %r = arith.addf %w, %f : f64
      return %r : f64
    }""", session=Session())
    def widened(a: np.ndarray, k: int) -> float: ...

    assert widened(np.array([1.5]), np.int64(2)) == 3.5  # !T = f64, !I = i64: identities
    assert widened(np.array([1.5], np.float32), np.int32(2)) == 3.5  # real casts
    assert {"T": "f64", "I": "i64"} in widened.signatures


def test_identity_casts_on_tensors() -> None:
    @mlir_kernel(source="""
    func.func @widened(%a: tensor<?x!T>) -> tensor<?xf64> {
      %y = arith.extf %a : tensor<?x!T> to tensor<?xf64>
      return %y : tensor<?xf64>
    }""", session=Session())
    def widened(a: np.ndarray) -> np.ndarray: ...

    assert widened(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
    assert widened(np.arange(3, dtype=np.float16)).tolist() == [0.0, 1.0, 2.0]


def test_a_bindings_mlir_errors_and_failures_name_the_python_line() -> None:
    @mlir_kernel(source="""
    func.func @bad(%a: memref<?x!T>) -> !T {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0] : memref<?x!T>
      %y = arith.addf %x, %c0 : !T
      return %y : !T
    }""", session=Session())
    def bad(a: np.ndarray) -> float: ...

    line = bad.__wrapped__.__code__.co_firstlineno + 4  # the arith.addf line
    with pytest.raises(MLIRError, match=rf"^@mlir_kernel 'bad' bound to !T = f64 "
                                        rf"\(\S*test_generic\.py:{line}:\d+\): use of value"):
        bad(np.ones(2))

    @mlir_kernel(source="""
    func.func @ratio(%a: !T, %b: !T) -> !T {
      %r = arith.divsi %a, %b : !T
      return %r : !T
    }""", session=Session())
    def ratio(a: int, b: int) -> int: ...

    line = ratio.__wrapped__.__code__.co_firstlineno + 2
    with pytest.raises(ZeroDivisionError, match=rf"test_generic\.py:{line}\)"):
        ratio(np.int32(1), np.int32(0))
