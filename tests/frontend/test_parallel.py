"""prange: scf.parallel with parallel=True (reductions privatized per chunk), range
without it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pymlirjit
from pymlirjit import jit, prange

from .helpers import check


def _reduce(x):
    s = 0.0
    p = 1
    lo = x[0]
    hi = x[0]
    for i in prange(len(x)):
        s += x[i] * 2
        p *= 2 if x[i] > 0 else 1
        lo = min(lo, x[i])
        hi = max(x[i], hi)
    return s, p, lo, hi


preduce = jit(parallel=True)(_reduce)
sreduce = jit(_reduce)


def test_reductions_match_python() -> None:
    x = np.array([3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0, 6.0, 5.0, 3.0] * 7)
    check(preduce, x)
    check(sreduce, x)
    check(preduce, x[:1])
    assert "scf.parallel" in preduce.inspect_mlir()
    assert "scf.parallel" not in sreduce.inspect_mlir()


def sq(v):
    return v * v


@jit(parallel=True)
def fill(x, out, k):
    n = len(x)
    for i in prange(n):
        t = sq(x[i]) * k  # a private variable, and a compiled callee
        if t > 50:
            continue
        out[i] = t
    for i in prange(2, n, 3):
        for j in range(2):
            out[i] += j


def test_private_variables_continue_and_callees() -> None:
    x = np.arange(20.0)
    check(fill, x, np.zeros(20), 2.0)
    check(fill, x[:0], np.zeros(0), 2.0)


def test_continue_in_prange_survives_a_second_specialization() -> None:
    # The outlined body rewrites continue as return: on a copy, never on the cached tree
    # that the next signature (float32 here) and the serial jit (prange as range) read.
    x = np.arange(20.0)
    check(fill, x, np.zeros(20), 2.0)
    check(fill, x.astype(np.float32), np.zeros(20, np.float32), 2.0)
    check(jit(fill.py_func), x, np.zeros(20), 2.0)


@jit(parallel=True)
def early(x):
    for i in prange(len(x)):
        if x[i] > 0:
            return i
    return -1


def test_return_in_prange_is_a_compile_error() -> None:
    from pymlirjit.frontend import JitTypeError

    with pytest.raises(JitTypeError, match="return inside a prange loop"):
        early(np.ones(3))


def test_callback_in_parallel_loop_runs_in_a_child(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import numpy as np
        from pymlirjit import jit, prange

        seen = []

        def log(i: int) -> None:
            seen.append(i)

        def boom(i: int) -> float:
            if i == 7:
                raise KeyError("seven")
            return 1.0

        @jit(parallel=True)
        def logged(n):
            for i in prange(n):
                log(i)

        @jit(parallel=True)
        def failing(x):
            for i in prange(len(x)):
                x[i] = boom(i)

        logged(100)
        assert sorted(seen) == list(range(100)), seen
        try:
            failing(np.zeros(20))
        except KeyError as exc:
            assert "seven" in str(exc)
        else:
            raise AssertionError("no KeyError")
        print("OK")
    """)
    script = tmp_path / "parallel_callbacks.py"
    script.write_text(code)
    root = str(Path(pymlirjit.__file__).resolve().parent.parent)  # this checkout's
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr


def test_prange_without_parallel_is_range() -> None:
    assert list(prange(3)) == [0, 1, 2]
    check(sreduce, np.arange(5.0))
