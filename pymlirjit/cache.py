"""The on-disk compile cache: machine code of compiled modules, reused across processes.

An entry holds the machine code of a module and what is needed to use it without MLIR:
the functions' signatures and C-ABI entry names, the callback symbols it calls, and
the lowered MLIR (for inspection). The code is one of two kinds:

- ``shared``: a shared library with the module's code, its native entry points and
  its callback trampolines (see :mod:`pymlirjit.sharedlib`). Loading it is a
  ``dlopen``: no MLIR, no LLVM, no code generation.
- ``object``: the object file MLIR's ExecutionEngine produced, where no shared library
  can be linked (no C compiler). llvmlite links it when loaded
  (:class:`ObjectEngine`), and the native entry points are generated again.

The key covers everything that changes the machine code or its meaning: the source,
pipeline, opt level and shared libraries, the signatures of the callbacks it may link,
the versions of pymlirjit, MLIR, llvmlite, Python and numpy, and the host CPU. Entries
are written atomically (temporary file, then rename) and checked by a SHA-256 of the
code before use: a corrupted or truncated entry is a miss, never a crash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .signature import Parameter, Signature
from .types import (
    SCALARS,
    MemRefType,
    ScalarType,
    TensorType,
    Type,
    UnrankedMemRefType,
)

__all__ = ["CachedModule", "DiskCache", "ObjectEngine", "default_cache_dir"]

SCALARS_BY_MLIR = {t.mlir: t for t in SCALARS}

_FORMAT = 2
_SUFFIXES = {"shared": ".so", "object": ".o"}


def default_cache_dir() -> Path:
    """``$PYMLIRJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pymlirjit`` (``~/.cache``)."""
    explicit = os.environ.get("PYMLIRJIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pymlirjit"


@functools.cache
def _environment() -> tuple[str, ...]:
    """What, besides the module, decides its machine code (read cheaply: a warm start
    must not pay for importlib.metadata or for loading LLVM)."""
    import llvmlite  # its version only; llvmlite.binding (LLVM itself) is not loaded
    import numpy as np

    from ._version import __version__

    return (f"format={_FORMAT}", f"pymlirjit={__version__}", f"mlir={_mlir_build()}",
            f"llvmlite={llvmlite.__version__}", f"python={sys.version}",
            f"numpy={np.__version__}", f"machine={platform.machine()}",
            f"cpu={_host_cpu()}")


def _mlir_build() -> str:
    """The installed MLIR bindings: their distribution's version (from its dist-info
    folder's name) and the size and time of their C API library."""
    import mlir._mlir_libs as libs

    folder = Path(libs.__file__).parent
    versions = sorted(p.name for p in folder.parent.parent.glob("xtc_mlir_python_bindings-*"))
    library = folder / "libMLIRPythonCAPI.so"
    try:
        stat = library.stat()
        identity = f"{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        identity = "unknown"
    return f"{','.join(versions)}|{identity}"


