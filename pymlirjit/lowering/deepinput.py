"""MLIR input that could crash the parser: bound its nesting, parse and lower on a large stack.

MLIR's parser and passes recurse once per level of nesting. Text nested deeper than
:data:`MAX_NESTING` is refused with its location before MLIR sees it; what is accepted runs
on a thread whose stack holds that depth, whatever the caller's stack. Text that cannot
nest deeper than :data:`SHALLOW` runs on the caller's thread when its stack is large
enough (:func:`shallow`): a thread of its own costs a small compile ~10%.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import Diagnostic, MLIRError

__all__ = ["MAX_NESTING", "SHALLOW", "STACK_SIZE", "check_nesting", "nesting", "on_large_stack",
           "shallow"]

_T = TypeVar("_T")

#: Deepest nesting of brackets (``( [ { <``) accepted in MLIR source or a pipeline. MLIR's
#: parser and passes recurse once per level; at this depth they use a few MB of stack,
#: well inside the stack they run on (:data:`STACK_SIZE`, and MLIR's own 8 MB threads),
#: and no real module comes near it.
MAX_NESTING = 1000

#: Stack of the thread that parses and lowers (reserved address space; pages are only
#: used as deep as the recursion goes).
STACK_SIZE = 512 << 20

#: Text with at most this many opening brackets and minus signs cannot nest deeper, and
#: MLIR parses and lowers it (with what pymlirjit adds: a microkernel nests ~10 deep) in
#: under 2 MB of stack: regions nested 200 deep parse and lower in 1 MB, 1000 deep
#: need 2-4 MB (the default pipeline, measured).
SHALLOW = 400

#: The least stack a calling thread must have for shallow text to run on it.
_CALLER_STACK = 4 << 20

_NESTING_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|->|>=|[(){}\[\]<>]')
_MINUS_RUN = re.compile(r"(?:-\s*){" + str(MAX_NESTING) + ",}")


def nesting(text: str, brackets: str = "()[]{}<>") -> tuple[int, int] | None:
    """(line, column) where ``text`` nests more than :data:`MAX_NESTING` deep, or None."""
    opening = brackets[0::2]
    if sum(text.count(b) for b in opening) <= MAX_NESTING and text.count("-") < MAX_NESTING:
        return None  # cannot nest that deep: skip the scan (the common case)
    depth = 0
    for match in _NESTING_TOKENS.finditer(text):
        token = match.group()
        if token in opening:
            depth += 1
            if depth > MAX_NESTING:
                return _line_column(text, match.start())
        elif len(token) == 1 and token in brackets:
            depth = max(depth - 1, 0)
    minus = _MINUS_RUN.search(text)  # "- - - x": unary minus recurses without brackets
    return None if minus is None else _line_column(text, minus.start())


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def check_nesting(text: str, filename: str) -> None:
    """Raise :class:`~pymlirjit.MLIRError` at the place ``text`` nests too deep to parse."""
    where = nesting(text)
    if where is not None:
        line, column = where
        raise MLIRError(f"cannot parse MLIR from {filename}", [Diagnostic(
            "error", f"nested more than {MAX_NESTING} deep; MLIR's parser would overflow "
            f"its stack", f'loc("{filename}":{line}:{column})')])


_stack_lock = threading.Lock()


def shallow(text: str, minus: bool = True) -> bool:
    """Whether ``text`` cannot nest deeper than :data:`SHALLOW` (by its count of opening
    brackets, and of minus signs if ``minus``: not for a pass pipeline, whose names have
    many and whose parser does not recurse on them) and this thread's stack holds that
    depth, so that :func:`on_large_stack` may run its parsing or lowering on this thread."""
    count = sum(text.count(b) for b in "([{<") + (text.count("-") if minus else 0)
    return count <= SHALLOW and _thread_stack_size() >= _CALLER_STACK


_stacks = threading.local()


def _thread_stack_size() -> int:
    """This thread's stack size in bytes (0 if unknown), as the C library reports it
    (found once per thread: for the main thread glibc reads /proc/self/maps)."""
    size: int | None = getattr(_stacks, "size", None)
    if size is None:
        size = _stacks.size = _ask_stack_size()
    return size


def _ask_stack_size() -> int:
    if not sys.platform.startswith("linux"):
        return 0  # pthread_getattr_np is glibc's (and musl's)
    try:
        libc = ctypes.CDLL(None)
        self_ = libc.pthread_self
        getattr_np, get_stack, destroy = (libc.pthread_getattr_np,
                                          libc.pthread_attr_getstack,
                                          libc.pthread_attr_destroy)
    except (OSError, AttributeError):
        return 0
    self_.restype = ctypes.c_void_p
    getattr_np.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    attributes = ctypes.create_string_buffer(256)  # pthread_attr_t: 56 bytes on x86-64
    if getattr_np(self_(), attributes) != 0:
        return 0
    base, size = ctypes.c_void_p(), ctypes.c_size_t()
    try:
        if get_stack(attributes, ctypes.byref(base), ctypes.byref(size)) != 0:
            return 0
    finally:
        destroy(attributes)
    return size.value


def _wait_until_gone(native_id: int | None, timeout: float = 1.0) -> None:
    """Wait until the OS no longer counts thread ``native_id`` of this process.

    ``Thread.join`` returns once the thread has finished its Python work, while the
    kernel may count it for a few more microseconds. A ``fork`` in that window makes
    Python 3.12+ warn that the process "is multi-threaded", about a thread that is gone:
    a compile must leave the process with the threads it had."""
    if native_id is None or not sys.platform.startswith("linux"):
        return
    task = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + timeout
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0)


def on_large_stack(function: Callable[[], _T], inline: bool = False) -> _T:
    """``function()``, run on a thread with a :data:`STACK_SIZE` stack: MLIR's parser
    and passes recurse with the input's nesting, and the caller's stack may be small.
    ``inline``: the input is :func:`shallow`, run ``function`` on this thread."""
    if inline:
        return function()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as exc:  # handed to the caller, which re-raises it
            outcome.append((False, exc))

    with _stack_lock:  # the stack size is process-wide: restore it for other threads
        previous = threading.stack_size(STACK_SIZE)
        try:
            # Not a daemon: the interpreter must not finalize under a running parse.
            worker = threading.Thread(target=run, name="pymlirjit-mlir")
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    _wait_until_gone(worker.native_id)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
