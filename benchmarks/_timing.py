"""Shared timing helpers: repeated measurements, medians, result tables, machine info.

Every benchmark measures pymlirjit and its baselines in the same process, several
repeats each, and reports the median nanoseconds per call. Ratios are computed against
a reference row measured in the same run, so they stay meaningful on a noisy machine.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HEADER",
    "CaseResult",
    "Config",
    "Row",
    "Samples",
    "Target",
    "format_case",
    "interleaved",
    "machine_info",
    "per_call",
    "per_run_cold",
    "per_unit",
]

#: The first line of every result table (the smoke test looks for it).
HEADER = f"{'case':<5} {'path':<62} {'median ns':>14} {'min ns':>14} {'ratio':>8}  vs"


@dataclass(frozen=True)
class Config:
    """How hard to measure: ``quick`` shrinks sizes and counts to a smoke test;
    ``cpu_time`` times case f's serial kernels in the calling thread's CPU time."""

    quick: bool = False
    repeat: int = 7
    #: Case f's serial rows in thread CPU time (``time.thread_time``): on a shared
    #: machine, time the scheduler gives other processes is then not counted (memory
    #: and cache contention still is); parallel rows stay wall clock.
    cpu_time: bool = False

    def pick(self, full: int, quick: int) -> int:
        """``full`` normally, ``quick`` under ``--quick``."""
        return quick if self.quick else full


@dataclass(frozen=True)
class Samples:
    """Nanoseconds per call, one value per repeat."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)


@dataclass(frozen=True)
class Row:
    """One measured path. ``key`` identifies it for ratios and targets; ``ref`` is the key
    of the row this one is compared with (``None``: no ratio)."""

    key: str
    label: str
    samples: Samples
    ref: str | None = None
    #: Printed after the ratio (e.g. a rate and a fraction of peak); a row with no
    #: samples (``Samples(())``) prints only this (e.g. "not yet: <reason>").
    extra: str = ""


@dataclass(frozen=True)
class Target:
    """A goal from design.md and whether this run met it (``None``: not checkable, e.g. a
    reference figure or a skipped baseline)."""

    text: str
    met: bool | None
    detail: str = ""


@dataclass
class CaseResult:
    """The rows, targets and notes of one benchmark case."""

    letter: str
    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, key: str, label: str, samples: Samples, ref: str | None = None,
            extra: str = "") -> Row:
        """Append a measured row and return it."""
        row = Row(key, label, samples, ref, extra)
        self.rows.append(row)
        return row

    def median(self, key: str) -> float:
        """The median of the row ``key``."""
        return self.row(key).samples.median

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"case {self.letter} has no row {key!r}")

    def has(self, key: str) -> bool:
        """Whether a row ``key`` exists and was measured."""
        return any(row.key == key and row.samples.values for row in self.rows)

    def ratio(self, key: str, ref: str) -> float:
        """median(key) / median(ref)."""
        return self.median(key) / self.median(ref)


