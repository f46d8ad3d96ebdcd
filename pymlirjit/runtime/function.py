"""A compiled MLIR function as a Python callable: marshal, call the C ABI, unmarshal.

:class:`CompiledFunction` checks each argument against the MLIR signature (naming the
parameter in every error), passes scalars by value and numpy arrays as memref
descriptors that alias them, calls the C-ABI entry point with the GIL released, turns
results into Python scalars and numpy arrays, and re-raises an exception a callback
raised during the call.
"""

from __future__ import annotations

import pickle
import weakref
from collections.abc import Callable
from typing import Any, SupportsIndex

from ..boundary.abi import BoundaryABI, boundary_abi, native_kernel_supported
from ..boundary.callframe import call_machinery
from ..boundary.signature import Signature
from ..boundary.sparse import flat_signature, has_sparse
from ..boundary.vectorcall import EntryCaller, NativeCallable, has_entry, set_entry
from .firstcall import native_build
from .pythoncall import Guard, PythonCall
from .sharedlib import SharedLibrary
from .sparsecall import SparseCall

__all__ = ["CompiledFunction", "set_origin"]

class CompiledFunction(NativeCallable):
    """A function of a compiled module, callable with Python scalars and numpy arrays.

    ``name`` is the MLIR symbol, ``signature`` its MLIR signature, ``address`` its
    C-ABI entry point (``_mlir_ciface_<entry>``, behind a guard in modules with
    callbacks: see :attr:`address`), ``engine`` the engine holding
    its code (kept alive by the function), ``module`` the compiled module it came from
    (held weakly: a module refers to its functions, not the other way round).
    ``release_gil`` says whether calls release the GIL while compiled code runs
    (``None``: when other Python threads exist);
    ``unwind`` whether a failing callback ends the call at once
    (native entries only) instead of letting it run on with callbacks skipped.
    ``native_entry`` is the address of its native entry point, once it has one;
    ``guard`` the address of a guard compiled with the code (a module loaded from a
    shared library), else one is generated on first use.
    """

    def __init__(self, engine: Any, name: str, signature: Signature, address: int, *,
                 module: Any = None, display_name: str | None = None,
                 links_callbacks: bool = True, release_gil: bool | None = True,
                 unwind: bool = False, native: bool = True,
                 guard: int | None = None) -> None:
        self.engine = engine
        self._module = weakref.ref(module) if module is not None else None
        self.name = name
        self.display_name = display_name or name
        self.signature = signature
        self._raw_address = address
        self.release_gil = release_gil
        self.unwind = unwind
        self.abi: BoundaryABI = boundary_abi(signature)
        self._guard = Guard(self.abi, address, unwind, guard) if links_callbacks else None
        # A module loaded from a shared library generates no code (a cheap warm start):
        # its guards come with it. (Without one, the Python path goes unguarded: a
        # failing callback then skips the later callbacks of the call instead of ending
        # it, and the call still raises.)
        unguarded = isinstance(engine, SharedLibrary) and guard is None
        self._python_call: PythonCall | SparseCall
        if has_sparse(signature):  # scipy.sparse in and out, through a flat wrapper
            self._python_call = SparseCall(CompiledFunction(
                engine, name, flat_signature(signature), address, module=module,
                display_name=self.display_name, links_callbacks=links_callbacks,
                release_gil=release_gil, unwind=unwind, native=True, guard=guard),
                signature, self.display_name)
        else:
            self._python_call = PythonCall(engine, self.display_name, signature, self.abi,
                                            address, release_gil,
                                            None if unguarded else self._guard)
        self._links_callbacks = links_callbacks
        self._native_wanted = native and native_kernel_supported(self.signature)
        # A sparse function has no native entry of its own: calls go straight to this.
        self._sparse_call = (self._python_call.fast
                             if isinstance(self._python_call, SparseCall) else None)
        self.native_entry: int | None = None

    def __repr__(self) -> str:
        return f"<compiled function @{self.name} {self.signature.mlir}>"

    @property
    def address(self) -> int:
        """The address of a function with this function's C ABI, to call from C or
        through ctypes. In a module with callbacks it is a guard (generated on first
        use) that gives each call its own record, as a native entry does: a failing
        callback ends the call, which returns zeros, and its exception is raised by the
        enclosing call into compiled code (the kernel whose callback made this call),
        or else by the next call ending on any thread."""
        if self._guard is None:
            return self._raw_address
        return self._guard.address()

    @property
    def module(self) -> Any:
        """The compiled module this function came from, or ``None`` once it is gone."""
        return self._module() if self._module is not None else None

    def with_options(self, display_name: str, param_names: list[str],
                     release_gil: bool | None = None) -> CompiledFunction:
        """The same function, naming itself and its parameters so in error messages,
        and releasing the GIL as asked (``None``: as this one does)."""
        release = self.release_gil if release_gil is None else release_gil
        copy = CompiledFunction(
            self.engine, self.name, self.signature.with_names(param_names), self._raw_address,
            module=self.module, display_name=display_name, links_callbacks=self._links_callbacks,
            release_gil=release, unwind=self.unwind, native=self._native_wanted,
            guard=self._guard.loaded if self._guard is not None else None)
        if self.native_entry is not None and release == self.release_gil:
            copy.use_native(self.native_entry, self._python_call.native_code)
        return copy

    def add_native_entry(self, batch: Any) -> Callable[[list[int], object], None] | None:
        """Add this function's native entry to ``batch`` (a
        :class:`pymlirjit.boundary.native.NativeBatch`) if its types allow one; returns what to
        call with the batch's addresses and code once compiled, or ``None``."""
        if not self._native_wanted or self.native_entry is not None:
            return None
        calls = call_machinery() if self._links_callbacks else None
        index = batch.add_kernel_entry(self.abi, self._raw_address, calls, self.release_gil,
                                       self.unwind)
        return lambda addresses, code: self.use_native(addresses[index], code)

    def use_native(self, address: int, code: object) -> None:
        """Call through the native entry at ``address`` from now on (CPython calls it
        directly: see :mod:`pymlirjit.boundary.vectorcall`). The entry, generated by
        :mod:`pymlirjit.boundary.native` for this function's signature and GIL policy, hands
        every call it does not take to :meth:`call_python`. ``code`` (what owns the
        machine code) lives as long as this function."""
        self._python_call.native_code = code
        set_entry(self, address, self._python_call, self._python_call.in_flight)
        self._python_call.positional = EntryCaller(address, self._python_call,
                                                   "call_positional")
        self.native_entry = address

    @property
    def calls_in_flight(self) -> int:
        """How many calls are running through this function's native entry, whatever
        the object called (a kernel shares its function's entry), on any thread or
        nested (a callback may call the same kernel again), including the calls the
        entry hands to the Python path. While it is not 0 the function must be kept:
        those calls run in (or return to) its machine code."""
        return int(self._python_call.in_flight.value)

    def ensure_native(self) -> bool:
        """Build the native entry point (see :mod:`pymlirjit.boundary.native`) if this function's
        types allow one; later calls then go straight to it. Returns whether it has one."""
        if self._native_wanted and self.native_entry is None:
            from ..boundary.native import NativeBatch  # llvmlite loads only when needed

            with native_build() as free:  # not free: re-entered by a signal handler
                if free and self.native_entry is None:
                    batch = NativeBatch()
                    ready = self.add_native_entry(batch)
                    addresses, code = batch.compile()
                    if ready is not None:
                        ready(addresses, code)
        elif self.native_entry is not None and not has_entry(self):  # a copy (copy.copy)
            set_entry(self, self.native_entry, self._python_call, self._python_call.in_flight)
        return self.native_entry is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the compiled function (natively from the first call on, where possible:
        from then on, calls do not come here)."""
        if self._sparse_call is not None:
            return self._sparse_call(*args, **kwargs)
        if self.ensure_native():
            return self(*args, **kwargs)  # through the native entry
        return self.call_python(*args, **kwargs)

    def call_python(self, *args: Any, **kwargs: Any) -> Any:
        """The Python implementation of a call: every conversion and every check."""
        return self._python_call(*args, **kwargs)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        """Pickled as what compiles it: its module's source, options and callbacks, with
        its names and GIL policy (see :meth:`pymlirjit.Session.compile`, which records
        them); unpickled, it is compiled again, or found in the receiving process's
        session cache or disk cache."""
        module = self.module
        reduce = _origins.get(module) if module is not None else None
        if reduce is None:
            raise pickle.PicklingError(
                f"cannot pickle compiled function @{self.name}: its module is gone or was "
                f"not compiled by a Session (pickle the kernel, or the MLIR source, instead)")
        return reduce(self)

    def __copy__(self) -> CompiledFunction:
        # The same machine code, called through the same entry (see ensure_native).
        copy: CompiledFunction = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        return copy

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledFunction:
        return self.__copy__()


#: How to pickle the functions of a module (by module): set by whoever compiled it.
_origins: weakref.WeakKeyDictionary[Any, Callable[[CompiledFunction], Any]] = (
    weakref.WeakKeyDictionary())


def set_origin(module: Any, reduce: Callable[[CompiledFunction], Any]) -> None:
    """Pickle the functions of ``module`` as ``reduce(function)`` says (a
    ``__reduce__`` value: what compiles the function again in another process)."""
    _origins[module] = reduce
