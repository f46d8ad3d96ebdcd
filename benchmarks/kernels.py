"""f. The kernel suite: saxpy, dot, matmul (scf loops and ``linalg.matmul``), batch
matmul, conv 2-D, softmax, a 5-point stencil, an axis reduction, exp and tanh, each
compiled by pymlirjit (default pipeline, serial), against numba ``@njit`` running the same
loops and numpy, in one run. Every path's result is checked against numpy's before it is
timed; a path that cannot be compiled, or computes something else, gets a row saying so
instead of a time. Rates are GFLOP/s against one core's FMA peak (compute-bound
kernels) or GB/s against the bandwidth of one core copying memory (the others)."""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pymlirjit import Session

from ._kernel_sources import MLIR, NUMBA, NUMPY, symbol
from ._peak import ComputePeak, compute_peak, copy_bandwidth
from ._timing import (
    CaseResult,
    Config,
    Samples,
    Target,
    interleaved,
    per_unit,
    settle_threads,
)

__all__ = ["run"]

#: What the Session accepts today: rows for an option not there yet say so.
_SESSION_OPTIONS = frozenset(inspect.signature(Session).parameters)


@dataclass(frozen=True)
class Spec:
    """One kernel at one size: its arguments (in the MLIR function's order), which of
    them are outputs (none: the result is the return value), and its work."""

    kernel: str
    title: str
    args: tuple[Any, ...]
    outputs: tuple[int, ...]
    flops: float
    nbytes: float
    compute_bound: bool
    dtype: str
    rtol: float
    fastmath: bool = False  # also measure fastmath=True (the targets name it)


@dataclass(frozen=True)
class Path:
    key: str
    label: str
    function: Callable[..., Any] | None  # None: not measured, ``why`` says why
    ref: str | None
    why: str = ""


def _specs(config: Config) -> list[Spec]:
    rng = np.random.default_rng(13)
    pick = config.pick

    def uniform(*shape: int, dtype: Any = np.float64, low: float = 0.0,
                high: float = 1.0) -> np.ndarray:
        return rng.uniform(low, high, shape).astype(dtype)

    n = pick(10_000_000, 1_001)
    m = pick(512, 17)
    b, bm = pick(32, 3), pick(128, 7)
    cn, cc, cf, ch = 1, pick(16, 2), pick(16, 3), pick(130, 11)
    sr, sc = pick(1000, 7), pick(1000, 13)
    st = pick(2000, 13)
    rr, rc = pick(2000, 9), pick(4000, 11)
    en = pick(1_000_000, 1_001)
    oh = ch - 2
    f32 = np.float32
    return [
        Spec("saxpy", f"saxpy f32 n={n:,}", (f32(2.0), uniform(n, dtype=f32),
             uniform(n, dtype=f32), np.zeros(n, f32)), (3,), 2 * n, 12 * n, False,
             "f32", 1e-6),
        Spec("dot", f"dot f64 n={n:,}", (uniform(n), uniform(n)), (), 2 * n, 16 * n, False,
             "f64", 1e-9, fastmath=True),
        Spec("matmul", f"matmul f32 {m}^3", (uniform(m, m, dtype=f32),
             uniform(m, m, dtype=f32), np.zeros((m, m), f32)), (2,), 2 * m**3,
             12 * m * m, True, "f32", 1e-4),
        Spec("batch_matmul", f"batch matmul f32 {b}x{bm}^3",
             (uniform(b, bm, bm, dtype=f32), uniform(b, bm, bm, dtype=f32),
              np.zeros((b, bm, bm), f32)), (2,), 2 * b * bm**3, 12 * b * bm * bm, True,
             "f32", 1e-4),
        Spec("conv2d", f"conv2d f32 {cc}->{cf}ch 3x3 {ch}^2",
             (uniform(cn, cc, ch, ch, dtype=f32), uniform(cf, cc, 3, 3, dtype=f32),
              np.zeros((cn, cf, oh, oh), f32)), (2,), 2 * cn * cf * cc * 9 * oh * oh,
             4 * (cn * cc * ch * ch + cf * cc * 9 + cn * cf * oh * oh), True, "f32", 1e-4),
        Spec("softmax", f"softmax f64 (rows) {sr}x{sc}",
             (rng.standard_normal((sr, sc)), np.zeros((sr, sc))), (1,), 5 * sr * sc,
             16 * sr * sc, False, "f64", 1e-12),
        Spec("stencil", f"stencil 5-pt f64 {st}^2", (uniform(st, st), np.zeros((st, st))),
             (1,), 5 * (st - 2) ** 2, 16 * st * st, False, "f64", 1e-12),
        Spec("colsum", f"axis-0 sum f64 {rr}x{rc}", (uniform(rr, rc), np.zeros(rc)),
             (1,), rr * rc, 8 * rr * rc, False, "f64", 1e-12),
        Spec("exp", f"exp f64 n={en:,}", (uniform(en, low=-5, high=5), np.zeros(en)), (1,),
             en, 16 * en, False, "f64", 1e-13, fastmath=True),
        Spec("tanh", f"tanh f64 n={en:,}", (uniform(en, low=-3, high=3), np.zeros(en)), (1,),
             en, 16 * en, False, "f64", 1e-13, fastmath=True),
    ]


