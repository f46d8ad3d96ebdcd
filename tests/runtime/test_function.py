"""Compiled functions across threads: the GIL, concurrency, reentrancy, per-thread errors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import MemRef, Session, callback, f64, i8, i64, mlir_kernel
from tests.threads import run_in_threads

SPIN = """
func.func @spin(%n: i64) -> i64 {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %c0) -> i64 : i64 {
    %sq = arith.muli %i, %i : i64
    %x = arith.xori %acc, %sq : i64
    scf.yield %x : i64
  }
  return %r : i64
}
"""


def test_a_kernel_call_releases_the_gil(session: Session) -> None:
    spin = session.compile(SPIN, opt_level=0).spin
    done = threading.Event()
    progress = 0

    def count() -> None:
        nonlocal progress
        while not done.is_set():
            progress += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        before = progress
        spin(300_000_000)
        during = progress - before
    finally:
        done.set()
        counter.join()
    assert during > 1000  # the other thread ran while compiled code did


def test_one_kernel_from_eight_threads(session: Session) -> None:
    module = session.compile("""
    func.func @axpy(%a: f64, %x: memref<?xf64>, %y: memref<?xf64>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %x, %c0 : memref<?xf64>
      scf.for %i = %c0 to %n step %c1 {
        %xi = memref.load %x[%i] : memref<?xf64>
        %yi = memref.load %y[%i] : memref<?xf64>
        %p = arith.mulf %a, %xi : f64
        %s = arith.addf %p, %yi : f64
        memref.store %s, %y[%i] : memref<?xf64>
      }
      return
    }""")

    def work(seed: int) -> None:
        x = np.full(1000, float(seed))
        for _ in range(50):
            y = np.arange(1000.0)
            module.axpy(2.0, x, y)
            np.testing.assert_array_equal(y, 2.0 * seed + np.arange(1000.0))

    run_in_threads(work, range(8))


def test_callback_errors_stay_with_their_thread(session: Session) -> None:
    @callback(session=session)
    def check(x: i64) -> i64:
        if x < 0:
            raise ValueError(f"negative {x}")
        return x

    run = session.compile("""
    func.func @run(%x: i64) -> i64 {
      %r = call @check(%x) : (i64) -> i64
      return %r : i64
    }
    func.func private @check(i64) -> i64
    """).run
    def work(value: int) -> str:
        try:
            for _ in range(200):
                assert run(value) == value
        except ValueError as error:
            return str(error)
        return "ok"

    assert run_in_threads(work, (-1, 1, 2, 3)) == ["negative -1", "ok", "ok", "ok"]


def test_a_callback_may_call_kernels_reentrantly(session: Session) -> None:
    source = """
    func.func @fact(%n: i64) -> i64 {
      %r = call @recurse(%n) : (i64) -> i64
      return %r : i64
    }
    func.func private @recurse(i64) -> i64
    """

    @callback(session=session)
    def recurse(n: i64) -> i64:
        if n == 13:
            raise OverflowError("stop at 13")
        return 1 if n <= 1 else n * session.compile(source).fact(n - 1)

    fact = session.compile(source).fact
    assert fact(10) == 3628800
    with pytest.raises(OverflowError, match="stop at 13"):
        fact(15)
    assert fact(5) == 120  # errors stayed with the call that raised them


TICK_LOOP = """
func.func @loop(%n: i64) {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  scf.for %i = %c0 to %n step %c1 : i64 {
    func.call @tick(%i) : (i64) -> ()
  }
  return
}
func.func private @tick(i64)
"""


def test_keyboard_interrupt_in_a_callback_stops_the_kernel(session: Session) -> None:
    calls = 0

    @callback(session=session)
    def tick(i: i64) -> None:
        nonlocal calls
        calls += 1
        if i == 10:
            raise KeyboardInterrupt

    loop = session.compile(TICK_LOOP).loop
    with pytest.raises(KeyboardInterrupt):
        loop(1_000_000)
    assert calls == 11  # every later callback returned at once


def test_memref_callback_view_shares_memory(session: Session) -> None:
    @callback(session=session)
    def zero_first(a: MemRef[f64, None]) -> f64:
        first = float(a[0])
        a[0] = 0.0
        return first

    module = session.compile("""
    func.func @take(%m: memref<?xf64>) -> f64 {
      %r = call @zero_first(%m) : (memref<?xf64>) -> f64
      return %r : f64
    }
    func.func private @zero_first(memref<?xf64>) -> f64
    """)
    data = np.array([5.0, 6.0])
    assert module.take(data) == 5.0
    assert data.tolist() == [0.0, 6.0]


def test_ctrl_c_during_a_long_loop_with_callbacks() -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        from pymlirjit import Session, callback, i64
        session = Session()

        @callback(session=session)
        def tick(i: i64) -> None:
            pass

        loop = session.compile(sys.argv[1]).loop
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.perf_counter()
        try:
            loop(10**12)
        except KeyboardInterrupt:
            print(f"interrupted after {time.perf_counter() - start:.1f} s")
    """)
    done = subprocess.run([sys.executable, "-c", script, TICK_LOOP], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "interrupted after" in done.stdout


@pytest.mark.parametrize(("mlir_type", "values"), [
    ("i1", [True, False]), ("i8", [-128, 255, 7]), ("i16", [-32768, 65535]),
    ("i32", [-(2**31), 2**32 - 1]), ("i64", [-(2**63), 2**63 - 1]), ("index", [0, 2**40]),
    ("f32", [0.1, -1e30, float("inf")]), ("f64", [1e-300, float("-inf")]),
])
def test_native_and_python_paths_agree(session: Session, mlir_type: str,
                                       values: list[object]) -> None:
    function = session.compile(f"""
    func.func @same(%a: {mlir_type}) -> {mlir_type} {{
      return %a : {mlir_type}
    }}""").same
    assert function.ensure_native()
    native = function  # calls now go straight to the native entry
    for value in values:
        assert native(value) == function.call_python(value)
        assert type(native(value)) is type(function.call_python(value))
    for bad in ("text", None, [1]):
        with pytest.raises(TypeError) as from_python:
            function.call_python(bad)
        with pytest.raises(TypeError) as from_native:
            native(bad)
        assert str(from_native.value) == str(from_python.value)


def test_native_array_path_matches_python_path(session: Session) -> None:
    function = session.compile("""
    func.func @first(%a: memref<?x3xf64>) -> f64 {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0, %c0] : memref<?x3xf64>
      return %x : f64
    }""").first
    assert function.ensure_native()
    native = function  # calls now go straight to the native entry
    data = np.arange(6.0).reshape(2, 3)
    assert native(data) == function.call_python(data) == 0.0
    for bad in (data.T, data.astype(np.float32), np.zeros((2, 4)), data[:, :1]):
        with pytest.raises((TypeError, ValueError)) as from_python:
            function.call_python(bad)
        with pytest.raises((TypeError, ValueError)) as from_native:
            native(bad)
        assert str(from_native.value) == str(from_python.value)


WARM_START = r"""
import sys
import numpy as np
from pymlirjit import MemRef, Session, callback, f64

session = Session(cache_dir=sys.argv[1])
ERROR = ValueError("from fail")
later_calls = []

@callback(session=session)
def fail(x: f64) -> None:
    raise ERROR

@callback(session=session)
def later(x: f64) -> None:
    later_calls.append(x)

module = session.compile('''
func.func @run(%x: f64, %out: memref<1xf64>) {
  call @fail(%x) : (f64) -> ()
  %c0 = arith.constant 0 : index
  memref.store %x, %out[%c0] : memref<1xf64>
  call @later(%x) : (f64) -> ()
  return
}
func.func @pair(%x: f64, %n: i32) -> (i32, f64) {
  call @later(%x) : (f64) -> ()
  return %n, %x : i32, f64
}
func.func private @fail(f64)
func.func private @later(f64)
''')
assert module.pair.ensure_native() and module.pair(np.float64(0.5), 3) == (3, 0.5)
later_calls.clear()
out = np.zeros(1)
class Real(float):  # not exactly a float: the native entry hands it to the Python path
    pass
for call, x in ((module.run.call_python, np.float64(2.0)), (module.run, Real(3.0)),
                (module.run, np.float64(4.0))):
    try:
        call(x, out)
    except ValueError as exc:
        assert exc is ERROR, exc
    else:
        raise AssertionError("no exception")
print(type(module.engine).__name__, session.disk_cache.hits, out[0], len(later_calls),
      "llvm" if "llvmlite.binding" in sys.modules else "no-llvm")
"""


def test_a_warm_started_python_path_stops_at_a_failing_callback(tmp_path: Path) -> None:
    import subprocess
    import sys

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", WARM_START, str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return done.stdout.split()

    # The kernel stops at the failing callback (its store and later callback never run)
    # in the shared library the first process links (and then loads) and in the one a
    # new process loads: it brings its guards along, so loading still needs no LLVM.
    assert run()[:-1] == ["SharedLibrary", "0", "0.0", "0"]
    assert run() == ["SharedLibrary", "1", "0.0", "0", "no-llvm"]


def python_path_calls(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result (or exception), and how many calls the Python path (this
    package's function.py and pythoncall.py) took during it."""
    import sys

    import pymlirjit.runtime.function
    import pymlirjit.runtime.pythoncall

    seen = 0
    files = {pymlirjit.runtime.function.__file__, pymlirjit.runtime.pythoncall.__file__}

    def profile(frame: Any, event: str, arg: object) -> None:
        nonlocal seen
        if event == "call" and frame.f_code.co_filename in files:
            seen += 1

    sys.setprofile(profile)
    try:
        result: object = call()
    except Exception as exc:
        result = (type(exc), str(exc))
    finally:
        sys.setprofile(None)
    return result, seen


NUMPY_INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                  np.uint64]


def numpy_scalars() -> list[object]:
    values: list[object] = [np.float64(1.5), np.float64(-2.0**70), np.float32(-2.5),
                            np.float32(np.inf), np.float16(0.5), np.longlong(3), np.True_,
                            np.False_, np.complex128(1j)]
    for t in NUMPY_INTEGERS:
        info = np.iinfo(t)
        values += [t(info.min), t(info.max), t(0), t(1), t(info.max // 3 + 1)]
    return values


@pytest.mark.parametrize("mlir_type", ["i1", "i8", "i16", "i32", "i64", "index", "f32",
                                       "f64"])
def test_numpy_scalars_take_the_native_path(session: Session, mlir_type: str) -> None:
    function = session.compile(f"""
    func.func @same(%a: {mlir_type}) -> {mlir_type} {{
      return %a : {mlir_type}
    }}""").same
    assert function.ensure_native()
    for value in numpy_scalars():
        expected, _ = python_path_calls(lambda: function.call_python(value))  # noqa: B023
        result, python_calls = python_path_calls(lambda: function(value))  # noqa: B023
        assert result == expected and type(result) is type(expected), value
        # The types the Python path converts exactly as an entry does never reach it,
        # when the value is one the Python path accepts; the rest (np.float16, np.longlong,
        # out-of-range and wrong values) are handed to it, which raises the same error.
        native = (type(value) in (np.float64, np.float32, *NUMPY_INTEGERS)
                  if mlir_type.startswith("f") else
                  type(value) is np.bool_ if mlir_type == "i1" else
                  type(value) in NUMPY_INTEGERS)
        if native and not isinstance(expected, tuple):
            assert python_calls == 0, (value, mlir_type)
        else:
            assert python_calls > 0, (value, mlir_type)


def test_a_failing_callback_stops_a_call_with_numpy_scalars(session: Session) -> None:
    error = ValueError("stop")
    later_calls: list[float] = []

    @callback(session=session)
    def stop(x: f64) -> None:
        raise error

    @callback(session=session)
    def later(x: f64) -> None:
        later_calls.append(x)

    run = session.compile("""
    func.func @run(%x: f64, %n: i32, %out: memref<1xf64>) {
      call @stop(%x) : (f64) -> ()
      %c0 = arith.constant 0 : index
      memref.store %x, %out[%c0] : memref<1xf64>
      call @later(%x) : (f64) -> ()
      return
    }
    func.func private @stop(f64)
    func.func private @later(f64)
    """).run
    assert run.ensure_native()
    out = np.zeros(1)
    for x, n in ((np.float64(2.0), np.int32(3)), (np.float32(2.0), np.uint8(3)),
                 (np.int64(2), np.int16(-3))):
        (kind, message), python_calls = python_path_calls(lambda: run(x, n, out))  # noqa: B023
        assert (kind, message, python_calls) == (ValueError, "stop", 0)
    with pytest.raises(ValueError) as raised:
        run(np.float64(1.0), np.int64(1), out)
    assert raised.value is error
    assert out[0] == 0.0 and later_calls == []
    for bad in (np.bool_(True), np.complex64(1), "1.0"):
        expected = python_path_calls(lambda: run.call_python(bad, 1, out))[0]  # noqa: B023
        assert python_path_calls(lambda: run(bad, 1, out))[0] == expected  # noqa: B023
        assert expected[0] is TypeError  # type: ignore[index]
    too_big = python_path_calls(lambda: run(1.0, np.uint64(2**63), out))[0]
    assert too_big == (ValueError, "run() argument 2: 9223372036854775808 is out of "
                                    "range for i32")


TUPLE = """
func.func @split(%a: f64, %b: i32) -> (f64, i32, i1, f32, i8) {
  %r = call @check(%a) : (f64) -> f64
  %t = arith.cmpf ogt, %r, %a : f64
  %f = arith.truncf %r : f64 to f32
  %c = arith.trunci %b : i32 to i8
  return %r, %b, %t, %f, %c : f64, i32, i1, f32, i8
}
func.func private @check(f64) -> f64
"""


def test_tuple_results_take_the_native_path(session: Session) -> None:
    @callback(session=session)
    def check(x: f64) -> f64:
        if x < 0:
            raise ArithmeticError(f"negative: {x}")
        return x + 1

    split = session.compile(TUPLE).split
    assert split.ensure_native()
    for args in ((1.5, -7), (np.float64(2.0), np.int32(300)), (0.0, 2**31 - 1)):
        expected = split.call_python(*args)
        result, python_calls = python_path_calls(lambda: split(*args))  # noqa: B023
        assert result == expected and python_calls == 0
        assert [type(v) for v in result] == [float, int, bool, float, int]  # type: ignore[attr-defined]
    assert split(1.5, 2) == (2.5, 2, True, 2.5, 2)
    # A failing callback: the call raises its exception, whatever the path.
    for call in (split, split.call_python):
        with pytest.raises(ArithmeticError, match=r"negative: -1\.0"):
            call(-1.0, 2)
    # Wrong arguments: the native entry hands them over, the Python path raises.
    for bad in (("x", 1), (1.0, 2**32), (1.0,), (1.0, 2.0)):
        expected_error = python_path_calls(lambda: split.call_python(*bad))[0]  # noqa: B023
        assert python_path_calls(lambda: split(*bad))[0] == expected_error  # noqa: B023
        assert expected_error[0] in (TypeError, ValueError)  # type: ignore[index]


def positional_calls(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result (or exception), and how many times the Python path converted
    positional arguments itself (``call_positional``)."""
    import sys

    seen = 0

    def profile(frame: Any, event: str, arg: object) -> None:
        nonlocal seen
        seen += event == "call" and frame.f_code.co_name == "call_positional"

    sys.setprofile(profile)
    try:
        result: object = call()
    except Exception as exc:  # compared, as a value
        result = (type(exc), str(exc))
    finally:
        sys.setprofile(None)
    return result, seen


def test_keyword_calls_are_bound_then_take_the_native_entry(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @scale(%x: f64, %k: i64) -> f64 {
      %kf = arith.sitofp %k : i64 to f64
      %r = arith.mulf %x, %kf : f64
      return %r : f64
    }""", session=session)
    def scale(x: float, k: int) -> float: ...

    assert scale(1.5, 2) == 3.0  # the entry exists from here on
    assert positional_calls(lambda: scale(1.5, k=4)) == (6.0, 0)
    assert positional_calls(lambda: scale(k=np.int32(3), x=np.float64(0.5))) == (1.5, 0)
    # What the entry does not take still goes to the Python path, which says why.
    result, converted = positional_calls(lambda: scale(x=1.5, k=[2]))
    assert converted == 1 and result[0] is TypeError and "argument 2 ('k')" in result[1]
    result, converted = positional_calls(lambda: scale(1.5, k=2**70))
    assert converted == 1 and result == (ValueError, "scale() argument 2 ('k'): "
                                         "1180591620717411303424 is out of range for i64")
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        scale(1.5, z=2)


def test_a_keyword_call_that_recompiles_its_kernel_finishes(session: Session) -> None:
    @callback(session=session)
    def clear(x: f64) -> f64:
        session.clear_cache()  # the kernel's function retires during this call
        return x

    @mlir_kernel(source="""
    func.func @twice(%x: f64) -> f64 {
      %y = call @clear(%x) : (f64) -> f64
      %r = arith.addf %y, %y : f64
      return %r : f64
    }
    func.func private @clear(f64) -> f64""", session=session)
    def twice(x: float) -> float: ...

    for value in range(5):
        assert twice(x=float(value)) == 2.0 * value


INCREMENT_I8 = """
func.func @inc(%a: memref<?xi8>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i8
  %n = memref.dim %a, %c0 : memref<?xi8>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xi8>
    %y = arith.addi %x, %one : i8
    memref.store %y, %a[%i] : memref<?xi8>
  }
  return
}
func.func @same(%a: tensor<?xi32>) -> tensor<?xi32> {
  return %a : tensor<?xi32>
}
func.func @unranked(%a: memref<*xi16>) {
  return
}
"""


def test_unsigned_arrays_pass_for_signless_integers_without_a_copy() -> None:
    # MLIR integers are signless: a uint8 array holds i8 bits as they are.
    module = Session().compile(INCREMENT_I8)
    a = np.array([1, 254, 255], np.uint8)
    module.inc(a)
    assert a.tolist() == [2, 255, 0]  # written in place: no copy was made
    assert module.same(np.array([2**32 - 1], np.uint32)).tolist() == [-1]
    module.unranked(np.zeros((2, 2), np.uint16))
    for wrong in (np.zeros(2, np.uint16), np.zeros(2, np.int16), np.zeros(2, np.bool_)):
        with pytest.raises(TypeError, match="expected a int8 array"):
            module.inc(wrong)


def test_a_callback_may_return_an_unsigned_array_for_signless_integers() -> None:
    session = Session()

    @callback(session=session)
    def make(n: i8) -> MemRef[i8, None]:
        return np.full(3, 200, np.uint8)

    module = session.compile("""
    func.func @first() -> i8 {
      %n = arith.constant 1 : i8
      %r = call @make(%n) : (i8) -> memref<?xi8>
      %c0 = arith.constant 0 : index
      %x = memref.load %r[%c0] : memref<?xi8>
      memref.dealloc %r : memref<?xi8>
      return %x : i8
    }
    func.func private @make(i8) -> memref<?xi8>
    """)
    assert module.first() == 200 - 256


READS_AND_WRITES = """
func.func @total(%a: memref<?xf64>, %out: memref<1xf64>, %b: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %view = memref.subview %b[1] [1] [1] : memref<?xf64> to memref<1xf64, strided<[1], offset: 1>>
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  memref.copy %a, %b : memref<?xf64> to memref<?xf64>
  memref.store %s, %out[%c0] : memref<1xf64>
  memref.store %s, %view[%c0] : memref<1xf64, strided<[1], offset: 1>>
  return %s : f64
}
func.func @passes_on(%a: memref<?xf64>) -> f64 {
  %z = arith.constant 0.0 : f64
  call @writes(%a) : (memref<?xf64>) -> ()
  return %z : f64
}
func.func private @writes(%a: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f64
  memref.store %z, %a[%c0] : memref<?xf64>
  return
}
"""


def test_read_only_arrays_pass_for_memrefs_the_function_never_writes() -> None:
    module = Session().compile(READS_AND_WRITES)
    a = np.arange(4.0)
    a.flags.writeable = False  # read only: the kernel only loads it and copies from it
    out, b = np.zeros(1), np.zeros(4)
    assert module.total(a, out, b) == 6.0 and out[0] == 6.0 and b.tolist() == [0, 6, 2, 3]
    broadcast = np.broadcast_to(np.ones(1), (3,))  # read-only, but not C-contiguous
    frozen_out, frozen_b = np.zeros(1), np.zeros(4)
    frozen_out.flags.writeable = frozen_b.flags.writeable = False
    with pytest.raises(ValueError, match=r"argument 2: .*read-only.*may write"):
        module.total(a, frozen_out, b)
    with pytest.raises(ValueError, match=r"argument 3: .*read-only.*may write"):
        module.total(a, out, frozen_b)  # written through a view and as a copy's target
    with pytest.raises(ValueError, match="read-only"):
        module.passes_on(a)  # passed to a call: counted as a write
    with pytest.raises(ValueError, match="C-contiguous"):
        module.total(broadcast, out, b)
    assert module.total.signature.params[0].read_only
    assert not module.total.signature.params[2].read_only
