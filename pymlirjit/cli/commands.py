"""The ``pymlirjit`` command line: like ``mlir-runner``, with externs written in Python.

``pymlirjit run FILE.mlir [ARG ...]``
    JIT-compiles the file and calls its entry function (``--entry``, default ``main``)
    with arguments parsed by the entry's MLIR signature (scalars from text, memrefs and
    tensors from ``.npy`` files), then prints its results. ``--callbacks`` imports a
    ``.py`` file or a module and links every ``@callback`` it defines; ``--shared-libs``
    links runtime libraries such as ``libmlir_c_runner_utils.so``.
``pymlirjit lower FILE.mlir [--emit=mlir|llvm|asm]``
    prints the module lowered to the LLVM dialect (what ``mlir-runner`` accepts), or its
    optimized LLVM IR or host assembly.
``pymlirjit cache [--clear]``
    shows (or empties) the disk cache that ``run --cache`` uses.
``pymlirjit check FILE.py``
    imports the file and compiles every ``@mlir_kernel`` it defines at module level,
    printing each error at its Python line (for CI; exit code 1 if any fails).
``pymlirjit demo``, ``pymlirjit --version``.

Every failure ends the command with exit code 1 and one line on stderr,
``pymlirjit: error: <message>``; ``--traceback`` adds the Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..boundary import ffi
from ..boundary.sourcelines import read_mlir_file
from ..lowering.llvmoptions import set_llvm_options
from .arguments import PROG, parse_args
from .check import check_command
from .loading import load_callbacks, resolve_shared_libs
from .values import (
    CLIError,
    check_outputs,
    format_result,
    parse_arguments,
    save_outputs,
    split_results,
)

__all__ = ["CLIError", "error_message", "main"]


# -- reporting ------------------------------------------------------------------------------

_FILE_LOCATION = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)\)$')


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _location(location: str) -> str:
    """``loc("f.mlir":3:5)`` as ``f.mlir:3:5``; other locations as MLIR prints them."""
    match = _FILE_LOCATION.match(location)
    if match:
        return f"{match['file']}:{match['line']}:{match['col']}"
    return "" if location == "loc(unknown)" else location


def _mlir_error_message(error: Any) -> str:
    if not error.diagnostics:
        return str(error)
    first = error.diagnostics[0]
    where = _location(first.location)
    text = f"{where}: {first.message}" if where else f"{error.summary}: {first.message}"
    more = len(error.diagnostics) - 1
    if more:
        text += f" (+{more} more diagnostic{'s' if more > 1 else ''}; see --traceback)"
    return text


def error_message(error: BaseException) -> str:
    """The one-line message the command prints for ``error``."""
    from ..errors import MLIRError, PyMLIRJitError

    if isinstance(error, MLIRError):
        text = _mlir_error_message(error)
    elif isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.strerror}: {error.filename}"
    elif isinstance(error, (CLIError, PyMLIRJitError, OSError)):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    for note in getattr(error, "__notes__", ()):
        text += f" ({note})"
    return _one_line(text)


def _flush_stdout() -> None:
    """Flush Python's and C's stdout, so output of compiled code and of Python stays in order."""
    sys.stdout.flush()
    with contextlib.suppress(OSError, AttributeError):
        ffi.fflush(None)


class _Clock:
    """Times the phases of a command and, when enabled, reports them on stderr."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _say(self, text: str) -> None:
        if self.enabled:
            print(f"{PROG}: {text}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def phase(self, starting: str, done: str) -> Iterator[list[str]]:
        """Report ``starting...`` now and ``done: <ms>`` when the block ends (the block
        may replace ``done``: it gets ``[done]``)."""
        self._say(f"{starting}...")
        start = time.perf_counter()
        label = [done]
        yield label
        self._say(f"{label[0]}: {(time.perf_counter() - start) * 1e3:.3f} ms")


# -- the commands ---------------------------------------------------------------------------

def _require_file(name: str) -> Path:
    path = Path(name)
    if path.is_dir():
        raise CLIError(f"{name} is a folder, not a file")
    if not path.is_file():
        raise CLIError(f"no such file: {name}")
    return path


def _entry_function(module: Any, entry: str, filename: str) -> Any:
    function = module.functions.get(entry)
    if function is None and entry in module.uncallable:
        raise CLIError(f"{filename}: {module.uncallable[entry].reason}")
    if function is None:
        names = ", ".join("@" + n for n in sorted(module.functions)) or "none"
        raise CLIError(f"{filename} defines no public function @{entry} (--entry); "
                       f"it has: {names}")
    return function


def _check_entry_result(expected: str | None, function: Any, filename: str) -> None:
    """mlir-runner's ``-entry-point-result``: the entry has no parameters and returns
    nothing (``void``) or one scalar of the type named."""
    if expected is None:
        return
    signature = function.signature
    actual = " ".join(str(t) for t in signature.results) or "void"
    if signature.params or actual != expected:
        raise CLIError(f"{filename}: -entry-point-result={expected} expects @{function.name} "
                       f"to take nothing and return {expected}; it is {signature}")


def _compile(args: argparse.Namespace, path: Path, callbacks: Sequence[Any],
             ) -> tuple[Any, bool]:
    """The compiled module, and whether it was loaded from the disk cache."""
    from ..errors import LinkError
    from ..runtime.cache import default_cache_dir
    from ..runtime.module import runtime_library_hint
    from ..session import Session

    shared_libs = resolve_shared_libs(args.shared_libs)
    try:
        set_llvm_options(getattr(args, "llvm_options", ()))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    session = Session(cache_dir=default_cache_dir() if args.cache else None)
    try:
        module = session.compile(path, pipeline=args.pipeline, opt_level=args.opt_level,
                                 shared_libs=shared_libs, callbacks=callbacks,
                                 fastmath=args.fastmath, parallel=args.parallel,
                                 boundscheck=args.boundscheck,
                                 error_model=args.error_model)
        return module, session.disk_cache is not None and session.disk_cache.hits > 0
    except LinkError as exc:
        if not exc.missing:
            raise
        names = ", ".join("@" + n for n in exc.missing)
        it = "them" if len(exc.missing) > 1 else "it"
        hint = runtime_library_hint(exc.missing)
        raise CLIError(f"{path}: nothing defines {names}: define {it} with @callback in a "
                       f"--callbacks file, or pass the --shared-libs that defines "
                       f"{it}{hint}") from exc


def run_command(args: argparse.Namespace) -> None:
    """``pymlirjit run``: compile, parse the arguments, call the entry, print results."""
    path = _require_file(args.file)
    clock = _Clock(args.time)
    callbacks: list[Any] = []
    if args.callbacks:
        with clock.phase("importing callbacks", "callbacks"):
            callbacks = load_callbacks(args.callbacks)
    with clock.phase(f"compiling {path}", "compile (parse+lower+JIT)") as label:
        module, loaded = _compile(args, path, callbacks)
        if loaded:
            label[0] = "load from the disk cache"
    function = _entry_function(module, args.entry, str(path))
    _check_entry_result(args.entry_result, function, str(path))
    values = parse_arguments(args.args, function)
    check_outputs(args.output, function)
    _flush_stdout()
    try:
        with clock.phase(f"running @{function.name}", "run"):
            value = function(*values)
    finally:
        _flush_stdout()
    if args.dump_object_file:
        _dump_object_file(module, args.object_filename or f"{args.file}.o", str(path))
    result_types = function.signature.results
    results = split_results(value, len(result_types))
    save_outputs(args.output, results)
    from ..boundary.types import ScalarType

    runner_f32 = args.entry_result == "f32" or (
        # mlir-runner's default is -entry-point-result=f32: such an entry prints as there.
        args.entry_result is None and not function.signature.params
        and [str(t) for t in result_types] == ["f32"])
    saved = len(args.output)
    for result, mlir_type in zip(results, result_types):
        if args.quiet:
            break
        if saved and not isinstance(mlir_type, ScalarType):
            saved -= 1  # in its --output file: not printed as well
            continue
        if runner_f32:
            print(f"{result:e}")  # as mlir-runner (LLVM's raw_ostream) prints a float
        else:
            print(format_result(result, mlir_type))


def _dump_object_file(module: Any, filename: str, source: str) -> None:
    """mlir-runner's -dump-object-file: the object code MLIR's JIT generated."""
    dump = getattr(module.engine, "dump_to_object_file", None)
    if dump is None:  # loaded from the disk cache: no JIT engine made this code
        raise CLIError(f"{source}: -dump-object-file needs a module compiled in this run "
                       f"(not loaded by --cache)")
    Path(filename).write_bytes(b"")  # LLVM would only print that it cannot write there
    dump(filename)


def lower_command(args: argparse.Namespace) -> None:
    """``pymlirjit lower``: print the module after the pipeline, in the LLVM dialect,
    or (``--emit``) its optimized LLVM IR or host assembly."""
    from ..lowering.pipeline import lower, new_context, parse_module
    from ..runtime.llvmir import assembly, llvm_ir

    path = _require_file(args.file)
    text = read_mlir_file(path)
    lowered = str(lower(parse_module(text, new_context(), str(path)), args.pipeline,
                        str(path)))
    if args.emit == "llvm":
        lowered = llvm_ir(lowered, args.opt_level)
    elif args.emit == "asm":
        lowered = assembly(lowered, args.opt_level)
    print(lowered)


def demo_command(args: argparse.Namespace) -> None:
    """``pymlirjit demo``: the callback round trip."""
    from .demo import run_demo

    run_demo()


#: What ``pymlirjit cache --warm`` compiles: a matmul of each element type the
#: microkernels serve (every matmul of that type, on any layout they take, calls the same).
_WARM_MATMULS = "\n".join(f"""
func.func @matmul_{t}(%a: memref<?x?x{t}>, %b: memref<?x?x{t}>, %c: memref<?x?x{t}>) {{
  linalg.matmul ins(%a, %b : memref<?x?x{t}>, memref<?x?x{t}>) outs(%c : memref<?x?x{t}>)
  return
}}""" for t in ("f32", "f64"))


def cache_command(args: argparse.Namespace) -> None:
    """``pymlirjit cache``: the default disk cache's folder, modules and size, then the
    matmul microkernels kept on disk (unless ``$PYMLIRJIT_MICROKERNEL_CACHE`` is 0);
    ``--warm`` compiles those microkernels first."""
    from ..runtime import microkernelstore
    from ..runtime.cache import DiskCache, default_cache_dir

    if args.warm:
        _warm_microkernels()
        return

    stores = [(DiskCache(default_cache_dir()), "module")]
    microkernels = microkernelstore.store()
    if microkernels is not None:
        stores.append((microkernels, "microkernel"))
    for cache, noun in stores:
        count, size = cache.entries(), cache.size_bytes()
        held = f"{count} {noun}{'' if count == 1 else 's'} ({size / 1024:.1f} KiB)"
        if args.clear:
            refused = cache.clearable()
            # (A folder holding no entry has nothing to remove: the microkernels' store
            # makes the modules' folder, unmarked, as its parent.)
            if refused is not None and count:
                raise CLIError(f"{cache.directory}: nothing removed: {refused.detail}")
            if refused is None:
                cache.clear()  # this cache's entries only: never other files of the folder
            print(f"{cache.directory}: removed {held}")
        else:
            print(f"{cache.directory}: {held}")


def _warm_microkernels() -> None:
    """Compile the host's matmul microkernels into their store (at the opt levels that
    make them: 2 and 3), saying how many were compiled and how many were kept already."""
    from ..runtime import microkernelcache, microkernelstore
    from ..session import Session

    store = microkernelstore.store()
    if store is None:
        raise CLIError(f"${microkernelstore.VARIABLE} is 0: no microkernel is kept on disk")
    stores, hits = store.stores, store.hits
    with microkernelcache.set_aside():  # those of this process would not be looked for
        for opt_level in (2, 3):
            Session(opt_level=opt_level).compile(_WARM_MATMULS)
    if store.refused is not None:
        raise CLIError(f"{store.directory}: cannot keep microkernels: {store.refused.detail}")
    compiled, kept = store.stores - stores, store.hits - hits
    print(f"{store.directory}: {compiled} microkernel{'' if compiled == 1 else 's'} "
          f"compiled, {kept} kept already")


_COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "run": run_command,
    "lower": lower_command,
    "demo": demo_command,
    "cache": cache_command,
    "check": check_command,
}


def _fail(message: str, show_traceback: bool) -> int:
    _flush_stdout()
    if show_traceback:
        traceback.print_exc()
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pymlirjit`` command; returns the exit code (argparse exits
    with 2 itself on a usage error)."""
    args = parse_args(argv)
    try:
        _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        _fail("interrupted", args.traceback)
        return 130
    except BrokenPipeError:
        # The reader went away (`pymlirjit demo | head`): stop quietly, as cat does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as error:
        return _fail(error_message(error), args.traceback)
    return 0


if __name__ == "__main__":
    sys.exit(main())
