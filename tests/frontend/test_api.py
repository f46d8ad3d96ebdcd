"""The @jit object: inspect_mlir/llvm, compile(), pickling, the disk cache."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pymlirjit
from pymlirjit import MemRef, f32, f64, jit

ROOT = str(Path(pymlirjit.__file__).resolve().parent.parent)


def run_child(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=120, env=env)


@jit
def axpy(a: float, x: MemRef[f64, None], y: MemRef[f64, None]) -> None:
    for i in range(len(x)):
        y[i] += a * x[i]


def test_compile_inspect_and_signatures() -> None:
    kernel = axpy.compile()
    assert axpy.signatures == [("f64", "memref<?xf64>", "memref<?xf64>")]
    text = axpy.inspect_mlir()
    assert f'loc("{__file__}":' in text and "func.func @axpy" in text
    assert "define" in axpy.inspect_llvm()
    assert kernel is axpy.kernel(axpy.signatures[0])
    y = np.zeros(3)
    axpy(2.0, np.ones(3), y)
    assert y.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(KeyError):
        axpy.inspect_mlir(("f32",))
    with pytest.raises(TypeError, match="'x'"):
        axpy(1.0, np.ones(3, np.float32), y)
    assert "axpy" in repr(axpy)


def test_compile_needs_exact_annotations() -> None:
    @jit
    def loose(a, b: f32):
        return a + b

    with pytest.raises(TypeError, match="'a'"):
        loose.compile()
    with pytest.raises(TypeError, match="no specialization"):
        loose.inspect_mlir()


def test_pickles_by_reference_and_by_value() -> None:
    assert pickle.loads(pickle.dumps(axpy)) is axpy

    @jit
    def local(v):
        return v * 3

    copy = pickle.loads(pickle.dumps(local))
    assert copy(2) == 6 and copy is not local


def test_by_value_in_a_process_without_the_file(tmp_path: Path) -> None:
    source = tmp_path / "made_here.py"
    source.write_text(textwrap.dedent("""
        import pickle, sys
        from pymlirjit import jit

        def helper(v):
            return v + 1

        @jit
        def kernel(x):
            s = 0
            for v in x:
                s += helper(v)
            return s

        sys.stdout.buffer.write(pickle.dumps(kernel))
    """))
    made = subprocess.run([sys.executable, str(source)], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert made.returncode == 0, made.stderr
    blob = tmp_path / "kernel.pickle"
    blob.write_bytes(made.stdout)
    source.unlink()  # the receiver cannot read the file: the pickle carries the source
    receiver = tmp_path / "receiver.py"
    receiver.write_text(textwrap.dedent(f"""
        import pickle
        import numpy as np
        kernel = pickle.loads(open({str(blob)!r}, "rb").read())
        assert kernel(np.arange(4)) == 10, kernel(np.arange(4))
        print("OK")
    """))
    done = run_child(receiver)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr


def test_disk_cache_across_processes(tmp_path: Path) -> None:
    script = tmp_path / "cached.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from pymlirjit import Session, jit

        session = Session(cache_dir={str(tmp_path / 'cache')!r})

        @jit(cache=True, session=session)
        def total(x):
            s = 0.0
            for v in x:
                s += v
            return s

        assert total(np.arange(5.0)) == 10.0
        print("OK")
    """))
    for _ in range(2):
        done = run_child(script)
        assert done.returncode == 0 and "OK" in done.stdout, done.stderr
        assert any((tmp_path / "cache").rglob("*")), "nothing written to the cache"


def test_clearing_the_session_cache_recompiles() -> None:
    from pymlirjit import Session

    session = Session()

    @jit(session=session)
    def twice(v):
        return v * 2

    for _ in range(twice.native_after + 5):
        assert twice(3) == 6 and twice(1.5) == 3.0
    session.clear_cache()
    assert twice(3) == 6 and twice(1.5) == 3.0
    assert session.cache_info().size == 2  # both compiled again into the emptied cache


def test_views_returned_through_the_chain_of_native_entries() -> None:
    # A result the native entry reads in Python (a strided view) is read by its own
    # specialization, whichever link of the chain of entries took the call.
    @jit
    def pair(a):  # type: ignore[no-untyped-def]
        return a + 0, a[:, ::2]

    x = np.arange(12.0).reshape(3, 4)
    y = np.arange(24).reshape(3, 8)[:, ::2]
    for _ in range(3):
        for value in (x, y):
            whole, view = pair(value)
            np.testing.assert_array_equal(whole, value)
            np.testing.assert_array_equal(view, value[:, ::2])
