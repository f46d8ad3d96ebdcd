"""Objects called straight through a native entry (CPython's vectorcall protocol)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from pymlirjit import Session, callback, f64, i64, mlir_kernel
from pymlirjit.boundary.vectorcall import NativeCallable, clear_entry, fast_type


class Plain(NativeCallable):
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self, *args: Any) -> tuple[str, tuple[Any, ...]]:
        return "python", args


def test_instances_behave_as_their_class_until_an_entry_is_set() -> None:
    obj = Plain(3)
    assert isinstance(obj, Plain) and type(obj) is fast_type(Plain)
    assert type(obj).__name__ == "Plain" and type(obj).__doc__ == Plain.__doc__
    assert obj.value == 3 and obj(1, 2) == ("python", (1, 2))
    clear_entry(obj)  # no entry: nothing changes
    assert obj(5) == ("python", (5,))
    assert fast_type(type(obj)) is type(obj)


def test_classes_that_change_the_layout_are_refused() -> None:
    class Slotted(NativeCallable):
        __slots__ = ("x",)

    with pytest.raises(TypeError, match="instance layout"):
        Slotted()


COUNTDOWN = """
func.func @countdown(%n: i64) -> i64 {
  %r = func.call @visit(%n) : (i64) -> i64
  return %r : i64
}
func.func private @visit(i64) -> i64
"""


def test_calls_in_flight_count_nested_calls() -> None:
    session = Session()
    seen: list[int] = []

    @callback(session=session)
    def visit(n: i64) -> i64:
        seen.append(countdown.compile().calls_in_flight)
        return countdown(n - 1) + 1 if n > 0 else 0

    @mlir_kernel(source=COUNTDOWN, session=session)
    def countdown(n: i64) -> i64: ...

    assert countdown(0) == 0  # the first call compiles (through __call__)
    seen.clear()
    assert countdown(3) == 3
    assert seen == [1, 2, 3, 4]
    assert countdown.compile().calls_in_flight == 0


def test_code_outlives_a_recompile_during_its_own_call() -> None:
    """A callback clears the cache and calls the kernel again (compiling it anew) while
    the first call still runs in the old code: that code must stay alive."""
    session = Session()
    retired: list[int] = []

    @callback(session=session)
    def visit(n: i64) -> i64:
        if n > 0:
            session.clear_cache()  # forget(): the kernel's entry and function are dropped
            gc.collect()
            retired.append(len(countdown._retired))
            return countdown(n - 1) + 1
        return 0

    @mlir_kernel(source=COUNTDOWN, session=session)
    def countdown(n: i64) -> i64: ...

    countdown(0)
    for _ in range(3):
        retired.clear()
        assert countdown(4) == 4
        assert retired == [1, 2, 3, 4]  # kept: calls through each were still running
    assert countdown.compile().calls_in_flight == 0
    session.clear_cache()  # no call running: everything retired is let go
    assert countdown._retired == []
    assert countdown(0) == 0


def test_a_kernel_forgets_and_recompiles_through_its_python_call() -> None:
    session = Session()

    @mlir_kernel(source="""
    func.func @twice(%x: f64) -> f64 {
      %r = arith.addf %x, %x : f64
      return %r : f64
    }""", session=session)
    def twice(x: f64) -> f64: ...

    assert twice(2.0) == 4.0
    session.clear_cache()
    assert twice(3.0) == 6.0  # compiled again, then native again
    assert session.cache_info().misses == 1


def test_copies_work_and_find_their_way_to_the_native_entry() -> None:
    import copy

    from pymlirjit.boundary.vectorcall import has_entry

    obj = copy.copy(Plain(7))
    assert obj.value == 7 and obj(1) == ("python", (1,))

    @mlir_kernel(source="""
    func.func @neg(%a: f64) -> f64 {
      %r = arith.negf %a : f64
      return %r : f64
    }""", session=Session())
    def neg(a: f64) -> f64: ...

    assert neg(1.0) == -1.0 and has_entry(neg)
    kernel_copy = copy.copy(neg)
    assert not has_entry(kernel_copy) and kernel_copy(2.0) == -2.0
    function = neg.compile()
    function_copy = copy.copy(function)
    assert function_copy(3.0) == -3.0 and has_entry(function_copy)


def test_calls_handed_to_the_python_path_are_in_flight() -> None:
    """An int subclass makes the native entry hand the call to the Python path, which
    runs the same machine code and returns into the entry: it counts as in flight, and
    every way out of the entry (a result, an error) counts it out."""
    session = Session()
    seen: list[int] = []

    @callback(session=session)
    def visit(n: i64) -> i64:
        seen.append(countdown.compile().calls_in_flight)
        if n < 0:
            raise ValueError("negative")
        return n

    @mlir_kernel(source=COUNTDOWN, session=session)
    def countdown(n: i64) -> i64: ...

    assert countdown(0) == 0
    seen.clear()
    class Int(int):
        pass

    assert countdown(Int(5)) == 5 and countdown(5) == 5
    assert seen == [1, 1]
    with pytest.raises(ValueError, match="negative"):
        countdown(-1)  # the callback's error, raised as the entry closes its record
    with pytest.raises(ValueError, match="negative"):
        countdown(Int(-1))
    assert countdown(n=1) == 1  # keywords: the Python path binds them...
    with pytest.raises(TypeError, match="unexpected keyword argument 'm'"):
        countdown(m=1)  # ...or raises
    assert countdown.compile().calls_in_flight == 0