def _bind(function: Callable[..., Any], spec: Spec,
          scalars: Callable[[Any], Any] = lambda x: x) -> tuple[Callable[[], Any],
                                                                Callable[[], Any]]:
    """(a no-argument call, what it computed): outputs are this path's own arrays."""
    args = [_placed_like(a) if i in spec.outputs else scalars(a)
            for i, a in enumerate(spec.args)]
    returned: list[Any] = [None]

    def call() -> Any:
        return function(*args)

    def output() -> Any:
        if spec.outputs:
            return args[spec.outputs[0]]
        returned[0] = function(*args)
        return returned[0]
    return call, output


#: Bytes of the address of an array that decide how its rows fall on cache lines and
#: whether its stores falsely depend on loads of another array (4K aliasing): a page.
_PLACEMENT = 4096


def _placed_like(array: np.ndarray) -> np.ndarray:
    """Zeros like ``array`` at the same address modulo a page. Each path gets its own
    output; allocated plainly, each would start wherever the allocator put it, and the
    same loops run up to a fifth slower with their output 16 bytes past a cache line
    (split vector stores) than on one: the rows would compare allocations, not code."""
    flat = np.zeros(array.nbytes + _PLACEMENT, np.uint8)
    skip = (array.ctypes.data - flat.ctypes.data) % _PLACEMENT
    placed = flat[skip:skip + array.nbytes].view(array.dtype).reshape(array.shape)
    assert (placed.ctypes.data - array.ctypes.data) % _PLACEMENT == 0
    return placed


def _pymlirjit(spec: Spec, variant: str, **options: Any) -> Callable[..., Any]:
    module = Session(**options).compile(MLIR[spec.kernel, variant])
    function: Callable[..., Any] = getattr(module, symbol(spec.kernel))
    return function


def _paths(spec: Spec) -> list[Path]:
    """pymlirjit's variants, numba, numpy; an option the package lacks is a 'not yet' row."""
    import numba

    paths = []
    variants = [v for (k, v) in MLIR if k == spec.kernel]
    names = {"scf": "scf", "linalg": {"conv2d": "linalg.conv_2d_nchw_fchw",
                                      "colsum": "linalg.generic reduction",
                                      "exp": "linalg.generic elementwise"}.get(
                                          spec.kernel, f"linalg.{spec.kernel}")}
    for variant in variants:
        key, label = f"pymlirjit {variant}", f"pymlirjit {names[variant]}"
        try:
            paths.append(Path(key, label, _pymlirjit(spec, variant), "numba"))
        except Exception as error:  # a kernel today's package cannot compile is a row
            paths.append(Path(key, label, None, None, _why(error)))
        # The default options tile and vectorize linalg (pymlirjit.codegen.optimize); O3
        # adds LLVM's level 3.
        if variant == "linalg" and spec.kernel in ("matmul", "batch_matmul", "conv2d"):
            key, label = "pymlirjit linalg O3", f"pymlirjit {names[variant]} O3"
            try:
                paths.append(Path(key, label, _pymlirjit(spec, variant, opt_level=3), "numba"))
            except Exception as error:
                paths.append(Path(key, label, None, None, _why(error)))
    if spec.fastmath:
        label = "pymlirjit scf fastmath=True"
        if "fastmath" in _SESSION_OPTIONS:
            try:
                paths.append(Path("pymlirjit fastmath", label,
                                  _pymlirjit(spec, "scf", fastmath=True), "numba fastmath"))
            except Exception as error:
                paths.append(Path("pymlirjit fastmath", label, None, None, _why(error)))
        else:
            paths.append(Path("pymlirjit fastmath", label, None, None,
                              "not yet: Session/mlir_kernel have no fastmath option"))
        paths.append(Path("numba fastmath", "numba @njit(fastmath=True)",
                          numba.njit(fastmath=True)(NUMBA[spec.kernel]), "numpy"))
    paths.append(Path("numba", "numba @njit", numba.njit(NUMBA[spec.kernel]),
                      "numpy"))
    paths.append(Path("numpy", "numpy", NUMPY[spec.kernel], None))
    return paths


