"""``pymlirjit check FILE.py``: compile every kernel a Python file defines, for CI.

The file is imported as a module (not as ``__main__``: its ``if __name__ == "__main__"``
block does not run); every :class:`~pymlirjit.kernel.Kernel` it defines at module level
is compiled now, rather than on its first call, and so is every ``@jit`` function whose
parameters are all annotated with exact types. One line per kernel: ``ok`` or the
error, on the Python line where the MLIR (or the Python) went wrong
(``@mlir_kernel 'axpy' (model.py:42:17): use of undeclared SSA value name``).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .loading import _on_sys_path
from .values import CLIError

__all__ = ["add_check_parser", "check_command", "module_jit_functions", "module_kernels"]


def add_check_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's parser."""
    check = commands.add_parser(
        "check", parents=[common], help="compile every kernel of a Python file (for CI)",
        description="Import FILE.py and compile every @mlir_kernel it defines at module "
                    "level, and every @jit function whose parameters are annotated; print "
                    "one line per kernel and each error at its Python line. Exit code 1 if "
                    "any kernel fails.")
    check.add_argument("file", metavar="FILE.py", help="the Python file defining kernels")


def _import(path: Path) -> ModuleType:
    if not path.is_file():
        raise CLIError(f"no such file: {path}")
    name = "_pymlirjit_check_" + re.sub(r"\W", "_", path.stem)
    # Absolute: the kernels' locations stay right if the file changes directory.
    spec = importlib.util.spec_from_file_location(name, path.resolve())
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses and pickling look it up
    try:
        with _on_sys_path(str(path.resolve().parent)):
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    return module


def module_kernels(module: ModuleType) -> list[Any]:
    """The kernels ``module`` defines at module level (not those it imports), once each,
    in definition order."""
    from ..kernel import Kernel

    found: dict[int, Any] = {}
    for value in vars(module).values():
        if isinstance(value, Kernel) and id(value) not in found and (
                value.__wrapped__ is None or value.__module__ == module.__name__):
            found[id(value)] = value
    return list(found.values())


def module_jit_functions(module: ModuleType) -> list[Any]:
    """The ``@jit`` functions ``module`` defines at module level, once each, in
    definition order."""
    from ..jit import JitFunction

    found: dict[int, Any] = {}
    for value in vars(module).values():
        if isinstance(value, JitFunction) and id(value) not in found and (
                getattr(value.py_func, "__module__", None) == module.__name__):
            found[id(value)] = value
    return list(found.values())


def _jit_where(function: Any) -> str:
    from ..boundary.sourcelines import short_path

    code = function.py_func.__code__
    return f" ({short_path(code.co_filename)}:{code.co_firstlineno})"


def _check_jit(function: Any) -> bool | None:
    """Compile one @jit function and print its line: True if it compiled, False if it
    failed, None if its parameters leave types to the call."""
    label = f"@jit {function.__name__!r}{_jit_where(function)}"
    if not function.annotated:
        print(f"{label}: compiled per argument types at call time (annotate every "
              f"parameter, e.g. x: MemRef[f64, None], to check it here)", flush=True)
        return None
    try:
        function.compile()
    except Exception as error:
        text = str(error).replace("\n", "\n  ")
        print(f"{label}: {type(error).__name__}: {text}", flush=True)
        return False
    print(f"{label}: ok", flush=True)
    return True


def _where(kernel: Any) -> str:
    from ..boundary.sourcelines import short_path

    site = kernel.__dict__.get("_site")
    return "" if site is None else f" ({short_path(site.filename)}:{site.line})"


def _report(kernel: Any, error: Exception) -> list[str]:
    from ..errors import MLIRError

    if isinstance(error, MLIRError):
        return [error.summary.replace("\n", "\n  "),
                *("  " + str(d).replace("\n", "\n  ") for d in error.diagnostics[1:])]
    text = str(error)
    prefix = f"@mlir_kernel {kernel.name!r}: "
    text = text[len(prefix):] if text.startswith(prefix) else text
    return [f"@mlir_kernel {kernel.name!r}{_where(kernel)}: {type(error).__name__}: {text}"]


def _error_of_every_binding(kernel: Any) -> Exception | None:
    """The error any binding of a generic kernel fails with (an undefined SSA value, a
    syntax error), if there is one: its source, parsed with every alias bound to ``i32``
    and then to ``f64``, fails the same way both times (an error of one binding's types
    differs between them). It is then raised by compiling the ``f64`` binding, to be
    reported as any kernel's error. Nothing is compiled otherwise."""
    from ..errors import MLIRError
    from ..lowering.pipeline import new_context, parse_module

    found = []
    for t in ("i32", "f64"):
        try:
            parse_module(kernel.specialize(**dict.fromkeys(kernel.aliases, t)).mlir,
                         new_context())
        except MLIRError as error:
            found.append([(d.message, d.location) for d in error.diagnostics])
        else:
            return None
    if found[0] != found[1]:
        return None
    try:
        kernel.specialize(**dict.fromkeys(kernel.aliases, "f64")).compile()
    except Exception as error:
        return error
    return None  # pragma: no cover (parsing failed, compiling did not)


def check_command(args: argparse.Namespace) -> None:
    """``pymlirjit check``: compile each kernel of the file; fail if any does not."""
    path = Path(args.file)
    module = _import(path)
    kernels = module_kernels(module)
    jitted = [_check_jit(function) for function in module_jit_functions(module)]
    failed = jitted.count(False)
    generic = 0
    untyped = jitted.count(None)
    for kernel in kernels:
        aliases = getattr(kernel, "aliases", ())
        if aliases and not kernel.signatures:  # a generic kernel: nothing bound yet
            broken = _error_of_every_binding(kernel)
            if broken is not None:
                failed += 1
                print("\n".join(_report(kernel, broken)), flush=True)
                continue
            names = ", ".join(f"!{a}" for a in aliases)
            print(f"@mlir_kernel {kernel.name!r}{_where(kernel)}: generic over {names}: "
                  f"compiled per binding at call time (check one with "
                  f"kernel.specialize(...).compile())", flush=True)
            generic += 1
            continue
        try:
            kernel.compile()
        except Exception as error:
            failed += 1
            print("\n".join(_report(kernel, error)), flush=True)
        else:
            print(f"@mlir_kernel {kernel.name!r}{_where(kernel)}: ok", flush=True)
    total = len(kernels) + len(jitted)
    count = f"{total} kernel{'' if total == 1 else 's'}"
    if failed:
        raise CLIError(f"{path}: {failed} of {count} failed to compile")
    compiled = total - generic - untyped
    done = f"{compiled} kernel{'' if compiled == 1 else 's'} compiled"
    left = f", {generic} generic (bound at call time)" if generic else ""
    left += f", {untyped} @jit typed at call time" if untyped else ""
    print(f"{path}: {done}{left}" if total else
          f"{path}: no @mlir_kernel or @jit function defined at module level", flush=True)