def _host_cpu() -> str:
    """The host CPU's model and features (what MLIR's engine generates code for)."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().split("\n\n", 1)[0].splitlines()
        fields = {k.strip(): v.strip() for k, v in
                  (line.split(":", 1) for line in lines if ":" in line)}
        model = fields.get("model name") or fields.get("CPU part", "")
        features = (fields.get("flags") or fields.get("Features") or "").split()
        if features:
            return f"{model}|{' '.join(sorted(features))}"
    except OSError:
        pass
    import llvmlite.binding as llvm  # elsewhere: ask LLVM

    return f"{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"


def encode_signature(signature: Signature) -> dict[str, Any]:
    """A JSON-ready description of ``signature`` (read back without MLIR)."""
    return {"params": [[p.name, _encode_type(p.type)] for p in signature.params],
            "results": [_encode_type(t) for t in signature.results]}


def decode_signature(data: dict[str, Any]) -> Signature:
    return Signature(tuple(Parameter(name, _decode_type(t)) for name, t in data["params"]),
                     tuple(_decode_type(t) for t in data["results"]))


def _encode_type(t: Type) -> Any:
    if isinstance(t, ScalarType):
        return t.mlir
    if isinstance(t, MemRefType):
        return {"memref": t.element.mlir, "shape": list(t.shape),
                "strides": None if t.strides is None else list(t.strides), "offset": t.offset}
    if isinstance(t, UnrankedMemRefType):
        return {"unranked": t.element.mlir}
    return {"tensor": t.element.mlir, "shape": list(t.shape)}


def _decode_type(data: Any) -> Type:
    if isinstance(data, str):
        return SCALARS_BY_MLIR[data]
    if "memref" in data:
        strides = data["strides"]
        return MemRefType(SCALARS_BY_MLIR[data["memref"]], tuple(data["shape"]),
                          None if strides is None else tuple(strides), data["offset"])
    if "unranked" in data:
        return UnrankedMemRefType(SCALARS_BY_MLIR[data["unranked"]])
    return TensorType(SCALARS_BY_MLIR[data["tensor"]], tuple(data["shape"]))


@dataclass(frozen=True)
class CachedModule:
    """A cache entry: the machine code and its description.

    ``kind`` is ``"shared"`` or ``"object"`` (see the module's documentation);
    ``slots`` and ``native_entries`` describe a shared library's native code (see
    :class:`pymlirjit.sharedlib.NativeCode`).
    """

    kind: str
    code: bytes
    functions: dict[str, tuple[Signature, str]]  # name -> (signature, entry symbol)
    callbacks: dict[str, str]  # runtime symbol -> callback name
    declared: tuple[str, ...]  # the module's private declarations
    needed: tuple[str, ...]  # external symbols the code calls
    shared_libs: tuple[str, ...]
    lowered_mlir: str
    slots: tuple[str, ...] = ()
    native_entries: dict[str, str] = field(default_factory=dict)  # function -> symbol


class DiskCache:
    """A directory of compiled modules; ``hits``, ``misses`` and ``stores`` count uses."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0
        self.stores = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<DiskCache {self.directory}: {self.hits} hits, {self.misses} misses>"

    @staticmethod
    def key(source: str, pipeline: str, opt_level: int, shared_libs: Iterable[str],
            callbacks: Iterable[tuple[str, str]]) -> str:
        """The entry name for a module; ``callbacks`` are (name, MLIR signature) pairs."""
        digest = hashlib.sha256()
        parts = [*_environment(), source, pipeline, str(opt_level), *shared_libs,
                 *(f"{name}:{signature}" for name, signature in sorted(callbacks))]
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def load(self, key: str) -> CachedModule | None:
        """The entry ``key``, or ``None`` if absent or unusable (corrupt, truncated)."""
        try:
            meta = json.loads((self.directory / f"{key}.json").read_text())
            if meta.get("format") != _FORMAT:
                raise ValueError("an entry of another format")
            code = (self.directory / f"{key}{_SUFFIXES[meta['kind']]}").read_bytes()
            if hashlib.sha256(code).hexdigest() != meta["sha256"]:
                raise ValueError("a corrupted entry")
            entry = CachedModule(
                meta["kind"], code,
                {name: (decode_signature(signature), entry)
                 for name, (signature, entry) in meta["functions"].items()},
                dict(meta["callbacks"]), tuple(meta["declared"]), tuple(meta["needed"]),
                tuple(meta["shared_libs"]), meta["lowered_mlir"], tuple(meta["slots"]),
                dict(meta["native_entries"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return entry

    def store(self, key: str, entry: CachedModule) -> None:
        """Write ``entry`` (its code, then its description)."""
        meta = {"format": _FORMAT, "kind": entry.kind,
                "sha256": hashlib.sha256(entry.code).hexdigest(),
                "functions": {name: [encode_signature(signature), symbol]
                              for name, (signature, symbol) in entry.functions.items()},
                "callbacks": entry.callbacks, "declared": list(entry.declared),
                "needed": list(entry.needed), "shared_libs": list(entry.shared_libs),
                "lowered_mlir": entry.lowered_mlir, "slots": list(entry.slots),
                "native_entries": entry.native_entries}
        self.directory.mkdir(parents=True, exist_ok=True)
        # The code first: a description never points at missing or partial code.
        _write_atomically(self.directory / f"{key}{_SUFFIXES[entry.kind]}", entry.code)
        _write_atomically(self.directory / f"{key}.json", json.dumps(meta).encode())
        with self._lock:
            self.stores += 1

    def clear(self) -> None:
        """Delete every entry."""
        for path in self._files():
            path.unlink(missing_ok=True)

    def entries(self) -> int:
        """How many modules the directory holds."""
        return sum(1 for path in self._files() if path.suffix == ".json")

    def size_bytes(self) -> int:
        """The bytes the entries take (descriptions and code)."""
        total = 0
        for path in self._files():
            try:
                total += path.stat().st_size
            except OSError:  # removed meanwhile
                continue
        return total

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return [path for path in self.directory.iterdir()
                if path.suffix in (".json", *_SUFFIXES.values())]


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_link_lock = threading.Lock()


class ObjectEngine:
    """Compiled code loaded from an object file with llvmlite, standing in for an
    ExecutionEngine: ``function_address(name)`` gives a function's C-ABI address.

    ``symbols`` maps the runtime symbols the object calls to native addresses (the
    callbacks); ``shared_libs`` are loaded so that their symbols resolve too. The
    callbacks passed in are kept alive with the engine.
    """

    def __init__(self, object_code: bytes, symbols: dict[str, Any],
                 shared_libs: Iterable[str] = (), needed: Iterable[str] = ()) -> None:
        import ctypes

        import llvmlite.binding as llvm

        from .engine import address_of
        from .errors import LinkError

        libraries = [ctypes.CDLL(library) for library in shared_libs]
        process = ctypes.CDLL(None)
        # LLVM aborts the process on a symbol it cannot resolve: check them all first.
        missing = [s for s in needed if s not in symbols and not hasattr(process, s)
                   and not any(hasattr(library, s) for library in libraries)]
        if missing:
            raise LinkError(f"the cached module needs undefined symbols: {missing}", missing)
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        for library in shared_libs:
            llvm.load_library_permanently(library)
        self._keepalive = dict(symbols)
        machine = llvm.Target.from_default_triple().create_target_machine()
        # llvmlite resolves undefined symbols through one process-wide table: set this
        # object's callbacks and link it before another object can change them.
        with _link_lock:
            for symbol, target in symbols.items():
                llvm.add_symbol(symbol, address_of(target))
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
            self._engine.finalize_object()

    def function_address(self, name: str) -> int:
        from .errors import LinkError

        address = int(self._engine.get_function_address(name))
        if not address:
            raise LinkError(f"Unknown function {name}: the cached module defines no such "
                            f"function", [name])
        return address