def _why(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"not yet: {type(error).__name__}: {first[:90]}"


def _agrees(got: Any, expected: Any, rtol: float) -> str:
    """'' when ``got`` matches numpy's result, else what differs."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return f"wrong result: shape {got.shape}, numpy {expected.shape}"
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-300)
    error = float(np.max(np.abs(got - expected), initial=0.0)) / scale
    return "" if error <= rtol else f"wrong result: max error {error:.2e} of max |numpy|"


def _rate(spec: Spec, ns: float, peak: ComputePeak, bandwidth: float) -> str:
    if spec.compute_bound:
        gflops = spec.flops / ns
        fraction = gflops / (peak.f32 if spec.dtype == "f32" else peak.f64)
        return f"{gflops:7.2f} GFLOP/s {fraction:6.1%} of FMA peak"
    gbytes = spec.nbytes / ns
    return f"{gbytes:7.2f} GB/s    {gbytes / bandwidth:6.1%} of copy  "


def _measure(spec: Spec, config: Config, result: CaseResult, peak: ComputePeak,
             bandwidth: float, paths: list[Path] | None = None, tag: str = "",
             settle: bool = False) -> None:
    """Time ``paths`` (default: :func:`_paths`, the serial rows, in thread CPU time if
    ``config.cpu_time``) of ``spec``, keys ``"<kernel><tag> <path>"``; ``settle``: each
    repeat of a path first waits for the threads the previous path left spinning
    (:func:`settle_threads`)."""
    chosen = _paths(spec) if paths is None else paths
    numpy_call, numpy_output = _bind(NUMPY[spec.kernel], spec)
    numpy_call()
    expected = numpy_output()
    timed: list[tuple[Path, Callable[[], Any]]] = []
    broken: dict[str, str] = {}
    for path in chosen:
        if path.function is None:
            continue
        unbox = (lambda x: x.item() if isinstance(x, np.generic) else x) \
            if path.key.startswith("pymlirjit") else (lambda x: x)
        call, output = _bind(path.function, spec, unbox)
        try:
            call()
            wrong = _agrees(output(), expected, spec.rtol)
        except Exception as error:  # a crash in a compiled path is reported as its row
            wrong = _why(error).replace("not yet", "failed")
        if wrong:
            broken[path.key] = wrong
        else:
            timed.append((path, call))
    budget = config.pick(100_000_000, 1_000_000)  # ns of calls per repeat
    clock = time.thread_time if config.cpu_time and paths is None else time.perf_counter
    samplers = []
    for _, call in timed:
        start = time.perf_counter_ns()
        call()
        number = max(1, int(budget / max(1, time.perf_counter_ns() - start)))

        def sample(call: Callable[[], Any] = call, number: int = number) -> Samples:
            if settle:
                settle_threads()
            return per_unit(call, units=1, repeat=1, number=number, clock=clock)
        samplers.append(sample)
    measured = dict(zip((p.key for p, _ in timed),
                        interleaved(*samplers, repeat=config.repeat)))
    for path in chosen:
        key, label = f"{spec.kernel}{tag} {path.key}", f"{spec.title}: {path.label}"
        if path.key in measured:
            samples = measured[path.key]
            ref = f"{spec.kernel}{tag} {path.ref}" if path.ref else None
            result.add(key, label, samples, ref, _rate(spec, samples.median, peak, bandwidth))
        else:
            result.add(key, label, Samples(()), None, broken.get(path.key, path.why))
    if paths is None:
        _targets(spec, result)


def _ratio(result: CaseResult, key: str, ref: str) -> float | None:
    return result.ratio(key, ref) if result.has(key) and result.has(ref) else None


def _targets(spec: Spec, result: CaseResult) -> None:
    """The issue's targets that concern this kernel (a ratio missing is 'info')."""
    name = spec.kernel
    serial = _ratio(result, f"{name} pymlirjit scf", f"{name} numba")
    result.targets.append(Target(f"{spec.title}: pymlirjit scf <= 1.0x numba, same loops",
                                 None if serial is None else serial <= 1.0,
                                 "not measured" if serial is None else f"{serial:.2f}x"))
    if name in ("matmul", "batch_matmul"):
        blas = _ratio(result, f"{name} pymlirjit linalg", f"{name} numpy")
        result.targets.append(Target(
            f"{spec.title}: linalg.{name}, default options, within 1.1x numpy (1 BLAS "
            f"thread)", None if blas is None else blas <= 1.1,
            "not measured" if blas is None else f"{blas:.2f}x"))
    if spec.fastmath:
        fast = _ratio(result, f"{name} pymlirjit fastmath", f"{name} numpy")
        result.targets.append(Target(f"{spec.title}: pymlirjit fastmath=True within 1.2x "
                                     f"numpy", None if fast is None else fast <= 1.2,
                                     "not measured" if fast is None else f"{fast:.2f}x"))
    for variant in ("scf", "linalg", "linalg O3"):
        versus = _ratio(result, f"{name} pymlirjit {variant}", f"{name} numpy")
        if versus is not None:
            result.notes.append(f"{spec.title}: pymlirjit {variant} / numpy = {versus:.2f}x")


def run(config: Config) -> CaseResult:
    """Measure the kernel suite: pymlirjit, numba and numpy, serial, in one run."""
    result = CaseResult("f", "kernel suite, serial: pymlirjit (default pipeline) vs numba "
                             "@njit (same loops) vs numpy (ns per kernel call)")
    try:
        import numba  # noqa: F401
    except Exception as error:  # numba is optional (the `bench` extra)
        result.notes.append(f"numba unavailable ({type(error).__name__}): case f skipped")
        return result
    peak = compute_peak(config.pick(100_000_000, 1_000_000))
    bandwidth = copy_bandwidth(config.pick(128 << 20, 1 << 20), config.repeat)
    specs = _specs(config)
    for spec in specs:
        _measure(spec, config, result, peak, bandwidth)
    if "parallel" in _SESSION_OPTIONS:
        _measure_parallel(specs, config, result, peak, bandwidth)
    result.notes += [
        f"compute peak: {peak.how}",
        f"memory reference: {bandwidth:.1f} GB/s, best np.copyto of "
        f"{config.pick(128, 1)} MiB on one core (bytes read + written)",
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; numba "
        f"threading layer in the parallel rows only",
        "ratio column: pymlirjit vs numba @njit (same loops), numba vs numpy",
    ]
    if "parallel" not in _SESSION_OPTIONS:
        result.notes.append("parallel=True rows: not yet (Session/mlir_kernel have no "
                            "parallel option)")
    return result


# -- parallel=True rows: pymlirjit serial vs parallel, numba prange, numpy on 2 BLAS threads

#: The stencil with its row loop parallel (the same loops as the serial one otherwise).
_PARALLEL_STENCIL = MLIR["stencil", "scf"].replace(
    "scf.for %i = %c1 to %last_row step %c1 {",
    "scf.parallel (%i) = (%c1) to (%last_row) step (%c1) {", 1)


try:  # numba is optional (the `bench` extra); prange must be a global for numba to see it
    from numba import prange
except Exception:  # without numba, case f has no rows at all
    prange = range


def _nb_matmul_parallel(A: Any, B: Any, C: Any) -> None:
    m, k = A.shape
    n = B.shape[1]
    for i in prange(m):
        for j in range(n):
            C[i, j] = 0.0
        for p in range(k):
            a = A[i, p]
            for j in range(n):
                C[i, j] += a * B[p, j]


def _nb_stencil_parallel(u: Any, out: Any) -> None:
    rows, cols = u.shape
    for i in prange(1, rows - 1):
        for j in range(1, cols - 1):
            out[i, j] = (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]) * 0.25


