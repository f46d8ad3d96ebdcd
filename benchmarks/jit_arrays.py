"""Array code in @jit functions against numpy and numba (run by hand, not in the test
suite): ``A @ B`` (one BLAS thread), and fused whole-array expressions on 10^7 elements.

    python benchmarks/jit_arrays.py [--quick]

Targets (issue 27): ``@`` within 1.2x numpy; ``a * x + b`` and ``np.sqrt(x*x + y*y)`` at
most 0.6x numpy's time and within 1.1x numba's. ``a * x + b``'s row also gives numpy's
``x * a``: one pass writing a new array, the floor for any code that returns one (its
pages are faulted in and zeroed by the kernel as they are first written). Each row prints
its baselines, measured in the same run, and the machine's load.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymlirjit import jit


def matmul(a, b):
    return a @ b


def axpb(a, x, b):
    return a * x + b


def hypot(x, y):
    return np.sqrt(x * x + y * y)


def one_pass(a, x, b):
    return x * a  # numpy's floor for writing a new array: one pass, no temporary


def axpb_into(a, x, b, out):
    out[:] = a * x + b  # into memory the caller keeps: no new pages to fault in


def numpy_axpb_into(a, x, b, out):
    np.multiply(x, a, out=out)
    out += b


def median_time(f: Any, *args: Any, repeat: int = 9) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _row(label: str, mine: float, baselines: dict[str, float], target: str) -> None:
    ratios = ", ".join(f"{name} {t * 1e3:.2f} ms ({mine / t:.2f}x)"
                       for name, t in baselines.items())
    print(f"{label}: @jit {mine * 1e3:.2f} ms; {ratios}; target {target}")


def main(quick: bool = False) -> None:
    try:
        import numba
    except ImportError:  # numba is optional: the numpy rows still run
        numba = None
    with open("/proc/loadavg") as f:
        print(f"load: {f.read().split()[:3]}, OPENBLAS_NUM_THREADS="
              f"{os.environ['OPENBLAS_NUM_THREADS']}")
    rng = np.random.default_rng(0)
    jmatmul = jit(matmul)
    for dtype in (np.float32, np.float64):
        for n in (64, 128) if quick else (512, 1024):
            a, b = rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)
            np.testing.assert_allclose(jmatmul(a, b), a @ b, rtol=1e-3)
            _row(f"A @ B {np.dtype(dtype).name} {n}^2", median_time(jmatmul, a, b),
                 {"numpy": median_time(np.matmul, a, b)}, "<= 1.2x numpy")
    size = 10_000 if quick else 10_000_000
    x, y = rng.random(size), rng.random(size)
    for f, args in ((axpb, (2.0, x, 1.0)), (hypot, (x, y))):
        mine = jit(f)
        np.testing.assert_allclose(mine(*args), f(*args))
        baselines = {"numpy": median_time(f, *args)}
        if numba is not None:
            baselines["numba"] = median_time(numba.njit(f), *args)
        if f is axpb:  # what any code writing a new 10^7 array costs here (page faults)
            baselines["numpy x * a"] = median_time(one_pass, *args)
        _row(f"{f.__name__} 1e{len(str(size)) - 1} f64", median_time(mine, *args), baselines,
             "<= 0.6x numpy, <= 1.1x numba")
        par = jit(parallel=True)(f)
        _row(f"{f.__name__} 1e{len(str(size)) - 1} f64 parallel=True",
             median_time(par, *args), {"@jit serial": median_time(mine, *args)},
             "faster than serial on 2 idle cores")
    out = np.empty_like(x)
    into = jit(axpb_into)
    into(2.0, x, 1.0, out)
    np.testing.assert_allclose(out, 2.0 * x + 1.0)
    baselines = {"numpy out=": median_time(numpy_axpb_into, 2.0, x, 1.0, out)}
    if numba is not None:
        baselines["numba"] = median_time(numba.njit(axpb_into), 2.0, x, 1.0, out)
    _row(f"out[:] = a * x + b 1e{len(str(size)) - 1} f64", median_time(into, 2.0, x, 1.0, out),
         baselines, "none (the preallocated form of the row above)")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