def _repeat(timer: timeit.Timer, number: int, repeat: int) -> list[float]:
    timer.timeit(max(1, number // 10))  # warm up (caches, lazy compilation, branch predictors)
    return timer.repeat(repeat=repeat, number=number)


def per_call(function: Callable[..., Any], args: Sequence[Any], *, calls: int,
             repeat: int) -> Samples:
    """ns per call of ``function(*args)`` called ``calls`` times from a Python loop.

    The call is compiled as a direct call (``f(a0, a1)``, not ``f(*args)``), so the loop
    costs the same as a hand-written one; timeit turns the garbage collector off.
    """
    names = [f"a{i}" for i in range(len(args))]
    namespace: dict[str, Any] = {"f": function, **dict(zip(names, args))}
    timer = timeit.Timer(f"f({', '.join(names)})", globals=namespace)
    totals = _repeat(timer, calls, repeat)
    return Samples(tuple(t * 1e9 / calls for t in totals))


def per_unit(run: Callable[[], Any], *, units: int, repeat: int, number: int = 1,
             clock: Callable[[], float] = time.perf_counter) -> Samples:
    """ns per unit of work, where one ``run()`` does ``units`` units (e.g. a compiled loop
    making ``units`` callbacks); ``run`` is timed ``number`` times per repeat, by
    ``clock`` (seconds; wall clock unless given)."""
    timer = timeit.Timer(run, timer=clock)
    totals = _repeat(timer, number, repeat)
    return Samples(tuple(t * 1e9 / (number * units) for t in totals))


def per_run_cold(run: Callable[[], Any], *, repeat: int) -> Samples:
    """ns per ``run()`` with no warm-up, the garbage collector collected before each run
    (for cold compiles, where the first run is the point)."""
    values = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter_ns()
        run()
        values.append(float(time.perf_counter_ns() - start))
    return Samples(tuple(values))


def settle_threads(limit: float = 0.3) -> None:
    """Wait (up to ``limit`` seconds) until this process's other threads stop using CPU:
    a threaded library spins its workers for a while after a call (OpenBLAS's ~120 ms
    of a core after a 2-thread matmul, OpenMP's a few ms), which would slow whatever
    path is timed next by taking a core from it."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        process, thread = time.process_time(), time.thread_time()
        time.sleep(0.005)
        if (time.process_time() - process) - (time.thread_time() - thread) < 0.001:
            return


def interleaved(*samplers: Callable[[], Samples], repeat: int) -> list[Samples]:
    """Run samplers that each measure one repeat round-robin, ``repeat`` rounds, and
    return their samples in order: paths whose ratio matters see the same machine load,
    which a noisy shared machine otherwise skews by measuring one path after another."""
    values: list[list[float]] = [[] for _ in samplers]
    for _ in range(repeat):
        for collected, sampler in zip(values, samplers):
            collected.extend(sampler().values)
    return [Samples(tuple(v)) for v in values]


def _ns(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}"


def format_case(result: CaseResult) -> str:
    """The table of one case, followed by its targets and notes."""
    extras = max((len(row.extra) for row in result.rows), default=0)
    header = HEADER if not extras else HEADER.replace(
        "  vs", f"  {'rate, fraction of peak':<{extras}}  vs")
    lines = [f"{result.letter}. {result.title}", header, "-" * len(header)]
    for row in result.rows:
        if not row.samples.values:
            lines.append(f"{result.letter:<5} {row.label:<62} {'-':>14} {'-':>14} {'':>8}"
                         f"  {row.extra}")
            continue
        ratio, versus = "", ""
        extra = f"  {row.extra:<{extras}}" if extras else ""
        if row.ref is not None and result.has(row.ref):
            value = result.ratio(row.key, row.ref)
            ratio = f"{value:.2f}x" if value >= 0.1 else f"{value:.4f}x"
            versus = result.row(row.ref).label if row.ref != row.key else "(reference)"
        lines.append(f"{result.letter:<5} {row.label:<62} {_ns(row.samples.median):>14} "
                     f"{_ns(row.samples.min):>14} {ratio:>8}{extra}  {versus}")
    for target in result.targets:
        status = {True: "MET", False: "MISSED", None: "info"}[target.met]
        detail = f" ({target.detail})" if target.detail else ""
        lines.append(f"  target {result.letter}: {target.text}: {status}{detail}")
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str, distribution: str | None = None) -> str:
    from importlib import metadata

    try:
        if distribution is not None:
            return metadata.version(distribution)
        imported = __import__(module)
        return str(getattr(imported, "__version__", None) or metadata.version(module))
    except Exception as error:  # a missing optional baseline is reported, not fatal
        return f"not available ({type(error).__name__})"


def _git_state() -> str:
    """`` (git <commit>[, uncommitted changes])`` of the pymlirjit checkout measured, if any."""
    import subprocess

    import pymlirjit

    folder = os.path.dirname(os.path.dirname(os.path.abspath(pymlirjit.__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder,
                                capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pymlirjit"],
                               cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    changes = ", with uncommitted changes to pymlirjit/" if dirty.stdout.strip() else ""
    return f" (git {commit.stdout.strip()}{changes})"


def machine_info() -> str:
    """CPU, cores and the versions of everything measured."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    lines = [
        f"machine:   {_cpu_model()}, {os.cpu_count()} logical cores"
        + (f" ({usable} usable)" if usable is not None else "")
        + f", {platform.system()} {platform.machine()}",
        f"python:    {platform.python_version()} ({platform.python_implementation()})",
        f"numpy:     {_version('numpy')}",
        f"pymlirjit: {_version('pymlirjit')}{_git_state()}",
        f"mlir:      xtc-mlir-python-bindings {_version('mlir', 'xtc-mlir-python-bindings')}",
        f"llvmlite:  {_version('llvmlite')}",
        f"numba:     {_version('numba')}",
    ]
    return "\n".join(lines)
