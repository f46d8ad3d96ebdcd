"""e. Compile time: cold compiles (a fresh :class:`~pymlirjit.Session` each time) of a
tiny module and of a ~100-line module against the same work done with upstream's API
directly, where the time goes (native entry points apart), what the optimizing options
add, cache hits (in process, and from the disk cache in a new process) and the time
``import pymlirjit`` takes."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from pymlirjit import Session
from pymlirjit.codegen.options import CompileOptions
from pymlirjit.lowering.pipeline import DEFAULT_PIPELINE, SMALL_FLOAT_PASSES, normalize_pipeline
from pymlirjit.runtime import microkernelcache, microkernelstore
from pymlirjit.runtime.module import attach_native_entries, build_engine, engine_module
from pymlirjit.runtime.prepare import lower, prepare

from ._timing import (
    CaseResult,
    Config,
    Samples,
    Target,
    interleaved,
    per_call,
)

__all__ = ["LARGE", "LINALG", "NAIVE", "SMALL", "run"]

SMALL = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}
"""

#: About 100 lines: matmul, dot, axpy, a sum, a softmax and a clamp, with scf loops.
LARGE = """
func.func @matmul(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.dim %a, %c0 : memref<?x?xf32>
  %k = memref.dim %a, %c1 : memref<?x?xf32>
  %n = memref.dim %b, %c1 : memref<?x?xf32>
  scf.for %i = %c0 to %m step %c1 {
    scf.for %j = %c0 to %n step %c1 {
      %zero = arith.constant 0.0 : f32
      %acc = scf.for %p = %c0 to %k step %c1 iter_args(%s = %zero) -> f32 {
        %x = memref.load %a[%i, %p] : memref<?x?xf32>
        %y = memref.load %b[%p, %j] : memref<?x?xf32>
        %xy = arith.mulf %x, %y : f32
        %t = arith.addf %s, %xy : f32
        scf.yield %t : f32
      }
      memref.store %acc, %c[%i, %j] : memref<?x?xf32>
    }
  }
  return
}

func.func @dot(%a: memref<?xf64>, %b: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%s = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %b[%i] : memref<?xf64>
    %xy = arith.mulf %x, %y : f64
    %t = arith.addf %s, %xy : f64
    scf.yield %t : f64
  }
  return %r : f64
}

func.func @axpy(%alpha: f64, %x: memref<?xf64>, %y: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    %xi = memref.load %x[%i] : memref<?xf64>
    %yi = memref.load %y[%i] : memref<?xf64>
    %p = arith.mulf %alpha, %xi : f64
    %s = arith.addf %p, %yi : f64
    memref.store %s, %y[%i] : memref<?xf64>
  }
  return
}

func.func @softmax(%x: memref<?xf32>, %out: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %lowest = arith.constant -3.0e38 : f32
  %max = scf.for %i = %c0 to %n step %c1 iter_args(%m = %lowest) -> f32 {
    %v = memref.load %x[%i] : memref<?xf32>
    %g = arith.maximumf %m, %v : f32
    scf.yield %g : f32
  }
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%s = %zero) -> f32 {
    %v = memref.load %x[%i] : memref<?xf32>
    %d = arith.subf %v, %max : f32
    %e = math.exp %d : f32
    memref.store %e, %out[%i] : memref<?xf32>
    %t = arith.addf %s, %e : f32
    scf.yield %t : f32
  }
  scf.for %i = %c0 to %n step %c1 {
    %e = memref.load %out[%i] : memref<?xf32>
    %q = arith.divf %e, %sum : f32
    memref.store %q, %out[%i] : memref<?xf32>
  }
  return
}

func.func @clamp(%x: memref<?xf64>, %lo: f64, %hi: f64) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf64>
  %none = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %count = scf.for %i = %c0 to %n step %c1 iter_args(%k = %none) -> i64 {
    %v = memref.load %x[%i] : memref<?xf64>
    %a = arith.maximumf %v, %lo : f64
    %b = arith.minimumf %a, %hi : f64
    memref.store %b, %x[%i] : memref<?xf64>
    %changed = arith.cmpf one, %b, %v : f64
    %inc = arith.select %changed, %one, %none : i64
    %k2 = arith.addi %k, %inc : i64
    scf.yield %k2 : i64
  }
  return %count : i64
}
"""


