"""Compiled matmul microkernels kept on disk, so that a process's first matmul module
links the ones an earlier process compiled instead of compiling them again (~75 ms each
on an Intel Xeon; loading one: ~2 ms).

A microkernel is library code, not the user's: the same few functions (one per element
type and layout) for every matmul on the host. So they are kept by default, as Triton and
TorchInductor keep their compiled kernels, in ``microkernels`` under the disk cache's
default folder (:func:`~pymlirjit.runtime.cache.default_cache_dir`), where a module's own
code is kept only if its session asks. ``$PYMLIRJIT_MICROKERNEL_CACHE`` changes that:
``0`` keeps none on disk, any other value is the folder to keep them in (unset or
empty: the default).

The folder is a :class:`~pymlirjit.runtime.cache.DiskCache`, with all of its checks: a
private folder of this user's, each entry authenticated by an HMAC under the folder's
secret (anything planted, changed or truncated is refused, logged, and compiled again),
written atomically. A folder refused (one that cannot be made, as in a read-only home, or
another user's) keeps nothing, logged at DEBUG only. An entry's key covers the
microkernel's MLIR, the opt level, how it is lowered and compiled
(:data:`~pymlirjit.runtime.microkernelbuild.LOWERING`,
:data:`~pymlirjit.runtime.objectcode.PASSES`) and the versions and host CPU that decide
a module's code.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LinkError
from .cache import DiskCache, default_cache_dir
from .cacheentry import CachedModule, entry_key
from .microkernelbuild import LOWERING, CompiledMicrokernel
from .objectcode import PASSES

__all__ = ["FOLDER", "VARIABLE", "key", "load", "save", "store", "using"]

#: The environment variable: ``0`` keeps no microkernel on disk; another value is the
#: folder to keep them in (default: ``microkernels`` in the disk cache's default folder).
VARIABLE = "PYMLIRJIT_MICROKERNEL_CACHE"

#: The folder's name in the disk cache's default folder.
FOLDER = "microkernels"

_UNSET = object()
_chosen: object = _UNSET  # using()'s store, else the environment's
_store: DiskCache | None = None
_made = False
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock, _store, _made
    _lock = threading.Lock()  # another thread may have held it (or the store's) at the fork
    _store, _made = None, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def store() -> DiskCache | None:
    """The store microkernels are kept in (``None``: none), as :func:`using` or
    ``$PYMLIRJIT_MICROKERNEL_CACHE`` chose it (read once per process)."""
    global _store, _made
    if _chosen is not _UNSET:
        return _chosen if isinstance(_chosen, DiskCache) else None
    with _lock:
        if not _made:
            folder = os.environ.get(VARIABLE)
            if folder == "0":
                _store = None
            else:
                _store = DiskCache(Path(folder) if folder else default_cache_dir() / FOLDER,
                                   quiet_folder=True)
            _made = True
        return _store


@contextmanager
def using(folder: str | Path | None) -> Iterator[DiskCache | None]:
    """Within the block, keep microkernels in ``folder`` (``None``: on no disk), not in
    the environment's store; yields the store (for tests and benchmarks)."""
    global _chosen
    previous = _chosen
    chosen = DiskCache(folder, quiet_folder=True) if folder is not None else None
    _chosen = chosen
    try:
        yield chosen
    finally:
        _chosen = previous


def key(source: bytes, opt_level: int) -> str:
    """The name of the entry of the microkernel whose MLIR is ``source`` (bytecode),
    compiled at ``opt_level``: a module's key (:func:`~pymlirjit.runtime.cacheentry.entry_key`:
    the entries' format, the versions, the host CPU) of that MLIR, lowered and compiled
    by :data:`~pymlirjit.runtime.microkernelbuild.LOWERING` and
    :data:`~pymlirjit.runtime.objectcode.PASSES`."""
    return entry_key(source.hex(), f"microkernel:{LOWERING}:{','.join(PASSES)}", opt_level,
                     (), ())


def load(source: bytes, symbol: str, opt_level: int) -> CompiledMicrokernel | None:
    """The microkernel of ``source`` (bytecode) compiled at ``opt_level``, as
    ``symbol``, if the store has it and it links; else ``None`` (a refused entry
    logged and counted by the store)."""
    kept = store()
    if kept is None:
        return None
    name = key(source, opt_level)
    entry = kept.load(name)
    if not isinstance(entry, CachedModule):
        return None
    if entry.kind != "object" or entry.functions or entry.objects:
        kept.reject(name, "format", "not a microkernel's entry")
        return None
    try:
        return CompiledMicrokernel(symbol, entry.code, frozenset(entry.needed), source)
    except LinkError as exc:  # authentic, but not this symbol's code, or not linkable here
        kept.reject(name, "unloadable", str(exc))
        return None


def save(compiled: CompiledMicrokernel, opt_level: int) -> None:
    """Keep ``compiled`` (compiled at ``opt_level``) in the store, if there is one
    (what cannot be written is logged by it, never raised)."""
    kept = store()
    if kept is None:
        return
    kept.save(key(compiled.source(), opt_level), lambda: CachedModule(
        "object", compiled.object_code(), {}, {}, (), tuple(sorted(compiled.needed)), ""))
