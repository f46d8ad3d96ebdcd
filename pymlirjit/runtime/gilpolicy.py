"""A module's GIL policy: whether its calls release the GIL, and may be unwound, by
what a call can reach (callbacks, shared libraries, threads of its own or of the
kernels it links); see docs/threads.md."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from ..boundary.failures import FAIL_SYMBOL

__all__ = ["call_policy", "is_async_runtime", "only_failure_callback", "refuse_kept_gil"]


def call_policy(calls_back: bool, shared_libs: Sequence[str],
                only_on_failure: bool = False, threads: bool = False,
                ) -> tuple[bool | None, bool]:
    """Whether a module's functions release the GIL (``None``: only when other Python
    threads exist), and whether a failing callback may unwind their call at once.
    ``only_on_failure``: its only callback is checked mode's failure callback, which runs
    when a check fails, so it is no reason to keep the GIL. ``threads``: it calls a
    kernel that runs threads which call Python (a linked parallel kernel whose loop calls
    back): as for a module with shared libraries, whose threads' callbacks need the GIL,
    and whose calls must not be unwound while they run."""
    # Compiled code that calls back into Python gains nothing from dropping the GIL
    # and pays for re-taking it in every callback; but code that may start threads
    # (anything using shared libraries, such as MLIR's async runtime) must drop it,
    # or its threads' callbacks would wait for the GIL forever. Code that never calls
    # back drops it when other Python threads exist (None), for them to run.
    keeps_gil = calls_back and not only_on_failure
    threaded = bool(shared_libs) or threads
    release_gil: bool | None = True if threaded else (False if keeps_gil else None)
    # For the same reason, only code without shared libraries may be unwound
    # (longjmp) out of when a callback fails: it has no threads and no runtime state.
    return release_gil, calls_back and not threaded


def only_failure_callback(linked: Iterable[str]) -> bool:
    """Whether the only callback of ``linked`` (names) is checked mode's failure one."""
    return set(linked) == {FAIL_SYMBOL}

def is_async_runtime(path: str) -> bool:
    """Whether the shared library at ``path`` is MLIR's async runtime (whose threads
    run a parallel module's loops)."""
    return os.path.basename(path).startswith("libmlir_async_runtime")


def refuse_kept_gil(display_name: str, release_gil: bool | None, module: Any) -> None:
    """``ValueError`` if a call of the function ``display_name`` of ``module`` would keep
    the GIL (``release_gil`` False) while threads it runs call Python: they would wait
    for it for ever."""
    if release_gil is False and getattr(module, "threads_call_python", False):
        raise ValueError(
            f"kernel {display_name!r}: release_gil=False would hang: its code runs threads "
            f"(parallel loops, its own or a linked kernel's) that call Python callbacks, "
            f"which need the GIL its caller would keep; leave release_gil unset or True")
