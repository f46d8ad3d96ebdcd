"""The two parts of a compiled function's call outside its native entry:
:class:`PythonCall`, a call through ctypes with every argument check and conversion in
Python (the path native entries hand the calls they do not take to), and :class:`Guard`,
the native guard a function of a module with callbacks is called through."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..boundary import ffi
from ..boundary.abi import BoundaryABI
from ..boundary.buildgate import building
from ..boundary.callframe import call_machinery, enter_call, exit_call
from ..boundary.convert import from_c, from_memory, to_c
from ..boundary.memref import (
    GLOBAL_MEMREF_MARKER,
    descriptor_for_argument,
    descriptor_for_unranked,
    descriptor_type,
    free_unowned,
    holds_elements,
    owned_array_from_descriptor,
)
from ..boundary.signature import Signature, argument_label
from ..boundary.types import (
    MemRefType,
    ScalarType,
    TensorType,
    Type,
    UnrankedMemRefType,
)
from ..boundary.vectorcall import EntryCaller

__all__ = ["Guard", "Marshaller", "PythonCall"]


class Guard:
    """The guard of a function of a module with callbacks (see
    :meth:`pymlirjit.boundary.native.NativeBatch.add_guard`), generated on first use unless
    ``loaded`` gives the address of one compiled with the code."""

    def __init__(self, abi: BoundaryABI, target: int, unwind: bool,
                 loaded: int | None = None) -> None:
        self.abi = abi
        self.target = target
        self.unwind = unwind
        self.loaded = loaded
        self.code: object = None  # owns the guard's machine code
        self._address = loaded or 0
        self._lock = threading.Lock()

    def address(self) -> int:
        if not self._address:
            from ..boundary.native import NativeBatch  # llvmlite loads only when needed

            with building(), self._lock:  # a fork waits for the build, then this lock
                if not self._address:
                    batch = NativeBatch()
                    index = batch.add_guard(self.abi, self.target, call_machinery(),
                                            self.unwind)
                    addresses, self.code = batch.compile()
                    self._address = addresses[index]
        return self._address


class PythonCall:
    """A call through ctypes, with every conversion and check in Python (the path native
    entries hand the calls they do not take to). It refers to no CompiledFunction, so as
    to create no reference cycle. In a module with callbacks whose calls unwind, it calls
    the function's guard, so that a failing callback ends the call as it ends a native
    entry's (the guard frees what a failed call allocated, its results too, and zeroes
    them). (Calls that run on need none: the call's own record fails, and the results
    stay for the call to free; a guard would zero them.)"""

    def __init__(self, engine: Any, display_name: str, signature: Signature,
                 abi: BoundaryABI, address: int, release_gil: bool | None,
                 guard: Guard | None = None) -> None:
        self.engine = engine
        self.display_name = display_name
        self.signature = signature
        self.abi = abi
        head = [ctypes.c_void_p] if abi.results_via_pointer else []
        # ctypes releases the GIL around CFUNCTYPE calls and keeps it for PYFUNCTYPE.
        prototype = ctypes.PYFUNCTYPE if release_gil is False else ctypes.CFUNCTYPE
        self.prototype = prototype(abi.c_result, *head, *abi.c_params)
        self.guard = guard if guard is not None and guard.unwind else None
        self.cfunc = self.prototype(address) if self.guard is None else None
        self.release_gil = release_gil
        self.names = [p.name for p in signature.params]
        self.labels = [argument_label(i, p.name) for i, p in enumerate(signature.params)]
        self.marshal = [_argument_marshaller(p.type, f"{display_name}() {label}",
                                             p.name if label != f"argument {i + 1}" else "x",
                                             p.read_only)
                        for i, (p, label) in enumerate(zip(signature.params, self.labels))]
        self.unmarshal = [_result_reader(t) for t in signature.results]
        self.discard = [(i, _result_freer(t)) for i, t in enumerate(signature.results)
                        if not isinstance(t, ScalarType)]
        self.from_boundary = (_from_boundary(signature.results[0]) if signature.results
                              else _identity)
        self.arity = len(signature.params)
        self.native_code: object = None
        self.in_flight = ctypes.c_int64(0)  # counted by native entries (see vectorcall)
        self.positional: EntryCaller | None = None  # its native entry, once it has one

    def guarded(self) -> Any:
        """The ctypes function calling the guard (made on first use)."""
        assert self.guard is not None
        self.cfunc = self.prototype(self.guard.address())
        return self.cfunc

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The positional arguments of a call given keyword arguments (by the stub's
        parameter names), or the wrong number of arguments."""
        params = ", ".join(p.type.mlir if p.name == f"arg{i}" else f"{p.name}: {p.type.mlir}"
                           for i, p in enumerate(self.signature.params))
        if len(args) > self.arity:
            raise TypeError(f"{self.display_name}() takes {self.arity} arguments ({params}), "
                            f"got {len(args)}")
        values: list[Any] = [*args, *(_MISSING,) * (self.arity - len(args))]
        for key, value in kwargs.items():
            try:
                i = self.names.index(key)
            except ValueError:
                raise TypeError(f"{self.display_name}() got an unexpected keyword argument "
                                f"{key!r} (it takes {params})") from None
            if i < len(args):
                raise TypeError(f"{self.display_name}() got multiple values for "
                                f"{self.labels[i]}")
            values[i] = value
        missing = [label for label, value in zip(self.labels, values) if value is _MISSING]
        if missing:
            raise TypeError(f"{self.display_name}() missing {', '.join(missing)} "
                            f"(it takes {params})")
        return tuple(values)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != self.arity:
            args = self.bind(args, kwargs)
            if self.positional is not None:  # bound by name: the native entry takes it
                return self.positional(*args)
        return self.call_positional(*args)

    def call_positional(self, *args: Any) -> Any:
        """A call with exactly the function's arguments, in order, through ctypes."""
        c_args: list[Any] = []
        keepalive: list[Any] = []
        # A memref.get_global result lives in the engine's memory: the array keeps it.
        owners: dict[int, object] = {GLOBAL_MEMREF_MARKER: self.engine}
        for marshal, value in zip(self.marshal, args):
            marshal(value, c_args, keepalive, owners)
        struct = None
        if self.abi.results_via_pointer:
            struct = self.abi.result_struct()
            c_args.insert(0, ctypes.addressof(struct))
        cfunc = self.cfunc or self.guarded()
        frame = enter_call(0, self.release_gil is False)
        try:
            result = cfunc(*c_args)
        finally:
            try:
                exit_call(frame)
            except BaseException:
                if struct is not None:
                    self._free(struct, owners)
                raise
        if struct is None:
            if not self.unmarshal:
                return None
            return self.from_boundary(result)
        return self._read(struct, owners)

    def _read(self, struct: Any, owners: dict[int, object]) -> Any:
        values = tuple(read(getattr(struct, f"r{i}"), owners)
                       for i, read in enumerate(self.unmarshal))
        return values[0] if len(values) == 1 else values

    def _free(self, struct: Any, owners: dict[int, object]) -> None:
        """Free the memory the results of a failed call would have owned. (A call a
        guard unwound, or whose ctypes call never ran, has zeros there: nothing.)"""
        for i, free in self.discard:
            free(getattr(struct, f"r{i}"), owners)

    def read_results(self, address: int, *args: Any) -> Any:
        """The results a native entry's call of the function with ``args`` (accepted
        as they are: see :meth:`pymlirjit.boundary.native.NativeBatch.add_kernel_entry`) wrote to
        the result struct at ``address``, read as this path reads its own: the entry
        asks for it when a memref or tensor result's memory is not a fresh allocation
        of its own (it aliases an argument, another result or a global)."""
        owners: dict[int, object] = {GLOBAL_MEMREF_MARKER: self.engine}
        for param, value in zip(self.signature.params, args):
            t = param.type
            if isinstance(t, (MemRefType, TensorType)):
                offset = t.offset or 0 if isinstance(t, MemRefType) else 0
                owners.setdefault(value.ctypes.data - offset * value.itemsize, value)
        return self._read(self.abi.result_struct.from_address(address), owners)