def _blas_threads(threads: int, function: Callable[..., Any]) -> Callable[..., Any] | None:
    """``function`` run with ``threads`` OpenBLAS threads (numpy's), or None."""
    import ctypes
    import glob

    folder = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(folder, "*openblas*")):
        library = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            if hasattr(library, name):
                setter = getattr(library, name)

                def run(*args: Any, setter: Any = setter) -> Any:
                    setter(threads)
                    try:
                        return function(*args)
                    finally:
                        setter(1)
                return run
    return None


def _measure_parallel(specs: list[Spec], config: Config, result: CaseResult,
                      peak: ComputePeak, bandwidth: float) -> None:
    """matmul (linalg.matmul, default options: the microkernel) and the stencil, serial and
    parallel=True in the same run, with numba prange and numpy (2 BLAS threads); and
    the stencil on a small grid, where what a parallel call costs (handing a task to
    a worker, waiting for it) shows."""
    import numba

    threads = len(os.sched_getaffinity(0))
    by_name = {spec.kernel: spec for spec in specs}
    small = config.pick(256, 9)
    grid = np.random.default_rng(7).random((small, small))
    small_stencil = replace(by_name["stencil"],
                            title=f"stencil 5-pt f64 {small}^2 (a parallel call's cost)",
                            args=(grid, np.zeros_like(grid)), flops=5 * (small - 2) ** 2,
                            nbytes=16 * small * small)
    cases = [(" parallel", by_name["matmul"], MLIR["matmul", "linalg"],
              MLIR["matmul", "linalg"], 2, _nb_matmul_parallel),
             (" parallel", by_name["stencil"], MLIR["stencil", "scf"], _PARALLEL_STENCIL, 2,
              _nb_stencil_parallel),
             (" parallel small", small_stencil, MLIR["stencil", "scf"], _PARALLEL_STENCIL, 2,
              _nb_stencil_parallel)]
    session = Session()  # one compile per source and options (the small grid reuses them)
    made: dict[Any, Any] = {}  # and one numba dispatcher per function
    for tag, spec, serial_source, parallel_source, opt_level, nb_parallel in cases:
        name = spec.kernel
        paths = []
        for key, source, parallel in (("serial", serial_source, False),
                                      ("parallel", parallel_source, True)):
            label = f"pymlirjit opt_level={opt_level} " + (
                f"parallel=True ({threads} threads)" if parallel else "serial")
            try:
                module = session.compile(source, opt_level=opt_level, parallel=parallel)
                paths.append(Path(key, label, getattr(module, symbol(name)),
                                  "serial" if parallel else None))
            except Exception as error:
                paths.append(Path(key, label, None, None, _why(error)))
        for key, label, function, ref in (
                ("numba parallel", "numba @njit(parallel=True)", nb_parallel, "numba"),
                ("numba", "numba @njit", NUMBA[name], None)):
            if function not in made:
                made[function] = numba.njit(parallel=key == "numba parallel")(function)
            paths.append(Path(key, label, made[function], ref))
        blas = _blas_threads(2, NUMPY[name]) if name == "matmul" else None
        if blas is not None:
            paths.append(Path("numpy 2 threads", "numpy, 2 BLAS threads", blas, None))
        _measure(spec, config, result, peak, bandwidth, paths, tag, settle=True)
        speedup = _ratio(result, f"{name}{tag} serial", f"{name}{tag} parallel")
        if tag == " parallel small":  # no target: how close to the large grid's speedup
            theirs = _ratio(result, f"{name}{tag} numba", f"{name}{tag} numba parallel")
            result.targets.append(Target(
                f"{spec.title}: parallel=True speedup over serial (numba prange's)", None,
                "not measured" if speedup is None or theirs is None
                else f"{speedup:.2f}x ({theirs:.2f}x)"))
            continue
        result.targets.append(Target(
            f"{spec.title}: parallel=True >= 1.7x serial on {threads} cores",
            None if speedup is None else speedup >= 1.7,
            "not measured" if speedup is None else f"{speedup:.2f}x"))
        if blas is not None:
            versus = _ratio(result, f"{name}{tag} parallel", f"{name}{tag} numpy 2 threads")
            if versus is not None:
                result.notes.append(f"{spec.title}: pymlirjit parallel=True / numpy on 2 "
                                    f"BLAS threads = {versus:.2f}x")
