"""What ``pymlirjit run`` links: the ``@callback`` objects of ``--callbacks`` files or
modules, and the ``--shared-libs`` as absolute paths of loadable libraries."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .values import CLIError

__all__ = ["load_callbacks", "resolve_shared_libs"]


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
    from ..callbacks import Callback

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
    from ..lowering.pipeline import runtime_library

    paths = []
    for spec in specs:
        for name in filter(None, (part.strip() for part in spec.split(","))):
            try:
                path = runtime_library(name)
            except FileNotFoundError as exc:
                raise CLIError(str(exc)) from exc
            paths.append(_check_loadable(path, name))
    return paths