Marshaller = Callable[[Any, list[Any], list[Any], dict[int, object]], None]


_MISSING: Any = object()


def _argument_marshaller(t: Type, what: str, name: str, read_only: bool) -> Marshaller:
    if isinstance(t, ScalarType):
        to_boundary = to_c(t, exact=True)

        def marshal_scalar(value: Any, out: list[Any], *_: Any) -> None:
            out += to_boundary(value, what)
        return marshal_scalar
    if isinstance(t, (MemRefType, TensorType)):
        def marshal_array(value: Any, out: list[Any], keepalive: list[Any],
                          owners: dict[int, object]) -> None:
            if not (isinstance(value, np.ndarray) and holds_elements(value.dtype, t.element)):
                raise _array_type_error(value, t, what, name)
            descriptor, array = descriptor_for_argument(value, t, what, read_only)
            keepalive.append(descriptor)
            owners.setdefault(descriptor.allocated or 0, array)
            out.append(ctypes.addressof(descriptor))
        return marshal_array
    if isinstance(t, UnrankedMemRefType):
        def marshal_unranked(value: Any, out: list[Any], keepalive: list[Any],
                             owners: dict[int, object]) -> None:
            if not (isinstance(value, np.ndarray) and holds_elements(value.dtype, t.element)):
                raise _array_type_error(value, t, what, name)
            unranked, ranked, array = descriptor_for_unranked(value, t, what)
            keepalive += (unranked, ranked)
            owners.setdefault(ranked.allocated or 0, array)
            out.append(ctypes.addressof(unranked))
        return marshal_unranked
    raise TypeError(f"{what}: {t.mlir} cannot be passed from Python")


