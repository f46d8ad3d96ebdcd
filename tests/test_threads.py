"""run_in_threads, the helper the thread-safety tests rely on: if it let a thread's failure
pass, they would pass too."""

from __future__ import annotations

import threading

import pytest

from tests.threads import run_in_threads


def test_results_come_in_the_order_of_the_arguments_from_overlapping_threads() -> None:
    together = threading.Barrier(4, timeout=10)  # breaks unless all four calls overlap

    def work(argument: str) -> tuple[str, int]:
        together.wait()
        return argument * 2, threading.get_ident()

    results = run_in_threads(work, "abcd")
    assert [doubled for doubled, _ in results] == ["aa", "bb", "cc", "dd"]
    assert len({ident for _, ident in results}) == 4


def test_an_exception_in_a_thread_is_raised_in_the_caller() -> None:
    def work(index: int) -> int:
        return 1 // (index - 2)

    with pytest.raises(ZeroDivisionError):
        run_in_threads(work, range(4))


def test_a_thread_still_running_after_the_timeout_fails() -> None:
    release = threading.Event()
    try:
        with pytest.raises(AssertionError, match=r"threads \[1\] of 3 still running"):
            run_in_threads(lambda index: index != 1 or release.wait(), range(3), timeout=0.2)
    finally:
        release.set()
