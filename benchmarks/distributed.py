"""Kernels across processes (issue 16): ``python -m benchmarks.distributed [--quick]``.

Measures, each against its baseline in the same run:

- the pickle round trip of a kernel: by reference (importable), by value (made at run
  time), and by value with a callback (its function through cloudpickle), against a plain
  Python function of this module and numba dispatchers of the same loop (importable and
  made at run time); a receiver that has unpickled the kernel before (every task after a
  worker's first) and one that has not (simulated: the token table cleared; what a
  process finds once, pymlirjit's names and callbacks' signatures, stays found, as in
  a worker after its first kernel of any token);
- the first call in a fresh process of a kernel it unpickles: compiling, versus loading
  from a warm disk cache (the first unpickle, which builds the kernel, timed apart);
- a chunked per-block reduction over 10^8 elements (``--elements``; each block made by the kernel:
  no data to ship), in one process, in a 2-process pool and on a 2-worker Dask
  LocalCluster (when installed): throughput and speedup over one process, pools and
  clusters started and warmed outside the timing; each task calls the importable kernel
  through a function of this module, or is the same kernel made at run time, shipped
  by value with every task. A row per block count (``--blocks``, default 4, 8, 16 and
  32 blocks over the same elements): a task's fixed cost (Dask's scheduler, a pool's
  queues) against the block's work, which Dask advises to keep at 100 ms or more.
  Baselines for the cluster: the same loop compiled by numba (``math.sqrt``, the GIL
  released), in one process and on the cluster, shipped as the importable kernel is
  (its speedup over numba's one-process time: Dask's ceiling for this computation, with
  no pymlirjit in the tasks); the same tasks doing nothing; and each Dask computation's
  fixed cost, its time beyond half its one-process time.

Not one of ``python -m benchmarks``'s cases: it starts processes and clusters.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pymlirjit import Session, callback, f64, i64, mlir_kernel

__all__ = ["BLOCK", "block_sum", "block_sum_py", "main"]

#: The sum of sqrt(1 + x*x) for x = i * 1e-6, i from start to start + n - 1.
BLOCK = """
func.func @block_sum(%start: i64, %n: i64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %first = arith.index_cast %start : i64 to index
  %count = arith.index_cast %n : i64 to index
  %last = arith.addi %first, %count : index
  %zero = arith.constant 0.0 : f64
  %one = arith.constant 1.0 : f64
  %h = arith.constant 1.0e-6 : f64
  %s = scf.for %i = %first to %last step %c1 iter_args(%acc = %zero) -> f64 {
    %ii = arith.index_cast %i : index to i64
    %fi = arith.sitofp %ii : i64 to f64
    %x = arith.mulf %fi, %h : f64
    %xx = arith.mulf %x, %x : f64
    %y = arith.addf %xx, %one : f64
    %r = math.sqrt %y : f64
    %t = arith.addf %acc, %r : f64
    scf.yield %t : f64
  }
  return %s : f64
}
"""


@mlir_kernel(source=BLOCK)
def block_sum(start: i64, n: i64) -> f64: ...


def block_sum_py(start: int, n: int) -> float:
    """The same loop in Python: the plain function pickled, and numba's dispatchers'."""
    s = 0.0
    for i in range(start, start + n):
        x = i * 1e-6
        s += (1.0 + x * x) ** 0.5
    return s


def _timed_us(function: Callable[[], Any], number: int) -> tuple[float, float]:
    """Microseconds per call of ``function`` over ``number`` calls: wall time, and the
    CPU time of this process (which other jobs on the machine disturb less)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        function()
    return ((time.perf_counter() - wall) / number * 1e6,
            (time.process_time() - cpu) / number * 1e6)


def _round_trip_us(obj: Any, number: int, fresh: bool = False) -> tuple[float, float]:
    """Wall and CPU microseconds per ``pickle.loads(pickle.dumps(obj))``; ``fresh``: as
    a receiver that has not unpickled ``obj`` before (pymlirjit's token tables, and
    numba's dispatcher memo, cleared before each round trip)."""
    from pymlirjit.boundary import pickling as tokens

    if not fresh:
        return _timed_us(lambda: pickle.loads(pickle.dumps(obj)), number)
    tables: list[Any] = [tokens._by_token, tokens._kept]
    if "numba" in sys.modules:  # numba interns unpickled dispatchers by uuid the same way
        from numba.core.dispatcher import _MemoMixin

        tables.append(_MemoMixin._memo)

    def once() -> None:
        for table in tables:
            table.clear()
        pickle.loads(pickle.dumps(obj))

    known = [dict(table) for table in tables]
    try:
        return _timed_us(once, number)
    finally:  # the sender's objects again: unpickling gives them back, as before
        for table, entries in zip(tables, known):
            table.clear()
            table.update(entries)