def _array_type_error(value: Any, t: MemRefType | TensorType | UnrankedMemRefType,
                      what: str, name: str) -> TypeError:
    """The error for an argument that is not an array of ``t``'s element type, saying how
    to convert it (arrays are never converted silently: a memref aliases its array)."""
    dtype = t.element.dtype
    spelled = (f"np.{dtype.name}" if getattr(np, dtype.name, None) is dtype.type
               else f"{t.element.dtype_module}.{dtype.name}")
    copy = "" if isinstance(t, TensorType) else (
        f" (a copy: the kernel's writes then go to the copy, not to {name})")
    if isinstance(value, np.ndarray):
        return TypeError(f"{what}: expected a {dtype} array for {t.mlir}, got a {value.dtype} "
                         f"array; pass {name}.astype({spelled}){copy}")
    return TypeError(f"{what}: expected a numpy array of {dtype} for {t.mlir}, got "
                     f"{type(value).__name__}; pass np.asarray({name}, dtype={spelled})")


def _from_boundary(t: Type) -> Callable[[Any], Any]:
    """How a by-value result from the C ABI (after the shim) becomes a Python value."""
    return from_c(t) if isinstance(t, ScalarType) else _identity


def _identity(value: Any) -> Any:
    return value


def _result_freer(t: Type) -> Callable[[Any, dict[int, object]], None]:
    """How to free what the reader of a memref/tensor result of type ``t`` would have
    made an array own (see :func:`_result_reader`)."""
    if isinstance(t, (MemRefType, TensorType)):
        rank = t.rank
        return lambda descriptor, owners: free_unowned(descriptor, rank, owners)
    if isinstance(t, UnrankedMemRefType):
        def free_unranked(unranked: Any, owners: dict[int, object]) -> None:
            if unranked.descriptor:
                ranked = descriptor_type(unranked.rank).from_address(unranked.descriptor)
                free_unowned(ranked, unranked.rank, owners)
                ffi.free(unranked.descriptor)
        return free_unranked
    raise TypeError(f"{t.mlir} cannot be returned to Python")


def _result_reader(t: Type) -> Callable[[Any, dict[int, object]], Any]:
    if isinstance(t, ScalarType):
        read = from_memory(t)
        return lambda field, _: read(field)
    if isinstance(t, MemRefType):
        rank, element = t.rank, t.element
        return lambda descriptor, owners: owned_array_from_descriptor(descriptor, rank,
                                                                      element, owners)
    if isinstance(t, TensorType):
        tensor_rank, tensor_element = t.rank, t.element

        def read_tensor(descriptor: Any, owners: dict[int, object]) -> Any:
            # A tensor is a value: a result sharing memory with an argument (or with an
            # earlier result) is copied, so that writing to it changes nothing else.
            shared = (descriptor.allocated or 0) in owners
            array = owned_array_from_descriptor(descriptor, tensor_rank, tensor_element, owners)
            return array.copy() if shared else array
        return read_tensor
    if isinstance(t, UnrankedMemRefType):
        element = t.element

        def read_unranked(unranked: Any, owners: dict[int, object]) -> Any:
            # The callee malloc'ed the ranked descriptor an unranked result points to.
            ranked = descriptor_type(unranked.rank).from_address(unranked.descriptor)
            try:
                return owned_array_from_descriptor(ranked, unranked.rank, element, owners)
            finally:
                ffi.free(unranked.descriptor)
        return read_unranked
    raise TypeError(f"{t.mlir} cannot be returned to Python")
