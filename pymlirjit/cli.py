"""The ``pymlirjit`` command line: like ``mlir-runner``, with externs written in Python.

``pymlirjit run FILE.mlir [ARG ...]``
    JIT-compiles the file and calls its entry function (``--entry``, default ``main``)
    with arguments parsed by the entry's MLIR signature (scalars from text, memrefs and
    tensors from ``.npy`` files), then prints its results. ``--callbacks`` imports a
    ``.py`` file or a module and links every ``@callback`` it defines; ``--shared-libs``
    links runtime libraries such as ``libmlir_c_runner_utils.so``.
``pymlirjit lower FILE.mlir``
    prints the module lowered to the LLVM dialect (what ``mlir-runner`` accepts).
``pymlirjit cache [--clear]``
    shows (or empties) the disk cache that ``run --cache`` uses.
``pymlirjit demo``, ``pymlirjit --version``.

Every failure ends the command with exit code 1 and one line on stderr,
``pymlirjit: error: <message>``; ``--traceback`` adds the Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import importlib.util
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from . import ffi

__all__ = ["CLIError", "build_parser", "error_message", "format_result", "main",
           "parse_argument", "parse_args"]

_PROG = "pymlirjit"


class CLIError(Exception):
    """A failure the command line reports as its one-line error message."""


# -- the parser ---------------------------------------------------------------------------

def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from ._version import __version__

    parts = [f"pymlirjit {__version__}"]
    for package in ("xtc-mlir-python-bindings", "llvmlite", "numpy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true",
                        help="on error, also print the Python traceback")
    return common


def _add_run_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser(
        "run", parents=[common], help="JIT-compile an MLIR file and call its entry function",
        description="JIT-compile FILE.mlir, call its entry function with ARGs parsed by its "
                    "MLIR signature (numbers and true/false for scalars, .npy files for "
                    "memrefs and tensors) and print the results.")
    run.add_argument("file", metavar="FILE.mlir", help="the MLIR module to run")
    run.add_argument("args", nargs="*", metavar="ARG", help="arguments of the entry function")
    run.add_argument("-e", "--entry", default="main", metavar="NAME",
                     help="the function to call (default: main)")
    run.add_argument("--callbacks", action="append", default=[], metavar="PATH_OR_MODULE",
                     help="a .py file or module whose @callback functions are linked "
                          "(repeatable)")
    run.add_argument("--shared-libs", action="append", default=[], metavar="LIB",
                     help="a shared library to link: a path or an MLIR runtime library name "
                          "such as libmlir_c_runner_utils.so (repeatable, or comma-separated)")
    run.add_argument("--pipeline", metavar="STR",
                     help="the pass pipeline lowering to the LLVM dialect (default: "
                          "pymlirjit's)")
    run.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2,
                     metavar="N", help="LLVM optimization level, 0 to 3 (default: 2)")
    run.add_argument("-o", "--output", action="append", default=[], metavar="FILE.npy",
                     help="save the array result (repeat for several array results)")
    run.add_argument("--time", action="store_true",
                     help="report compile (parse+lower+JIT) and run times on stderr")
    run.add_argument("--cache", action="store_true",
                     help="keep the machine code in the disk cache ($PYMLIRJIT_CACHE_DIR, "
                          "else ~/.cache/pymlirjit): later runs of an unchanged file load "
                          "it instead of compiling")


def _add_lower_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    lower = commands.add_parser(
        "lower", parents=[common], help="print an MLIR file lowered to the LLVM dialect",
        description="Print FILE.mlir after the pass pipeline, in the LLVM dialect "
                    "(the input mlir-runner and mlir-translate expect).")
    lower.add_argument("file", metavar="FILE.mlir", help="the MLIR module to lower")
    lower.add_argument("--pipeline", metavar="STR",
                       help="the pass pipeline (default: pymlirjit's)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pymlirjit`` command."""
    parser = argparse.ArgumentParser(  # raw text: argparse would wrap the --version line
        prog=_PROG, description="Run MLIR from Python and call Python from MLIR.",
        formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--version", action="version", version=_versions())
    commands = parser.add_subparsers(dest="command", required=True)
    common = _common_options()
    _add_run_parser(commands, common)
    _add_lower_parser(commands, common)
    commands.add_parser("demo", parents=[common],
                        help="run the callback round trip (MLIR calling Python)")
    cache = commands.add_parser(
        "cache", parents=[common], help="show (or --clear) the disk cache of `run --cache`",
        description="Show the disk cache that `pymlirjit run --cache` and "
                    "mlir_kernel(cache=True) use ($PYMLIRJIT_CACHE_DIR, else "
                    "~/.cache/pymlirjit): its folder, modules and size.")
    cache.add_argument("--clear", action="store_true",
                       help="delete the cached modules (only files the cache wrote)")
    return parser


def _looks_like_number(text: str) -> bool:
    for parse in (complex, lambda s: int(s, 0)):
        try:
            parse(text)
        except ValueError:
            continue
        return True
    return False


def _claim_leftover_arguments(args: argparse.Namespace, leftovers: Sequence[str]) -> list[str]:
    """Append to ``args.args`` the ARGs argparse left over: those after an option or
    after ``--``, and negative numbers such as ``-1e5``. Return the unknown options."""
    unknown: list[str] = []
    after_dashes = False
    for item in leftovers:
        if item == "--" and not after_dashes:
            after_dashes = True
        elif after_dashes or not item.startswith("-") or _looks_like_number(item):
            args.args.append(item)
        else:
            unknown.append(item)
    return unknown


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``run`` takes its ARGs before, between or after options."""
    parser = build_parser()
    args, leftovers = parser.parse_known_args(argv)
    if args.command == "run":
        leftovers = _claim_leftover_arguments(args, leftovers)
    if leftovers:
        parser.error(f"unrecognized arguments: {' '.join(leftovers)}")
    return args


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
    from .errors import MLIRError, PyMLIRJitError

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
            print(f"{_PROG}: {text}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def phase(self, starting: str, done: str) -> Iterator[list[str]]:
        """Report ``starting...`` now and ``done: <ms>`` when the block ends (the block
        may replace ``done``: it gets ``[done]``)."""
        self._say(f"{starting}...")
        start = time.perf_counter()
        label = [done]
        yield label
        self._say(f"{label[0]}: {(time.perf_counter() - start) * 1e3:.3f} ms")


# -- loading callbacks and libraries -----------------------------------------------------

@contextlib.contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    """Put ``folder`` first on ``sys.path`` while importing (as ``python FILE`` does)."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _import_path(path: Path) -> ModuleType:
    if not path.is_file():
        raise CLIError(f"cannot import callbacks: no such file: {path}")
    name = "_pymlirjit_callbacks_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot import callbacks from {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _on_sys_path(str(path.resolve().parent)):
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(f"cannot import callbacks from {path}: "
                       f"{type(exc).__name__}: {exc}") from exc
    return module


def _import_name(name: str) -> ModuleType:
    try:
        with _on_sys_path(os.getcwd()):
            return importlib.import_module(name)
    except Exception as exc:
        raise CLIError(f"cannot import callbacks module {name!r}: "
                       f"{type(exc).__name__}: {exc}") from exc


def load_callbacks(specs: Sequence[str]) -> list[Any]:
    """Import each ``.py`` path or module name; return the ``@callback`` objects they
    define (a later definition of a name replaces an earlier one)."""
    from .callbacks import Callback

    found: dict[str, Callback] = {}
    for spec in specs:
        is_path = spec.endswith(".py") or os.sep in spec
        module = _import_path(Path(spec)) if is_path else _import_name(spec)
        for value in vars(module).values():
            if isinstance(value, Callback):
                found[value.name] = value
    return list(found.values())


def _check_loadable(path: str, given: str) -> str:
    """``path`` (absolute; ``given`` on the command line) if it is a shared library this
    process can load. (The engine's own loader aborts the process on a file that is not
    one.)"""
    if not os.path.isfile(path):
        raise CLIError(f"no such shared library: {given}")
    try:
        ctypes.CDLL(path)
    except OSError as exc:
        raise CLIError(f"cannot load shared library {given}: {exc}") from exc
    return path


def resolve_shared_libs(specs: Sequence[str]) -> list[str]:
    """Absolute paths of the ``--shared-libs`` given (each a path containing ``/``, an
    MLIR runtime library name, or a comma-separated list of those). A bare name is
    looked up only among MLIR's runtime libraries, never in the current folder."""
    from .pipeline import runtime_library

    paths = []
    for spec in specs:
        for name in filter(None, (part.strip() for part in spec.split(","))):
            try:
                path = runtime_library(name)
            except FileNotFoundError as exc:
                raise CLIError(str(exc)) from exc
            paths.append(_check_loadable(path, name))
    return paths


# -- arguments and results ------------------------------------------------------------------

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _parse_number(text: str, scalar: Any) -> Any:
    kind = scalar.kind
    if kind == "bool":
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(text)
    if kind == "int":
        try:
            return int(text, 0)  # also 0x1f, 0b101
        except ValueError:
            return int(text)  # leading zeros: "007"
    if kind == "float":
        return float(text)
    return complex(text.replace(" ", ""))


def _load_array(text: str, what: str) -> Any:
    import numpy as np

    try:
        return np.load(text, allow_pickle=False)
    except OSError as exc:
        raise CLIError(f"{what}: cannot read array file {text}: "
                       f"{exc.strerror or exc}") from exc
    except ValueError as exc:
        detail = "" if "pickle" in str(exc) else f": {exc}"
        raise CLIError(f"{what}: {text} is not a .npy file of numbers{detail}") from exc


def parse_argument(text: str, param: Any, position: int) -> Any:
    """The value of command-line argument ``text`` for ``param`` (a signature
    :class:`~pymlirjit.Parameter`; ``position`` counts from 1): a Python scalar for a
    scalar type, the array loaded from a ``.npy`` file for a memref or tensor."""
    from .types import ScalarType, to_python_scalar

    what = f"argument {position} ({param.type.mlir})"
    if not isinstance(param.type, ScalarType):
        return _load_array(text, what)
    try:
        value = _parse_number(text, param.type)
    except ValueError:
        raise CLIError(f"{what}: cannot parse {text!r} as {param.type.mlir}") from None
    try:
        return to_python_scalar(param.type, value, what)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from exc


def parse_arguments(texts: Sequence[str], function: Any) -> list[Any]:
    """The Python values of ``texts`` for the compiled ``function``'s parameters."""
    params = function.signature.params
    if len(texts) != len(params):
        expected = ", ".join(p.type.mlir for p in params) or "none"
        raise CLIError(f"@{function.name} takes {len(params)} argument"
                       f"{'' if len(params) == 1 else 's'} ({expected}), got {len(texts)}")
    return [parse_argument(text, param, i)
            for i, (text, param) in enumerate(zip(texts, params), start=1)]


def format_result(value: Any, mlir_type: Any = None) -> str:
    """How the command prints one result: numpy's printing for arrays, plain ``repr``
    for scalars (f32/f16 and complex<f32> at their own precision)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return str(value)
    narrow = {"f32": np.float32, "f16": np.float16, "complex<f32>": np.complex64}
    to_numpy = narrow.get(getattr(mlir_type, "mlir", ""))
    if to_numpy is not None:
        return str(to_numpy(value))
    return repr(value)


def _results(value: Any, count: int) -> tuple[Any, ...]:
    if count == 0:
        return ()
    return value if count > 1 else (value,)


def _check_outputs(paths: Sequence[str], function: Any) -> None:
    """Before running: fail if ``--output`` names more files than there are array results."""
    from .types import ScalarType

    arrays = sum(not isinstance(t, ScalarType) for t in function.signature.results)
    if len(paths) > arrays:
        raise CLIError(f"--output given {len(paths)} time{'s' if len(paths) > 1 else ''}, "
                       f"but @{function.name} returns {arrays} array"
                       f"{'' if arrays == 1 else 's'}")


def _save_outputs(paths: Sequence[str], results: Sequence[Any]) -> None:
    import numpy as np

    arrays = [r for r in results if isinstance(r, np.ndarray)]
    for path, array in zip(paths, arrays):
        np.save(path, array)


# -- the commands ---------------------------------------------------------------------------

def _require_file(name: str) -> Path:
    path = Path(name)
    if not path.is_file():
        raise CLIError(f"no such file: {name}")
    return path


def _entry_function(module: Any, entry: str, filename: str) -> Any:
    function = module.functions.get(entry)
    if function is None:
        names = ", ".join("@" + n for n in sorted(module.functions)) or "none"
        raise CLIError(f"{filename} defines no public function @{entry} (--entry); "
                       f"it has: {names}")
    return function


def _compile(args: argparse.Namespace, path: Path, callbacks: Sequence[Any],
             ) -> tuple[Any, bool]:
    """The compiled module, and whether it was loaded from the disk cache."""
    from .cache import default_cache_dir
    from .errors import LinkError
    from .session import Session

    shared_libs = resolve_shared_libs(args.shared_libs)
    session = Session(cache_dir=default_cache_dir() if args.cache else None)
    try:
        module = session.compile(path, pipeline=args.pipeline, opt_level=args.opt_level,
                                 shared_libs=shared_libs, callbacks=callbacks)
        return module, session.disk_cache is not None and session.disk_cache.hits > 0
    except LinkError as exc:
        if not exc.missing:
            raise
        names = ", ".join("@" + n for n in exc.missing)
        it = "them" if len(exc.missing) > 1 else "it"
        raise CLIError(f"{path}: nothing defines {names}: define {it} with @callback in a "
                       f"--callbacks file, or pass the --shared-libs that defines {it}") from exc


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
    values = parse_arguments(args.args, function)
    _check_outputs(args.output, function)
    _flush_stdout()
    try:
        with clock.phase(f"running @{function.name}", "run"):
            value = function(*values)
    finally:
        _flush_stdout()
    result_types = function.signature.results
    results = _results(value, len(result_types))
    _save_outputs(args.output, results)
    for result, mlir_type in zip(results, result_types):
        print(format_result(result, mlir_type))


def lower_command(args: argparse.Namespace) -> None:
    """``pymlirjit lower``: print the module after the pipeline, in the LLVM dialect."""
    from .pipeline import lower, new_context, parse_module

    path = _require_file(args.file)
    text = path.read_text()
    module = parse_module(text, new_context(), str(path))
    print(lower(module, args.pipeline, str(path)))


def demo_command(args: argparse.Namespace) -> None:
    """``pymlirjit demo``: the callback round trip."""
    from .demo import run_demo

    run_demo()


def cache_command(args: argparse.Namespace) -> None:
    """``pymlirjit cache``: the default disk cache's folder, modules and size."""
    from .cache import DiskCache, default_cache_dir

    cache = DiskCache(default_cache_dir())
    count, size = cache.entries(), cache.size_bytes()
    modules = f"{count} module{'' if count == 1 else 's'} ({size / 1024:.1f} KiB)"
    if args.clear:
        refused = cache.clearable()
        if refused is not None:
            raise CLIError(f"{cache.directory}: nothing removed: {refused.detail}")
        cache.clear()  # this cache's entries only: never other files of the folder
        print(f"{cache.directory}: removed {modules}")
    else:
        print(f"{cache.directory}: {modules}")


_COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "run": run_command,
    "lower": lower_command,
    "demo": demo_command,
    "cache": cache_command,
}


def _fail(message: str, show_traceback: bool) -> int:
    _flush_stdout()
    if show_traceback:
        traceback.print_exc()
    print(f"{_PROG}: error: {message}", file=sys.stderr, flush=True)
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
