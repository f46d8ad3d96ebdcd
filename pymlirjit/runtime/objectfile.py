"""Object-code artifacts: a module's object file (and its microkernels'), linked in this
process with llvmlite.

The disk cache stores a module's object file where no shared library can be linked (no
C compiler at the time of the miss); :class:`ObjectEngine` links it when loaded and
stands in for MLIR's ExecutionEngine.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable
from typing import Any

from ..codegen.vectormath import load_for
from ..errors import LinkError
from .engine import address_of

__all__ = ["ObjectEngine"]

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
