"""Call records: the failure flag decides, exceptions are kept without ever raising."""

from __future__ import annotations

import ctypes

import pytest

from pymlirjit.boundary import callframe
from pymlirjit.boundary.callframe import (
    FAILED,
    HOLDS_GIL,
    JUMP_BUFFER,
    PREVIOUS,
    CallRecord,
    call_frame,
    culprit_token,
    hand_over,
)


def test_named_fields_match_the_record_layout() -> None:
    names = [name for name, _ in CallRecord._fields_]
    for index, name in [(FAILED, "failed"), (JUMP_BUFFER, "jump_buffer"),
                        (HOLDS_GIL, "holds_gil"), (PREVIOUS, "previous")]:
        assert getattr(CallRecord, name).offset == 8 * index
        assert names[index] == name


def test_culprit_tokens_are_stable_distinct_and_never_0_or_1() -> None:
    first, second = culprit_token("callframe_a"), culprit_token("callframe_b")
    assert first != second and min(first, second) >= 2
    assert culprit_token("callframe_a") == first


def test_a_failed_flag_without_an_exception_raises_naming_the_callback() -> None:
    token = culprit_token("lost_one")
    lost = pytest.raises(RuntimeError, match="callback 'lost_one' failed")
    with lost as caught, call_frame() as frame:
        ctypes.c_int64.from_address(frame.address).value = token  # as native code does
    assert not isinstance(caught.value, RecursionError)


def test_recording_never_raises_and_the_first_error_wins() -> None:
    first = ValueError("first")
    first.__notes__ = "not a list"  # type: ignore[assignment]
    with pytest.raises(ValueError) as caught, call_frame() as frame:
        callframe.record_current("cb", first)
        callframe.record_current("cb", KeyError("second"))
        assert frame.record.failed == 1
    assert caught.value is first


def test_hand_over_moves_an_error_to_the_enclosing_call() -> None:
    error = OSError("inner")
    with pytest.raises(OSError) as caught, call_frame() as outer:
        with call_frame() as inner:
            pass
        callframe._record(inner.address, error, "cb")  # the inner call has ended
        hand_over(inner.address, outer.address)
        outer.record.failed = 1
    assert caught.value is error
    assert inner.address not in callframe._errors


def test_a_worker_failure_is_raised_by_its_call_only() -> None:
    """A failure on a parallel loop's worker thread is raised by the call that ran the
    loop, with its own exception (never "its exception could not be kept"), and never by
    an unrelated call on another Python thread (issue 31 items 5 and 9)."""
    import threading

    import numpy as np

    from pymlirjit import Session, callback

    session = Session()
    caller = threading.get_ident()

    @callback("(index) -> f64", name="fail", session=session)
    def fail(i: int) -> float:
        if threading.get_ident() == caller:
            return 1.0
        raise KeyError(i)  # on the runtime's threads only

    module = session.compile("""
    func.func @k(%out: memref<?xf64>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %out, %c0 : memref<?xf64>
      scf.parallel (%i) = (%c0) to (%n) step (%c1) {
        %x = func.call @fail(%i) : (index) -> f64
        memref.store %x, %out[%i] : memref<?xf64>
        scf.reduce
      }
      return
    }
    func.func private @fail(index) -> f64
    """, parallel=True)
    serial = session.compile("""
    func.func @twice(%x: f64) -> f64 {
      %y = arith.addf %x, %x : f64
      return %y : f64
    }""")
    stop = threading.Event()
    unrelated: list[BaseException] = []

    def other_thread() -> None:
        while not stop.is_set():
            try:
                serial.twice(1.0)
            except BaseException as exc:  # any exception here is the bug
                unrelated.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()
    outcomes = []
    try:
        out = np.zeros(20000)  # enough for the runtime's threads to take blocks
        for _ in range(50):
            try:
                module.k(out)
                outcomes.append(None)
            except KeyError:
                outcomes.append(KeyError)
    finally:
        stop.set()
        thread.join()
    assert not unrelated, unrelated
    assert KeyError in outcomes, "no failure on a worker thread in 50 calls"
