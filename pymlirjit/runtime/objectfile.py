"""Object-code artifacts: a module's object file (and its microkernels'), linked in this
process with llvmlite.

The disk cache stores a module's object file where no shared library can be linked (no
C compiler at the time of the miss); :class:`ObjectEngine` links it when loaded and
stands in for MLIR's ExecutionEngine.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import sys
import threading
from collections.abc import Iterable
from typing import Any

from ..codegen.vectormath import load_for
from ..errors import LinkError
from .engine import address_of

__all__ = ["ObjectEngine", "check_object_file"]

_link_lock = threading.Lock()


class ObjectEngine:
    """Compiled code loaded from an object file with llvmlite, standing in for an
    ExecutionEngine: ``function_address(name)`` gives a function's C-ABI address.

    ``symbols`` maps the runtime symbols the object calls to native addresses (the
    callbacks); ``shared_libs`` are loaded so that their symbols resolve too, and
    ``objects`` (object files defining functions it calls) linked with it. The
    callbacks passed in are kept alive with the engine.
    """

    def __init__(self, object_code: bytes, symbols: dict[str, Any],
                 shared_libs: Iterable[str] = (), needed: Iterable[str] = (),
                 objects: Iterable[bytes] = ()) -> None:
        import llvmlite.binding as llvm  # LLVM loads only when a cached object is loaded

        libraries = [ctypes.CDLL(library) for library in shared_libs]
        load_for(needed)  # code that calls libmvec (see vectormath): it resolves through it
        process = ctypes.CDLL(None)
        # LLVM aborts the process on a symbol it cannot resolve: check them all first.
        missing = [s for s in needed if s not in symbols and not hasattr(process, s)
                   and not any(hasattr(library, s) for library in libraries)]
        if missing:
            raise LinkError(f"the cached module needs undefined symbols: {missing}", missing)
        for code in (object_code, *objects):  # LLVM crashes on what is not one
            check_object_file(code)
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
            for code in (object_code, *objects):
                self._engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            self._engine.finalize_object()

    def function_address(self, name: str) -> int:
        address = int(self._engine.get_function_address(name))
        if not address:
            raise LinkError(f"Unknown function {name}: the cached module defines no such "
                            f"function", [name])
        return address


def check_object_file(code: bytes) -> None:
    """Raise :class:`LinkError` unless ``code`` is a relocatable ELF object for this
    process's machine whose section headers and sections lie within it: llvmlite hands
    an object to LLVM, which crashes the process on some that are not one (garbage, a
    truncated file). Where this process is not a 64-bit little-endian ELF executable,
    only that ``code`` is not empty. (An object from a cache entry is authenticated
    already: this is for an entry written by a faulty writer, not against a forger.)"""
    host = _host_elf_header()
    if host is None or host[4:6] != _ELF64_LITTLE:
        if not code:
            raise LinkError("an empty object file", [])
        return
    if len(code) < _ELF64.size or code[:4] != b"\x7fELF":
        raise LinkError("not an ELF object file", [])
    if code[4:6] != _ELF64_LITTLE:  # class (32/64-bit) and byte order
        raise LinkError("an ELF object file of another class or byte order", [])
    (kind, machine, section_offset, entry_size, sections,
     names) = _ELF64.unpack_from(code)
    if kind != _RELOCATABLE or machine != struct.unpack_from("<H", host, 18)[0]:
        raise LinkError("not a relocatable ELF object file of this machine", [])
    if entry_size != _SECTION.size or names >= max(sections, 1) or (
            section_offset + sections * entry_size > len(code)):
        raise LinkError("an ELF object file whose section headers lie outside it", [])
    for index in range(sections):
        kind, offset, size = _SECTION.unpack_from(code, section_offset + index * entry_size)
        if kind != _NO_BITS and offset + size > len(code):
            raise LinkError(f"an ELF object file whose section {index} lies outside it", [])


_ELF64_LITTLE = b"\x02\x01"  # e_ident's class (64-bit) and data (little-endian) bytes
# e_type, e_machine at 16; e_shoff at 40; e_shentsize, e_shnum, e_shstrndx at 58.
_ELF64 = struct.Struct("<16xHH20xQ10xHHH")
# sh_type at 4, sh_offset at 24, sh_size at 32 (of 64 bytes).
_SECTION = struct.Struct("<4xI16xQQ24x")
_RELOCATABLE = 1
_NO_BITS = 8  # SHT_NOBITS: no bytes in the file


@functools.cache
def _host_elf_header() -> bytes | None:
    """The first 64 bytes of this process's executable if it is an ELF file."""
    for path in ("/proc/self/exe", sys.executable):
        try:
            with open(path, "rb") as executable:
                header = executable.read(64)
        except OSError:
            continue
        return header if header[:4] == b"\x7fELF" and len(header) == 64 else None
    return None
