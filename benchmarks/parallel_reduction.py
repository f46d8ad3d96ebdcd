"""``python -m benchmarks.parallel_reduction [--quick]``: a loop with a reduction
(``scf.parallel`` with ``init`` and ``scf.reduce``: a numba ``prange`` sum) compiled
with ``parallel=True`` against the same source compiled serially, in the same run
(issue 29 item 7: at least 1.5x on 2 cores). A loop without a reduction doing the same
work per element (``parallel=True`` vs serial) is measured alongside: on a busy
machine it shows what parallelism the machine gives this process at all; and numba's
``prange`` sum, where numba is installed. Prints the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from pymlirjit import Session

from ._timing import machine_info

#: The sum of the square roots of an array's elements, as a parallel loop with a
#: reduction (and, below, the same work per element without one).
REDUCTION = """
func.func @sqrt_sum(%a: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  %n = memref.dim %a, %c0 : memref<?xf64>
  %r = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = math.sqrt %x : f64
    scf.reduce(%y : f64) {
    ^bb0(%l: f64, %r: f64):
      %s = arith.addf %l, %r : f64
      scf.reduce.return %s : f64
    }
  }
  return %r : f64
}
"""

MAP = """
func.func @sqrt_map(%a: memref<?xf64>, %out: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = math.sqrt %x : f64
    memref.store %y, %out[%i] : memref<?xf64>
  }
  return
}
"""


def _numba_sum() -> Callable[[Any], float] | None:
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(parallel=True)
    def sqrt_sum(a: Any) -> float:
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += np.sqrt(a[i])
        return s

    return sqrt_sum


def _medians(calls: dict[str, Callable[[], Any]], repeat: int, number: int,
             ) -> dict[str, tuple[float, float]]:
    """The median and the least seconds per call of each of ``calls``, their repeats
    interleaved (a change of load hits every row alike)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm: first calls build native entries
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(number):
                call()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: (statistics.median(values), min(values))
            for name, values in samples.items()}


def run(sizes: Sequence[int], repeat: int) -> list[str]:
    """The result lines."""
    serial, parallel = Session(), Session(parallel=True)
    kernels = {(name, mode): getattr(session.compile(source), name)
               for name, source in (("sqrt_sum", REDUCTION), ("sqrt_map", MAP))
               for mode, session in (("serial", serial), ("parallel", parallel))}
    numba_sum = _numba_sum()
    threads = len(os.sched_getaffinity(0))
    chosen = os.environ.get("PYMLIRJIT_NUM_THREADS") or f"the {threads} CPUs"
    lines = [machine_info(), f"load average before: {_load()}",
             f"parallel=True threads: {chosen}"]
    for n in sizes:
        a = np.random.default_rng(0).random(n)
        out = np.empty_like(a)
        expected = float(np.sqrt(a).sum())
        for mode in ("serial", "parallel"):
            got = kernels["sqrt_sum", mode](a)
            assert abs(got - expected) <= 1e-9 * expected, (mode, got, expected)
        calls: dict[str, Callable[[], Any]] = {
            "reduction serial": partial(kernels["sqrt_sum", "serial"], a),
            "reduction parallel": partial(kernels["sqrt_sum", "parallel"], a),
            "map serial": partial(kernels["sqrt_map", "serial"], a, out),
            "map parallel": partial(kernels["sqrt_map", "parallel"], a, out),
        }
        if numba_sum is not None:
            calls["numba prange sum"] = partial(numba_sum, a)
        number = max(1, 2_000_000 // n)
        times = _medians(calls, repeat, number)
        lines.append(f"n = {n}:  {'median us':>12} {'min us':>12}")
        for name, (median, least) in times.items():
            lines.append(f"  {name:<20} {median * 1e6:12.1f} {least * 1e6:12.1f}")
        for i, which in enumerate(("median", "min")):
            reduction = times["reduction serial"][i] / times["reduction parallel"][i]
            mapping = times["map serial"][i] / times["map parallel"][i]
            lines.append(f"  speedup ({which}): reduction {reduction:.2f}x (target >= 1.5x: "
                         f"{'met' if reduction >= 1.5 else 'missed'}), loop without a "
                         f"reduction {mapping:.2f}x (what the machine gives)")
    lines.append(f"load average after: {_load()}")
    return lines


def _load() -> str:
    try:
        with open("/proc/loadavg") as loadavg:
            return " ".join(loadavg.read().split()[:3])
    except OSError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parallel_reduction",
                                     description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    sizes = (10_000,) if args.quick else (100_000, 1_000_000, 10_000_000)
    print("\n".join(run(sizes, 3 if args.quick else args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
