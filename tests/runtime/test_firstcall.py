"""A kernel called again, by a signal handler, during its own first call: while its native
entry is being built the nested call takes the Python path; before it is compiled, it
raises a RuntimeError naming the kernel. Never a second build, a deadlock on the
build lock, a RecursionError or a dead process (each case in a child process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pymlirjit.runtime.firstcall import first_call, native_build, running_first_call


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr
    return done.stdout


PRELUDE = """
    import signal
    import pymlirjit.boundary.native as native
    import pymlirjit.session as sessions
    from pymlirjit import Session, f64, mlir_kernel

    session = Session()
    SOURCE = '''
    func.func @sq(%x: f64) -> f64 {
      %r = arith.mulf %x, %x : f64
      return %r : f64
    }'''

    @mlir_kernel(session=session, source=SOURCE.replace("@sq", "@warm"))
    def warm(x: f64) -> f64: ...

    warm(1.0)  # MLIR and llvmlite loaded: the first call below only compiles

    @mlir_kernel(session=session, source=SOURCE)
    def sq(x: f64) -> f64: ...

    seen = []

    def handler(signum, frame):
        try:
            seen.append(sq(3.0))
        except RuntimeError as error:
            seen.append(str(error))

    signal.signal(signal.SIGUSR1, handler)
"""


def test_a_call_during_the_native_entry_build_takes_the_python_path() -> None:
    stdout = run_python(PRELUDE + """
    build = native.NativeBatch.compile

    def interrupted(self):
        if not seen:
            signal.raise_signal(signal.SIGUSR1)  # its handler runs here, mid-build
        return build(self)

    native.NativeBatch.compile = interrupted
    print(sq(2.0), seen, sq.compile().native_entry is not None)
    """)
    assert stdout.splitlines()[0] == "4.0 [9.0] True"


def test_a_call_before_the_first_compile_ends_raises_naming_the_kernel() -> None:
    stdout = run_python(PRELUDE + """
    compile_module = sessions.Session.compile

    def interrupted(self, *args, **kwargs):
        if not seen:
            signal.raise_signal(signal.SIGUSR1)
        return compile_module(self, *args, **kwargs)

    sessions.Session.compile = interrupted
    print(sq(2.0), sq(5.0))
    print(seen)
    """)
    first, second = stdout.splitlines()[:2]
    assert first == "4.0 25.0"
    assert "@mlir_kernel 'sq' was called again on the thread running its first call" in second


def test_a_fast_timer_calling_the_kernel_during_its_first_call() -> None:
    # It nested compiles and builds until RecursionError, and the process died.
    stdout = run_python(PRELUDE + """
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    try:
        result = sq(2.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert all(x == 9.0 or "called again" in x for x in seen), seen
    print(result, sq(4.0))
    """)
    assert stdout.split()[:2] == ["4.0", "16.0"]


def test_the_marks_are_per_thread_and_undone() -> None:
    kernel = object()
    assert running_first_call(kernel, "k") is None
    with first_call(kernel) as state:
        with pytest.raises(RuntimeError, match=r"^k was called again"):
            running_first_call(kernel, "k")
        state.function = len
        assert running_first_call(kernel, "k") is len
    assert running_first_call(kernel, "k") is None
    with native_build() as free:
        assert free
        with native_build() as nested:
            assert not nested
    with native_build() as free:
        assert free