def pickling(quick: bool) -> None:
    import benchmarks.distributed as importable  # not __main__: pickles by reference

    number = 200 if quick else 2000
    session = Session()

    @mlir_kernel(source=BLOCK, session=session)
    def local_sum(start: i64, n: i64) -> f64: ...

    local_sum.__name__ = "block_sum"

    @callback(session=session)
    def weight(x: f64) -> f64:
        return 2.0 * x

    @mlir_kernel(source=BLOCK.replace("return %s", "%w = call @weight(%s) : (f64) -> f64\n"
                                      "  return %w") + "func.func private @weight(f64) -> f64",
                 session=session, name="block_sum")
    def weighted(start: i64, n: i64) -> f64: ...

    rows: list[tuple[str, Any]] = [
        ("plain function of this module", importable.block_sum_py),
        ("importable kernel (by reference)", importable.block_sum),
        ("kernel made at run time (by value)", local_sum),
        ("... with a callback (cloudpickle)", weighted)]
    try:
        import numba
    except ImportError:
        print("  (numba is not installed: no numba rows)")
    else:
        def numba_local(start: int, n: int) -> float:
            s = 0.0
            for i in range(start, start + n):
                x = i * 1e-6
                s += (1.0 + x * x) ** 0.5
            return s

        # Not called: a dispatcher pickles the signatures it compiled, and a receiver
        # that rebuilds it compiles them on unpickling (pymlirjit's: on first call).
        rows += [("numba dispatcher of this module's function", numba.njit(
                     importable.block_sum_py)),
                 ("numba dispatcher made at run time", numba.njit(numba_local))]
    # Rounds of one sample of each, in turn (a burst of load hits every row alike).
    samples: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    rounds = 5 if quick else 9
    for _ in range(rounds):
        for label, obj in rows:
            for fresh in (False, True):
                samples.setdefault((label, fresh), []).append(_round_trip_us(
                    obj, max(number // 10, 20) if fresh else number, fresh))
    taken = {key: statistics.median(wall for wall, _ in values)
             for key, values in samples.items()}
    cpu = {key: min(cpu for _, cpu in values) for key, values in samples.items()}
    floor = taken[rows[0][0], False]
    print(f"pickle round trip, dumps + loads, medians of {rounds} rounds (target < 50 us; "
          f"a plain function: {floor:.1f} us); CPU: this process's CPU time, the least "
          f"of the rounds (other jobs disturb it less)")
    print(f"  {'':<44} {'receiver has it':>15} {'first in receiver':>18} {'CPU':>13}")
    for label, obj in rows:
        took, first = taken[label, False], taken[label, True]
        print(f"  {label:<44} {took:8.1f} us {took / floor:5.1f}x {first:9.1f} us "
              f"{first / floor:6.1f}x {cpu[label, False]:5.1f} / {cpu[label, True]:5.1f} us"
              f"  ({len(pickle.dumps(obj))} bytes)")


FRESH = """
import pickle, sys, time
data = sys.stdin.buffer.read()
start = time.perf_counter()
import pymlirjit
imported = time.perf_counter()
kernel = pickle.loads(data)
unpickled = time.perf_counter()
kernel(0, 10)
done = time.perf_counter()
info = kernel.session.cache_info()
print(f"{(imported - start) * 1e3:.1f} {(done - imported) * 1e3:.1f} {info.disk_hits} "
      f"{(unpickled - imported) * 1e6:.0f}")
"""


def first_call(quick: bool) -> None:
    print("first call in a fresh process (unpickle + compile or load + call; "
          "target < 50 ms with a warm disk cache; import of pymlirjit apart)")
    with tempfile.TemporaryDirectory() as folder:
        for label, cache_dir in [("no disk cache: compiles", None),
                                 ("warm disk cache: loads", Path(folder) / "cache")]:
            session = Session(cache_dir=cache_dir)

            @mlir_kernel(source=BLOCK, session=session, name="block_sum")
            def kernel(start: i64, n: i64) -> f64: ...

            kernel(0, 1)  # warms the disk cache, if any
            data = pickle.dumps(kernel)
            runs = []
            for _ in range(2 if quick else 5):
                done = subprocess.run([sys.executable, "-c", FRESH], input=data,
                                      capture_output=True, check=True)
                runs.append([float(v) for v in done.stdout.split()])
            imported = statistics.median(r[0] for r in runs)
            took = statistics.median(r[1] for r in runs)
            unpickle = statistics.median(r[3] for r in runs)
            print(f"  {label:<40} {took:8.1f} ms  (of which unpickling {unpickle:.0f} us; "
                  f"disk hits {int(runs[-1][2])}; import {imported:.0f} ms apart)")


def _chunks(total: int, count: int) -> list[tuple[int, int]]:
    size = total // count
    return [(i * size, size) for i in range(count)]


def _run_chunk(chunk: tuple[int, int]) -> float:
    import benchmarks.distributed as importable

    return float(importable.block_sum(*chunk))


def block_sum_sqrt(start: int, n: int) -> float:
    """The kernel's loop as numba compiles it (``math.sqrt``, as ``math.sqrt`` in MLIR):
    the baseline task of the chunked part, shipped as the kernel's is."""
    s = 0.0
    for i in range(start, start + n):
        x = i * 1e-6
        s += math.sqrt(1.0 + x * x)
    return s


@functools.cache
def _numba_block_sum() -> Callable[[int, int], float]:
    """:func:`block_sum_sqrt` compiled by numba, releasing the GIL as the kernel does
    (compiled once per process, on first use)."""
    import numba

    return numba.njit(nogil=True)(block_sum_sqrt)  # type: ignore[no-any-return]


def _run_chunk_numba(chunk: tuple[int, int]) -> float:
    import benchmarks.distributed as importable

    return float(importable._numba_block_sum()(*chunk))


def _noop_chunk(chunk: tuple[int, int]) -> float:
    """A task that does no work: what Dask alone costs for a computation of N tasks."""
    return 0.0


def _warm(delay: float = 0.0, kernel: Callable[[int, int], float] | None = None,
          numba: bool = False) -> int:
    """Compile in this worker (outside the timing), then stay busy ``delay`` seconds so
    that the other worker takes the next warming task; the worker's pid. ``kernel``:
    also compile that one (shipped by value, it stays in the worker: see
    :data:`pymlirjit.boundary.pickling.KEPT`); ``numba``: also the numba baseline."""
    _run_chunk((0, 1))
    if kernel is not None:
        kernel(0, 1)
    if numba:
        _run_chunk_numba((0, 1))
    time.sleep(delay)
    return os.getpid()


def _check(got: float, expected: float) -> None:
    assert abs(got - expected) <= 1e-9 * abs(expected), (got, expected)


def chunked(quick: bool, block_counts: list[int], elements: int = 10**8) -> None:
    import multiprocessing
    from contextlib import ExitStack

    import benchmarks.distributed as importable

    total = 10**6 if quick else elements
    repeat = 3 if quick else 7
    importable.block_sum(0, 1)
    try:
        importable._numba_block_sum()(0, 1)
    except ImportError:
        numba = False
    else:
        numba = True

    # The same kernel made at run time, in a session of its own: what a script or a
    # notebook ships (by value, with every task; the workers keep what they unpickled).
    @mlir_kernel(source=BLOCK, session=Session(), name="block_sum")
    def local_sum(start: i64, n: i64) -> f64: ...

    # Ways to run a list of blocks; each returns the sum of the blocks' sums.
    ways: dict[str, Callable[[list[tuple[int, int]]], float]] = {
        "one process": lambda chunks: sum(importable.block_sum(s, n) for s, n in chunks)}
    if numba:  # the baseline: the same loop compiled by numba, in one process
        ways["numba, one process"] = lambda chunks: sum(
            importable._numba_block_sum()(s, n) for s, n in chunks)
    with ExitStack() as stack:
        pool = stack.enter_context(ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn")))
        for _ in range(10):  # start both workers and compile in each, outside the timing
            if len(set(pool.map(importable._warm, [0.2, 0.2], [local_sum] * 2))) == 2:
                break
        ways["pool"] = lambda chunks: sum(pool.map(importable._run_chunk, chunks))
        ways["pool, by value"] = lambda chunks: sum(pool.map(
            local_sum, *zip(*chunks)))
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            client = None
        else:
            # What a Dask user starts for CPU-bound code that releases the GIL, on 2
            # cores: 2 worker processes of one thread each, the scheduler in this
            # (the client's) process; Dask's defaults otherwise.
            cluster = stack.enter_context(LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None))
            client = stack.enter_context(Client(cluster))
            client.run(importable._warm, 0.0, local_sum, numba)  # on every worker
            ways["Dask"] = lambda chunks: sum(client.gather(client.map(
                importable._run_chunk, chunks, pure=False)))
            ways["Dask, by value"] = lambda chunks: sum(client.gather(client.map(
                local_sum, *zip(*chunks), pure=False)))
            if numba:  # Dask's ceiling for this computation: no pymlirjit in the tasks
                ways["Dask, numba"] = lambda chunks: sum(client.gather(client.map(
                    importable._run_chunk_numba, chunks, pure=False)))
            ways["Dask, no-op"] = lambda chunks: sum(client.gather(client.map(
                importable._noop_chunk, chunks, pure=False)))
        # Rounds of one run of each way and block count, in turn: a burst of load
        # elsewhere slows the baseline as much as the others, and each round gives a ratio.
        splits = {count: _chunks(total, count) for count in block_counts}
        expected = {count: ways["one process"](chunks) for count, chunks in splits.items()}
        samples: dict[tuple[int, str], list[float]] = {}
        for _ in range(repeat):
            for count, chunks in splits.items():
                for label, run in ways.items():
                    start = time.perf_counter()
                    got = run(chunks)
                    samples.setdefault((count, label), []).append(
                        time.perf_counter() - start)
                    if label != "Dask, no-op":
                        _check(got, expected[count])
    print(f"chunked reduction over {total:.0e} elements in N equal blocks, "
          f"{os.cpu_count()} cpus shared with whatever else runs (medians of {repeat} "
          f"rounds; speedup: the median of each round's one-process time over the way's, "
          f"numba's over numba's; target >= 1.7x; load average {os.getloadavg()[0]:.1f} "
          f"at the end)")
    baseline = {label: "numba, one process" if "numba" in label else "one process"
                for label in ways}
    others = [label for label in ways if label not in (
        "one process", "numba, one process", "Dask, no-op")]
    print(f"  {'N':>3} {'block':>10} {'ms/block':>9} {'one process':>12} "
          + " ".join(f"{label:>15}" for label in others))
    for count in block_counts:
        ones = samples[count, "one process"]
        one = statistics.median(ones)
        cells = []
        for label in others:
            speedup = statistics.median(o / t for o, t in zip(
                samples[count, baseline[label]], samples[count, label]))
            cells.append(f"{speedup:14.2f}x")
        print(f"  {count:>3} {total // count:>10} {one / count * 1e3:9.1f} "
              f"{one * 1e3:9.1f} ms " + " ".join(cells))
    if client is None:
        print("  Dask: dask.distributed is not installed")
        return
    # A computation's fixed cost: its time beyond half its one-process time (a perfect
    # split on 2 workers), medians of the rounds; and the same tasks doing nothing.
    dasks = [label for label in ("Dask", "Dask, by value", "Dask, numba") if label in ways]
    print("  fixed cost of a Dask computation, ms (its time minus half the one-process "
          "time; numba's: of numba's)")
    print(f"  {'N':>3} " + " ".join(f"{label:>15}" for label in dasks)
          + f" {'no-op tasks':>12}" + (f" {'numba ms/block':>15}" if numba else ""))
    for count in block_counts:
        cells = []
        for label in dasks:
            beyond = statistics.median(t - o / 2 for o, t in zip(
                samples[count, baseline[label]], samples[count, label]))
            cells.append(f"{beyond * 1e3:12.1f} ms")
        noop = statistics.median(samples[count, "Dask, no-op"]) * 1e3
        line = f"  {count:>3} " + " ".join(cells) + f" {noop:9.1f} ms"
        if numba:
            per_block = statistics.median(samples[count, "numba, one process"]) / count
            line += f" {per_block * 1e3:15.1f}"
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--only", default="pickling,first-call,chunked",
                        help="comma-separated parts to run (default: all)")
    parser.add_argument("--blocks", default="4,8,16,32",
                        help="chunked: the block counts, comma-separated (the same elements "
                             "split in that many blocks; default: 4,8,16,32)")
    parser.add_argument("--elements", type=float, default=1e8,
                        help="chunked: how many elements in all (default: 1e8; more "
                             "elements spread a cluster's fixed cost per computation)")
    args = parser.parse_args(argv)
    if not args.elements >= 1:
        parser.error(f"--elements: {args.elements!r}: at least 1")
    try:
        block_counts = [int(count) for count in args.blocks.split(",")]
    except ValueError:
        parser.error(f"--blocks: {args.blocks!r} is not a comma-separated list of integers")
    if not block_counts or min(block_counts) < 1:
        parser.error(f"--blocks: {args.blocks!r}: block counts are at least 1")
    parts: dict[str, Callable[[bool], None]] = {
        "pickling": pickling, "first-call": first_call,
        "chunked": lambda quick: chunked(quick, block_counts, int(args.elements))}
    wanted = args.only.split(",")
    unknown = sorted(set(wanted) - set(parts))
    if unknown:
        parser.error(f"unknown parts {unknown}: choose among {sorted(parts)}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cpus, load average {load}, python "
          f"{sys.version.split()[0]}")
    for name in wanted:
        parts[name](args.quick)


if __name__ == "__main__":
    main()