#: One linalg.matmul on memrefs: what the default options give a microkernel.
LINALG = """
func.func @matmul(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

#: The cold compile's target: at most this times parse + passes + engine done directly.
TARGET_RATIO = 1.1

#: A linalg module's cold compile at the default options (microkernels and schedules):
#: at most this times its naive lowering (issue 28).
LINALG_TARGET_RATIO = 2.0

#: The naive lowering: the default pipeline's passes given as a pipeline of the user's
#: (run as written: no schedules), as they run on a module without small floats; at
#: LLVM's default level, so that only the schedules differ.
NAIVE = [p for p in DEFAULT_PIPELINE if p not in SMALL_FLOAT_PASSES]


def _pymlirjit_cold(source: str, first: bool = False, kept: str | None = None,
                    **options: Any) -> object:
    """A cold compile of ``source`` in a new session. ``first``: as the process's first
    module of its microkernels (those compiled for other modules are set aside
    meanwhile), with those an earlier process kept on disk in the folder ``kept``
    (``None``: none kept, as on a machine's first run)."""
    if first:
        with microkernelcache.set_aside(), microkernelstore.using(kept):
            module = Session(**options).compile(source)
    else:
        module = Session(**options).compile(source)
    assert module.functions
    return module


def _cold(compile_: Callable[[], object]) -> Samples:
    """ns for one ``compile_()`` (garbage collected first), what it made freed only once
    timed: a compile ends when the code can be called; freeing it is not counted."""
    gc.collect()
    start = time.perf_counter_ns()
    made = compile_()
    elapsed = time.perf_counter_ns() - start
    del made
    return Samples((float(elapsed),))


def _pymlirjit_stages(source: str) -> tuple[float, float]:
    """A cold compile's stages run one by one (as ``Session.compile`` runs them without
    a disk cache): ns for parse, preparation, passes, JIT engine and lookups, and ns for
    the native entry points (llvmlite) generated after them."""
    options = CompileOptions.make()
    gc.collect()
    start = time.perf_counter_ns()
    prepared = lower(prepare(source, options, lambda name: None), options)
    engine = build_engine(prepared, options)
    module = engine_module(engine, prepared, source, options)
    middle = time.perf_counter_ns()
    attach_native_entries(module)
    end = time.perf_counter_ns()
    assert all(f.native_entry is not None for f in module.functions.values())
    return float(middle - start), float(end - middle)


def _direct_cold(source: str) -> object:
    """What a cold compile wraps, with upstream's API called directly: parse, mark the
    functions for the C interface, run the same passes (pymlirjit's default pipeline as
    it runs on this module: see :func:`_passes_for`) in one pass
    manager, JIT with upstream's engine and look up every function. The
    context is made as pymlirjit makes its own (no thread pool), so that both run the
    passes alike."""
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine
    from mlir.passmanager import PassManager

    context = ir.Context()
    context.enable_multithreading(False)
    with context, ir.Location.unknown():
        module = ir.Module.parse(source)
        names = []
        for op in module.body.operations:
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            names.append(ir.StringAttr(op.attributes["sym_name"]).value)
        PassManager.parse(_passes_for(source)).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2)
        for name in names:
            assert engine.raw_lookup("_mlir_ciface_" + name)
    return engine, module, context


def _passes_for(source: str) -> str:
    """pymlirjit's default pipeline as it runs on ``source`` (which has no sparse
    tensors), decided from the text so that the baseline does not pay for printing the
    module as :func:`pymlirjit.lowering.pipeline.default_pipeline_for` does."""
    if re.search(r"\bf[468]E\d", source):
        return normalize_pipeline(DEFAULT_PIPELINE)
    return normalize_pipeline([p for p in DEFAULT_PIPELINE if p not in SMALL_FLOAT_PASSES])



_IMPORT = """
import sys, time
start = time.perf_counter()
for name in sys.argv[1:]:
    __import__(name)
print(time.perf_counter() - start)
"""


def _import_times(modules: Sequence[str], repeat: int) -> Samples:
    """ns to import ``modules`` in a fresh interpreter (its start not counted)."""
    values = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", _IMPORT, *modules],
                              capture_output=True, text=True, check=True)
        values.append(float(done.stdout) * 1e9)
    return Samples(tuple(values))


_NEW_PROCESS = """
import sys, time
from pymlirjit import Session
source = open(sys.argv[2]).read()
start = time.perf_counter()
Session(cache_dir=sys.argv[1]).compile(source)
print(time.perf_counter() - start)
"""


def _new_process_compiles(source: str, repeat: int) -> tuple[Samples, Samples]:
    """``session.compile`` timed inside fresh interpreters: with an empty disk cache, then
    with the entry the first one stored (interpreter start and imports not counted)."""
    cold: list[float] = []
    warm: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "module.mlir")
        with open(path, "w") as out:
            out.write(source)
        for i in range(repeat):
            cache = os.path.join(scratch, f"cache{i}")
            for into in (cold, warm):
                done = subprocess.run([sys.executable, "-c", _NEW_PROCESS, cache, path],
                                      capture_output=True, text=True, check=True)
                into.append(float(done.stdout) * 1e9)
    return Samples(tuple(cold)), Samples(tuple(warm))


