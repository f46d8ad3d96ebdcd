"""The build gate: ``fork()`` waits for the compiles and code builds in flight.

A compile holds locks (the session's, the native-entry lock, MLIR's and LLVM's own,
inside their C++ code) and leaves them only when it ends. A process forked meanwhile
inherits them held by a thread it does not have, and its first compile waits for them
forever. So every compile and code build runs inside :func:`building` (entered before
any of those locks is taken), and an at-fork handler closes the gate before the fork:
new builds wait, the fork waits until those in flight have ended (and takes llvmlite's
lock, which the garbage collector's frees of LLVM objects take outside any build), and
the gate opens again in both processes after it. A thread forking from inside a build of its own (a
signal handler) does not wait for itself.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["building", "builds_in_flight"]

_gate = threading.Condition(threading.Lock())
_active = 0  # builds in flight, on every thread
_forking = False  # a fork waits for them (new builds wait for it)
_local = threading.local()


@contextmanager
def building() -> Iterator[None]:
    """Around a compile or a code build: a fork waits until it ends. Re-entrant (a
    build inside a build of the same thread never waits for a fork)."""
    global _active
    depth = getattr(_local, "depth", 0)
    with _gate:
        while _forking and depth == 0:
            _gate.wait()
        _active += 1
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
        with _gate:
            _active -= 1
            _gate.notify_all()


def builds_in_flight() -> int:
    """How many builds are running now, on every thread."""
    return _active


def _llvmlite_lock() -> Any:
    """llvmlite's lock around every call into LLVM (objects freed by the garbage
    collector take it too, outside any build), if llvmlite is loaded."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)


_held: list[Any] = []  # what the forking thread holds across the fork


def _before_fork() -> None:
    global _forking
    _gate.acquire()
    _forking = True
    own = getattr(_local, "depth", 0)
    while _active > own:
        _gate.wait()
    # Held across the fork: no build starts or ends until the gate opens again.
    lock = _llvmlite_lock()
    if lock is not None and lock.acquire():
        _held.append(lock)


def _release_held() -> None:
    while _held:
        _held.pop().release()


def _after_fork_in_parent() -> None:
    global _forking
    _release_held()
    _forking = False
    _gate.notify_all()
    _gate.release()


def _after_fork_in_child() -> None:
    global _gate, _active, _forking
    _release_held()  # this thread's, in the child too
    # The only thread now is the one that forked: its own builds, if any, go on.
    _active, _forking = getattr(_local, "depth", 0), False
    _gate = threading.Condition(threading.Lock())


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
