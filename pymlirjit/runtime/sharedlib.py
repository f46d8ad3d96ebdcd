"""Compiled modules as shared libraries: what the on-disk cache stores and loads.

At a cache miss, the module's object code (from MLIR's ExecutionEngine) is linked by
the system's C compiler with *relocatable* native entry points and callback
trampolines (:mod:`pymlirjit.boundary.native`) into one shared library. Those read every value
that differs between processes (Python objects, the call machinery, a callback's
function) from slots, globals named as in :mod:`pymlirjit.boundary.relocation`. A process loads
the library with ``dlopen``, from memory, and fills the slots with its own values: no
MLIR, no LLVM, no code generation, which is what makes a warm start cheap.

This needs Linux (``memfd_create``) and a C compiler at the time of the miss (``$CC``,
else ``cc`` or ``gcc``); elsewhere the cache stores the object file alone
(:class:`pymlirjit.runtime.objectfile.ObjectEngine` links it with llvmlite when loaded).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..boundary import ffi
from ..boundary.relocation import SLOT_PREFIX
from ..errors import LinkError

__all__ = ["NativeCode", "SharedLibrary", "c_compiler", "link_shared_library", "supported"]


def c_compiler() -> list[str] | None:
    """The command of the C compiler that links shared libraries: ``$CC`` (split as a
    shell would; empty: none), else ``cc`` or ``gcc`` on the ``PATH``; ``None`` if there
    is none."""
    explicit = os.environ.get("CC")
    if explicit is not None:
        words = shlex.split(explicit)
        program = shutil.which(words[0]) if words else None
        return [program, *words[1:]] if program else None
    program = shutil.which("cc") or shutil.which("gcc")
    return [program] if program else None


def supported() -> bool:
    """Whether modules can be cached as shared libraries here: Linux (memfd, /proc) and
    a C compiler."""
    return (sys.platform.startswith("linux") and hasattr(os, "memfd_create")
            and os.path.isdir("/proc/self/fd") and c_compiler() is not None)


def link_shared_library(objects: Sequence[bytes]) -> bytes:
    """Link ``objects`` (ELF object files) into a shared library, returned as bytes.

    Symbols bind within the library first (``-Bsymbolic``): a global of the same name
    elsewhere in the process never replaces one of its functions. MLIR's code uses
    the large code model, whose absolute addresses the dynamic loader patches
    (``-z notext``). Raises :class:`~pymlirjit.errors.LinkError` with the compiler's
    message if linking fails.
    """
    compiler = c_compiler()
    if compiler is None:
        raise LinkError("no C compiler to link a shared library with (set $CC)")
    with tempfile.TemporaryDirectory(prefix="pymlirjit-link-") as scratch:
        inputs = []
        for i, data in enumerate(objects):
            path = Path(scratch, f"part{i}.o")
            path.write_bytes(data)
            inputs.append(str(path))
        output = Path(scratch, "module.so")
        command = [*compiler, "-shared", "-o", str(output), *inputs, "-Wl,-Bsymbolic",
                   "-Wl,-z,notext", "-lm"]
        name = shlex.join(compiler)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LinkError(f"could not run {name} to link a shared library: {exc}") from exc
        if done.returncode != 0:
            raise LinkError(f"{name} could not link a shared library: "
                            f"{done.stderr.strip() or done.stdout.strip()}")
        return output.read_bytes()


@dataclass(frozen=True)
class NativeCode:
    """Relocatable native entry points of a module, as an object file (``None`` if the
    module needs none): ``slots`` names the value of each slot, ``entries`` the
    symbol of each function's native entry, ``guards`` the symbol of each function's
    guard (modules with callbacks: see ``NativeBatch.add_guard``)."""

    object_code: bytes | None
    slots: tuple[str, ...]
    entries: dict[str, str]
    guards: dict[str, str] = field(default_factory=dict)


class SharedLibrary:
    """A shared library loaded from memory, standing in for an ExecutionEngine:
    ``function_address(name)`` gives a function's address, :meth:`bind` fills the
    slots. ``shared_libs`` are loaded first, with their symbols global, for the
    library's undefined symbols to resolve.

    The library is unloaded when this object is collected; if it uses shared
    libraries, a moment later (see :func:`_retire`).
    """

    def __init__(self, data: bytes, shared_libs: Sequence[str] = (),
                 name: str = "module") -> None:
        for library in shared_libs:
            ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
        descriptor = os.memfd_create(f"pymlirjit-{name}", os.MFD_CLOEXEC)
        try:
            with open(descriptor, "wb", closefd=False) as out:
                out.write(data)
            self._library = _load_from_memory(descriptor)
        finally:
            os.close(descriptor)
        self.keepalive: list[object] = []
        finalizer = weakref.finalize(self, _retire, self._library._handle, bool(shared_libs))
        finalizer.atexit = False  # at exit, other code may still call into it

    def function_address(self, name: str) -> int:
        """The address of the function ``name``; :class:`LinkError` if there is none."""
        try:
            address = ctypes.cast(self._library[name], ctypes.c_void_p).value
        except AttributeError:
            address = None
        if not address:
            raise LinkError(f"Unknown function {name}: the cached module defines no such "
                            f"function", [name])
        return address

    def bind(self, values: Sequence[int], objects: Iterable[object] = ()) -> None:
        """Store ``values`` in the slots, by index; ``objects`` stay alive as long as
        this library."""
        for index, value in enumerate(values):
            ctypes.c_uint64.in_dll(self._library, f"{SLOT_PREFIX}{index}").value = value
        self.keepalive.extend(objects)


def _unload(handle: int) -> None:
    ffi.dlclose(handle)


# A module that uses shared libraries may still have code running on their threads when
# its last Python reference goes: MLIR's async runtime marks a task done from inside the
# task's code, which then returns through the module (a few instructions its awaiting
# caller does not wait for, and a thread preempted there may sleep for a scheduler
# slice). Unloading at once could unmap code under that thread; never unloading leaks
# every load. Such libraries are unloaded after a grace period instead, at the next
# load or collection of a library: far longer than those instructions take, and memory
# stays flat.
_GRACE_SECONDS = 1.0
_retired: collections.deque[tuple[float, int]] = collections.deque()
# Reentrant: a collection (and so _retire) may run at any allocation, lock held or not.
_retired_lock = threading.RLock()


def _retire(handle: int, uses_shared_libs: bool) -> None:
    """Unload a collected library: now, or after the grace period if it uses shared
    libraries; and unload the retired libraries whose grace period is over."""
    if uses_shared_libs:
        with _retired_lock:
            _retired.append((time.monotonic(), handle))
    else:
        _unload(handle)
    _unload_retired()


def _unload_retired() -> None:
    now = time.monotonic()
    due = []
    with _retired_lock:
        while _retired:
            retired_at, handle = _retired.popleft()
            if now - retired_at < _GRACE_SECONDS:
                _retired.appendleft((retired_at, handle))  # the oldest: the others wait too
                break
            due.append(handle)
    for handle in due:
        _unload(handle)


_loads = itertools.count()


def _load_from_memory(descriptor: int) -> ctypes.CDLL:
    """The library in the memfd ``descriptor``, loaded through a path used once.

    The dynamic loader knows a library by the path it was given, and /proc/self/fd/N
    names another file once N is reused: each load spells that path differently, the
    load's number written in binary as empty (``/``) and current-directory (``/.``)
    components, which the kernel resolves to the same descriptor. The mapping outlives
    the descriptor, so loaded modules hold no file descriptors; and nothing is written
    to the file system, so no process, forked or killed, leaves anything behind. (A
    forked child counts on from the parent's number: the libraries it inherits were
    loaded under smaller ones.)
    """
    _unload_retired()
    return ctypes.CDLL(_descriptor_path(descriptor, next(_loads)))


def _descriptor_path(descriptor: int, number: int) -> str:
    """``/proc/self/fd/<descriptor>``, spelled in a way of its own for each ``number``."""
    spelling = "".join("/." if bit == "1" else "/" for bit in f"{number:b}")
    return f"/proc/self/fd{spelling}/{descriptor}"