def run(config: Config) -> CaseResult:
    """Measure cold compiles (pymlirjit, its stages, upstream directly), the optimizing
    options, cache hits and imports."""
    repeat = config.repeat
    lines = len(LARGE.strip().splitlines())
    result = CaseResult("e", "compile (ns per compile, opt level 2)")
    for key, source, label in (("small", SMALL, "4-line add"),
                               ("large", LARGE, f"{lines}-line, 5 functions")):
        _pymlirjit_cold(source)  # load what loads lazily, once, outside the timing
        _direct_cold(source)
        stages: list[tuple[float, float]] = []

        def staged(source: str = source, stages: list[tuple[float, float]] = stages,
                   ) -> Samples:
            stages.append(_pymlirjit_stages(source))
            return Samples((sum(stages[-1]),))

        ours, theirs, _ = interleaved(
            lambda source=source: _cold(lambda: _pymlirjit_cold(source)),
            lambda source=source: _cold(lambda: _direct_cold(source)),
            staged, repeat=config.pick(repeat, 1))
        direct = f"direct {key}"
        result.add(f"pymlirjit {key}", f"pymlirjit cold, fresh Session, {label}", ours, direct)
        result.add(direct, f"upstream directly: parse+passes+engine+lookup, {label}",
                   theirs, direct)
        result.add(f"stages {key}", "  pymlirjit stages without native entries",
                   Samples(tuple(s[0] for s in stages)), direct)
        result.add(f"entries {key}", "  pymlirjit native entries (llvmlite)",
                   Samples(tuple(s[1] for s in stages)), direct)
        ratio = result.ratio(f"pymlirjit {key}", direct)
        result.targets.append(Target(
            f"cold compile {key} <= {TARGET_RATIO}x upstream called directly",
            ratio <= TARGET_RATIO, f"{ratio:.2f}x; without native entries "
            f"{result.ratio(f'stages {key}', direct):.2f}x"))

    # What the optimizing options add to a cold compile, against the default options.
    optimized = (("large", LARGE, f"{lines}-line"), ("linalg", LINALG, "linalg.matmul"))
    kept = tempfile.TemporaryDirectory()  # the microkernels an earlier process kept
    for key, source, label in optimized[1:] if config.quick else optimized:
        variants: dict[str, dict[str, Any]] = {
            "naive": {"pipeline": NAIVE},
            "default": {}, "opt3": {"opt_level": 3}, "fastmath": {"fastmath": True},
            "opt3+fastmath": {"opt_level": 3, "fastmath": True},
            "first": {"first": True}, "first kept": {"first": True, "kept": kept.name}}
        for options in variants.values():
            _pymlirjit_cold(source, **options)
        measured = interleaved(
            *(lambda source=source, options=options: _cold(
                lambda: _pymlirjit_cold(source, **options))
              for options in variants.values()), repeat=config.pick(repeat, 1))
        base = f"{key} naive"
        for (name, options), samples in zip(variants.items(), measured):
            spelled = ", ".join(f"{k}={v}" for k, v in options.items()) or "default options"
            if name == "naive":
                spelled = "pipeline= the default passes (run as written: no schedules)"
            if name == "first":  # the microkernels other modules lowered are not reused
                spelled = ("default options, the process's first module of its matmuls, "
                           "none kept on disk (a machine's first run)")
            elif name == "first kept":
                spelled = ("default options, the process's first module of its matmuls, "
                           "their microkernels kept on disk by an earlier process")
            result.add(f"{key} {name}", f"pymlirjit cold, {spelled}, {label}", samples, base)
        for name in ("default", "opt3", "opt3+fastmath", "first", "first kept"):
            extra = result.ratio(f"{key} {name}", base)
            limit = (LINALG_TARGET_RATIO if key == "linalg" and name not in ("opt3",
                                                                            "opt3+fastmath")
                     else None)
            result.targets.append(Target(
                f"optimizing pipeline's cost, {name} vs naive lowering, {label}"
                + (f" <= {limit}x" if limit else ""),
                None if limit is None else extra <= limit, f"{extra:.2f}x"))
    kept.cleanup()

    session = Session()
    session.compile(LARGE)
    result.add("hit", f"pymlirjit cache hit, session.compile of the {lines}-line source",
               per_call(session.compile, (LARGE,), calls=config.pick(20_000, 500),
                        repeat=repeat), None)
    assert session.cache_info().hits > 0
    hit_us = result.median("hit") / 1e3
    result.targets.append(Target("in-process cache hit < 10 us", hit_us < 10,
                                 f"{hit_us:.1f} us"))

    cold, warm = _new_process_compiles(LARGE, repeat=max(2, repeat // 2))
    result.add("disk cold", f"new process, empty disk cache, {lines}-line", cold, "disk cold")
    result.add("disk warm", f"new process, warm disk cache, {lines}-line", warm, "disk cold")
    speedup = cold.median / warm.median
    result.targets.append(Target("warm start from the disk cache >= 10x faster than a cold "
                                 "compile (new processes)", speedup >= 10,
                                 f"{speedup:.1f}x"))

    imports = config.pick(max(3, repeat), 1)
    result.add("import", "import pymlirjit (new process, start not counted)",
               _import_times(["pymlirjit"], imports), "import")
    result.add("import mlir", "  import of the MLIR bindings alone (ir, execution_engine)",
               _import_times(["mlir.ir", "mlir.execution_engine"], imports), "import")
    result.add("import numpy", "  import numpy alone", _import_times(["numpy"], imports),
               "import")
    ms = result.median("import") / 1e6
    result.targets.append(Target("import pymlirjit, reported", None, f"{ms:.0f} ms"))
    return result
