"""Smoke test of the on-demand benchmark suite: ``python -m benchmarks --quick`` runs
every case at tiny sizes and prints the result tables. The suite itself is not part of
the test run (see docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmarks_run_and_print_the_table() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,  # slow when loaded
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    output = completed.stdout
    headers = [line for line in output.splitlines()
               if line.startswith("case") and "median ns" in line and "ratio" in line]
    assert len(headers) == 10, output
    assert "machine:" in output and "numpy:" in output
    for letter in "abcdefghim":
        assert f"\n{letter}. " in output, f"case {letter} missing:\n{output}"
    assert "targets (design.md):" in output
    # Case f checked every path against numpy: none computed something else or crashed.
    assert "wrong result" not in output and "failed:" not in output, output
    for kernel in ("saxpy", "dot", "matmul", "batch matmul", "conv2d", "softmax",
                   "stencil", "axis-0 sum", "exp", "tanh"):
        assert f"\nf     {kernel} " in output, f"kernel {kernel} missing:\n{output}"
    assert "of FMA peak" in output and "of copy" in output
    assert "g     two scalar results (a tuple): pymlirjit" in output
    assert "h     pymlirjit mlir_ufunc, add body" in output
    assert "i     SpMV 2000x2000 CSR" in output and "passing a CSR matrix" in output
    assert "m     stencil, boundscheck=True" in output


def test_kernel_suite_places_each_paths_output_where_the_specs_is() -> None:
    # Where an output starts (modulo a page) moves the same loops' time by up to a
    # fifth (split vector stores, 4K aliasing): every path's copy starts where the
    # spec's array does, so the rows compare code, not allocations.
    import numpy as np

    from benchmarks.kernels import _placed_like

    for skip in (0, 8, 16, 48, 4000):
        backing = np.zeros(40_000 + 4096, np.uint8)
        start = skip + (-backing.ctypes.data) % 4096
        spec_array = backing[start:start + 32_000].view(np.float64).reshape(40, 100)
        placed = _placed_like(spec_array)
        assert (placed.ctypes.data - spec_array.ctypes.data) % 4096 == 0
        assert placed.shape == spec_array.shape and placed.dtype == spec_array.dtype
        assert placed.flags.writeable and placed.flags.c_contiguous and not placed.any()
        assert not np.shares_memory(placed, spec_array)


def test_cpu_time_option_reaches_case_f_and_times_with_the_clock_given() -> None:
    # --cpu-time: case f's serial rows timed by time.thread_time (a busy machine's
    # descheduled time not counted); per_unit times with whatever clock it is given.
    import itertools

    from benchmarks.__main__ import _parse
    from benchmarks._timing import Config, per_unit

    assert _parse(["--cpu-time", "--only", "f"]).cpu_time is True
    assert _parse([]).cpu_time is False and Config().cpu_time is False
    ticks = itertools.count()
    samples = per_unit(lambda: None, units=4, repeat=3, number=5,
                       clock=lambda: float(next(ticks)))
    assert samples.values == (1e9 / 20,) * 3  # one tick per repeat of 5 runs x 4 units
