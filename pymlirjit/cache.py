"""The on-disk compile cache: machine code of compiled modules, reused across processes.

An entry holds the object file MLIR's ExecutionEngine produced for a module, and what
is needed to use it without MLIR: the functions' signatures and C-ABI entry names, the
callback symbols it calls, and the lowered MLIR (for inspection). Loading an entry
skips parsing, lowering and LLVM code generation: llvmlite links the object in memory
and resolves its callbacks to the native entry points of this process's callbacks.

The key covers everything that changes the machine code or its meaning: the source,
pipeline, opt level and shared libraries, the signatures of the callbacks it may link,
the versions of pymlirjit, MLIR and llvmlite, and the host CPU. Entries are written
atomically (temporary file, then rename) and checked by a SHA-256 of the object before
use: a corrupted or truncated entry is a miss, never a crash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
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

_FORMAT = 1


def default_cache_dir() -> Path:
    """``$PYMLIRJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pymlirjit`` (``~/.cache``)."""
    explicit = os.environ.get("PYMLIRJIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pymlirjit"


@functools.cache
def _environment() -> tuple[str, ...]:
    from importlib.metadata import PackageNotFoundError, version

    import llvmlite
    import llvmlite.binding as llvm

    from . import __version__

    try:
        mlir_version = version("xtc-mlir-python-bindings")
    except PackageNotFoundError:  # pragma: no cover - another build of the bindings
        mlir_version = "unknown"
    return (f"format={_FORMAT}", f"pymlirjit={__version__}", f"mlir={mlir_version}",
            f"llvmlite={llvmlite.__version__}", f"cpu={llvm.get_host_cpu_name()}",
            f"features={llvm.get_host_cpu_features().flatten()}",
            f"triple={llvm.get_process_triple()}")


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
    """A loaded cache entry: the object file and its description."""

    object_path: Path
    functions: dict[str, tuple[Signature, str]]  # name -> (signature, entry symbol)
    callbacks: dict[str, str]  # runtime symbol -> callback name
    declared: tuple[str, ...]  # the module's private declarations
    needed: tuple[str, ...]  # external symbols the object calls
    shared_libs: tuple[str, ...]
    lowered_mlir: str


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
        meta_path = self.directory / f"{key}.json"
        object_path = self.directory / f"{key}.o"
        try:
            meta = json.loads(meta_path.read_text())
            data = object_path.read_bytes()
            if meta.get("format") != _FORMAT or hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise ValueError("stale or corrupted entry")
            entry = CachedModule(
                object_path,
                {name: (decode_signature(signature), entry)
                 for name, (signature, entry) in meta["functions"].items()},
                dict(meta["callbacks"]), tuple(meta["declared"]), tuple(meta["needed"]),
                tuple(meta["shared_libs"]), meta["lowered_mlir"])
        except (OSError, ValueError, KeyError, TypeError):
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return entry

    def store(self, key: str, engine: Any, functions: dict[str, tuple[Signature, str]],
              callbacks: dict[str, str], declared: tuple[str, ...],
              shared_libs: tuple[str, ...], lowered_mlir: str) -> None:
        """Write ``engine``'s object code and the description of the module."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.directory) as scratch:
            dumped = os.path.join(scratch, "module.o")
            engine.dump_to_object_file(dumped)
            data = Path(dumped).read_bytes()
        meta = {"format": _FORMAT, "sha256": hashlib.sha256(data).hexdigest(),
                "functions": {name: [encode_signature(signature), entry]
                              for name, (signature, entry) in functions.items()},
                "callbacks": callbacks, "declared": list(declared),
                "needed": sorted(engine.needed_symbols), "shared_libs": list(shared_libs),
                "lowered_mlir": lowered_mlir}
        # The object first: a description never points at a missing or partial object.
        _write_atomically(self.directory / f"{key}.o", data)
        _write_atomically(self.directory / f"{key}.json", json.dumps(meta).encode())
        with self._lock:
            self.stores += 1

    def clear(self) -> None:
        """Delete every entry."""
        for path in self.directory.glob("*"):
            if path.suffix in (".o", ".json"):
                path.unlink(missing_ok=True)


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

    def __init__(self, object_path: Path, symbols: dict[str, Any],
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
            self._engine.add_object_file(str(object_path))
            self._engine.finalize_object()

    def function_address(self, name: str) -> int:
        from .errors import LinkError

        address = int(self._engine.get_function_address(name))
        if not address:
            raise LinkError(f"Unknown function {name}: the cached module defines no such "
                            f"function", [name])
        return address
