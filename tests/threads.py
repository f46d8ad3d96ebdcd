"""Calls made from several threads at once, for the tests of thread safety."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


def run_in_threads(target: Callable[[A], T], arguments: Iterable[A], *,
                   timeout: float = 120.0) -> list[T]:
    """``[target(a) for a in arguments]``, each call on a thread of its own, the threads
    all started before any of them calls ``target`` (a barrier), so that the calls overlap.

    The first exception a thread raised is raised here, and threads still running
    ``timeout`` seconds after the start fail the test (they are daemon threads, left to
    run). The results are in the order of ``arguments``."""
    items = list(arguments)
    results: dict[int, T] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(items), timeout=timeout)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = target(items[index])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,), daemon=True)
               for index in range(len(items))]
    try:
        for thread in threads:
            thread.start()
    except BaseException:
        start.abort()
        raise
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if errors:
        raise errors[0]
    alive = [index for index, thread in enumerate(threads) if thread.is_alive()]
    if alive:
        raise AssertionError(f"threads {alive} of {len(threads)} still running "
                             f"{timeout:g} s after they started")
    return [results[index] for index in range(len(items))]
