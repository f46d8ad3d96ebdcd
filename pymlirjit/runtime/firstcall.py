"""First calls in progress: what a call that re-enters one on the same thread does.

A kernel's first call compiles it and builds its native entry (tens of milliseconds
to seconds). A signal handler runs on the main thread between two bytecodes of that
work, and may call the same kernel: it must neither start the same work again (each
nested build is interrupted in turn, until ``RecursionError``) nor wait for a lock
its own thread holds. So each thread notes here what it is building:

- a native entry (:func:`native_build`): a call re-entering it takes the Python path,
  which needs no entry;
- a kernel's first compile (:func:`first_call`): a call re-entering it uses the
  compiled function once there is one (its Python path, the entry being built), and
  raises a ``RuntimeError`` naming the kernel before (there is nothing to run yet).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..boundary.buildgate import building

__all__ = ["FirstCall", "first_call", "first_call_running", "native_build",
           "running_first_call"]

_native_lock = threading.Lock()  # first calls from several threads build an entry once
_local = threading.local()


@contextmanager
def native_build() -> Iterator[bool]:
    """``with native_build() as free:`` around building a native entry. ``free`` is
    ``False`` if this thread is building one already (the caller re-entered it, from a
    signal handler): build nothing, take the Python path. Else the process's build lock
    is held (other threads wait for the entry being built) and ``free`` is ``True``."""
    if getattr(_local, "building", False):
        yield False
        return
    with building(), _native_lock:  # a fork waits for the build, then this lock
        _local.building = True
        try:
            yield True
        finally:
            _local.building = False


class FirstCall:
    """A kernel's first call running on this thread: ``function``, the compiled
    function once the compile has made it (its native entry may still be building)."""

    __slots__ = ("function",)

    def __init__(self) -> None:
        self.function: Any = None


def _running() -> dict[int, FirstCall]:
    running: dict[int, FirstCall] | None = getattr(_local, "first_calls", None)
    if running is None:
        running = _local.first_calls = {}
    return running


@contextmanager
def first_call(kernel: object) -> Iterator[FirstCall]:
    """Note ``kernel``'s first call (its compile) as running on this thread."""
    running = _running()
    state = running[id(kernel)] = FirstCall()
    try:
        yield state
    finally:
        running.pop(id(kernel), None)


def first_call_running(kernel: object) -> bool:
    """Whether this thread is running ``kernel``'s first call (its compile)."""
    return id(kernel) in _running()


def running_first_call(kernel: object, name: str) -> Any:
    """``None`` unless this thread is running ``kernel``'s first call (the caller
    re-entered it); else the function that call compiled, to be called through its
    Python path, or a ``RuntimeError`` naming the kernel (``name``) if it has none yet."""
    state = _running().get(id(kernel))
    if state is None:
        return None
    if state.function is None:
        raise RuntimeError(
            f"{name} was called again on the thread running its first call (by a signal "
            f"handler?) before it finished compiling; compile it first (kernel.compile()) "
            f"where a signal handler may call it")
    return state.function
