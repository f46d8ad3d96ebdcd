"""Call records: the failure flag decides, exceptions are kept without ever raising."""

from __future__ import annotations

import contextlib
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


def test_a_worker_failure_sets_the_foreign_flag_only_with_its_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The record of threads without a call (a parallel loop's workers) is read by any
    call that ends: its flag set before its error is kept made an unrelated call on
    another Python thread raise "its exception could not be kept" (issue 31 item 9).
    Each time an error is kept, the foreign flag is clear or its error is there."""
    import threading

    import numpy as np

    from pymlirjit import Session, callback

    session = Session()
    seen: list[tuple[int, bool]] = []
    record = callframe._record

    def checked_record(address: int, error: BaseException, name: str) -> None:
        if address == callframe._foreign.address:
            with callframe._error_lock:
                seen.append((callframe._foreign.record.failed, address in callframe._errors))
        record(address, error, name)

    monkeypatch.setattr(callframe, "_record", checked_record)

    caller = threading.get_ident()

    @callback("(index) -> f64", name="fail", session=session)
    def fail(i: int) -> float:
        if threading.get_ident() == caller:
            return 1.0
        raise KeyError(i)  # on the runtime's threads only

    kernel = session.compile("""
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
    """, parallel=True).k
    out = np.zeros(20000)  # enough for the runtime's threads to take blocks
    for _ in range(100):
        with contextlib.suppress(KeyError):
            kernel(out)
        if seen:
            break
    assert seen, "no failure on a worker thread in 100 calls"
    assert all(failed == 0 or kept for failed, kept in seen), seen
