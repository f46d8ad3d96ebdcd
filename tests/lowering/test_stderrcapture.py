"""stderr_captured: fd 2 redirected into a temporary file for a block; the text kept for an
error when the block raises, written back when it does not."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from pymlirjit.lowering.stderrcapture import stderr_captured
from tests.threads import run_in_threads


def test_text_written_during_a_failing_block_is_kept_and_not_printed(
        capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError), stderr_captured() as printed:
        os.write(2, b"native complaint\n")
        raise ValueError("failed")
    assert printed.text == "native complaint\n"
    assert capfd.readouterr().err == ""


def test_text_written_during_a_block_that_succeeds_is_written_back(
        capfd: pytest.CaptureFixture[str]) -> None:
    with stderr_captured() as printed:
        os.write(2, b"someone else's line\n")
    assert printed.text == "someone else's line\n"
    assert capfd.readouterr().err == "someone else's line\n"


def test_python_text_buffered_before_the_block_is_not_captured(
        capfd: pytest.CaptureFixture[str]) -> None:
    sys.stderr.write("before")  # buffered by Python until flushed
    with pytest.raises(ValueError), stderr_captured() as printed:
        raise ValueError("failed")
    assert printed.text == ""
    assert capfd.readouterr().err == "before"


def test_fd_2_is_restored_after_each_block(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError), stderr_captured():
        raise ValueError("failed")
    with stderr_captured():
        pass
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


# More than a pipe holds (64 KiB on Linux): a capture through a pipe would block the writer.
_LARGE_CHILD = """if True:
    import os
    from pymlirjit.lowering.stderrcapture import stderr_captured
    try:
        with stderr_captured() as printed:
            os.write(2, b"x" * (1 << 20))
            raise ValueError
    except ValueError:
        print(len(printed.text))
    with stderr_captured():
        os.write(2, b"y" * (1 << 20))
"""


def test_a_write_larger_than_a_pipe_holds_neither_blocks_nor_is_lost() -> None:
    done = subprocess.run([sys.executable, "-c", _LARGE_CHILD], capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(1 << 20).encode()]
    assert done.stderr == b"y" * (1 << 20)


def test_concurrent_captures_each_get_their_own_text() -> None:
    def capture(number: int) -> str:
        for _ in range(20):
            try:
                with stderr_captured() as printed:
                    os.write(2, f"thread {number}\n".encode())
                    raise ValueError
            except ValueError:
                assert printed.text == f"thread {number}\n"
        return printed.text

    assert run_in_threads(capture, range(4)) == [f"thread {n}\n" for n in range(4)]


_CLOSED_CHILD = """if True:
    import os, sys
    from pymlirjit.lowering.stderrcapture import stderr_captured
    sys.stderr = None
    os.close(2)
    with stderr_captured() as printed:
        pass
    print(repr(printed.text))
"""


def test_a_closed_fd_2_runs_the_block_without_a_capture() -> None:
    done = subprocess.run([sys.executable, "-c", _CLOSED_CHILD], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout == "''\n"


def test_without_a_temporary_file_the_block_runs_without_a_capture(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    def no_temporary_file() -> None:
        raise OSError("no writable temporary folder")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_temporary_file)
    with pytest.raises(ValueError), stderr_captured() as printed:
        os.write(2, b"printed as usual\n")
        raise ValueError("failed")
    assert printed.text == ""
    assert capfd.readouterr().err == "printed as usual\n"
