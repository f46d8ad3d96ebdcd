"""What native code writes on the process's stderr (file descriptor 2) during a call,
captured so that it can become part of a Python exception.

Some of MLIR's errors reach only fd 2: a pass option value its options parser refuses
("<Pass Options Parser>: for the --max-iterations option: 'x' value invalid ...") is
printed there, and the exception MLIR raises says only that the pass could not be added.
:func:`stderr_captured` redirects fd 2 into an unlinked temporary file for the length of
a block. A file, not a pipe: a write larger than a pipe's buffer would block the writer,
and the writer is the only thread that would read it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

__all__ = ["CapturedStderr", "stderr_captured"]

#: fd 2 is the process's: one capture at a time (a nested one captures into its own file).
_lock = threading.RLock()
_STDERR = 2


class CapturedStderr:
    """The text written on fd 2 during a :func:`stderr_captured` block, once it is over."""

    def __init__(self) -> None:
        self.text = ""


@contextlib.contextmanager
def stderr_captured() -> Iterator[CapturedStderr]:
    """Redirect fd 2 into a temporary file for the block.

    When the block raises, the captured text is kept in the yielded
    :class:`CapturedStderr` for the caller to put into its error, and not printed. When the
    block ends normally, whatever was captured is written back to fd 2: another thread may
    have written there in that window, and its output must not be lost. With no usable
    fd 2 (closed) or no temporary file, the block runs without a capture.
    """
    captured = CapturedStderr()
    with _lock:
        with contextlib.suppress(AttributeError, OSError, ValueError):  # a closed stream
            sys.stderr.flush()  # Python's buffered text goes out before the redirect
        try:
            saved = os.dup(_STDERR)
        except OSError:
            yield captured
            return
        try:
            try:
                sink = tempfile.TemporaryFile()  # noqa: SIM115 - entered just below
            except OSError:  # no writable temporary folder: nothing can be captured
                yield captured
                return
            with sink:
                os.dup2(sink.fileno(), _STDERR)
                try:
                    yield captured
                finally:
                    os.dup2(saved, _STDERR)
                    sink.seek(0)
                    data = sink.read()
                    captured.text = data.decode(errors="replace")
                _write_all(data)  # reached only when the block did not raise
        finally:
            os.close(saved)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    with contextlib.suppress(OSError):  # a stderr that cannot be written loses it anyway
        while view:
            view = view[os.write(_STDERR, view):]
