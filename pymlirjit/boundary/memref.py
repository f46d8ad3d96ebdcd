"""numpy arrays <-> MLIR memref descriptors, without copying.

A ranked memref crosses the C ABI as a pointer to
``{allocated, aligned, offset, sizes[rank], strides[rank]}`` (strides and offset in
elements); an unranked one as a pointer to ``{rank, descriptor*}``. This module builds
descriptors that alias numpy arrays, numpy views that alias descriptors, and arrays
that own a buffer the compiled code allocated (freeing it with ``free`` when collected).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

import numpy as np

from . import ffi
from .types import MemRefType, ScalarType, TensorType, UnrankedMemRefType

__all__ = [
    "holds_elements",
    "ALIGNED",
    "ALLOCATED",
    "DESCRIPTOR_FIELDS",
    "OFFSET",
    "SIZES",
    "STRIDES",
    "UnrankedDescriptor",
    "array_from_descriptor",
    "descriptor_for_argument",
    "descriptor_type",
    "fill_descriptor_with_copy",
    "free_unowned",
]


# MLIR marks the `allocated` pointer of a memref.get_global result with this constant.
GLOBAL_MEMREF_MARKER = 0xDEADBEEF


# A ranked descriptor's fields, in order: descriptor_type() is their one definition (the
# LLVM struct of pymlirjit.boundary.native is derived from it), and these name their indices.
# A rank-0 descriptor ends after ``offset``.
DESCRIPTOR_FIELDS = ("allocated", "aligned", "offset", "sizes", "strides")
ALLOCATED, ALIGNED, OFFSET, SIZES, STRIDES = range(len(DESCRIPTOR_FIELDS))


@functools.cache
def descriptor_type(rank: int) -> type[ctypes.Structure]:
    """The ctypes struct of a ranked memref descriptor of ``rank`` (one class per rank)."""
    types: dict[str, Any] = {"allocated": ctypes.c_void_p, "aligned": ctypes.c_void_p,
                             "offset": ctypes.c_int64, "sizes": ctypes.c_int64 * rank,
                             "strides": ctypes.c_int64 * rank}
    names = DESCRIPTOR_FIELDS if rank else DESCRIPTOR_FIELDS[:SIZES]
    fields = [(name, types[name]) for name in names]
    return type(f"MemRefDescriptor{rank}D", (ctypes.Structure,), {"_fields_": fields})


class UnrankedDescriptor(ctypes.Structure):
    """``{rank, descriptor*}``: an unranked memref."""

    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


class _ArrayInterface:
    """Presents raw memory to numpy through ``__array_interface__``; the array keeps it."""

    __slots__ = ("__array_interface__", "keepalive")

    def __init__(self, address: int, shape: tuple[int, ...], strides: tuple[int, ...],
                 typestr: str, keepalive: object) -> None:
        self.__array_interface__ = {
            "data": (address, False),
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "version": 3,
        }
        self.keepalive = keepalive


class _MallocedBuffer:
    """Frees ``address`` with libc ``free`` when the last array using it is collected."""

    __slots__ = ("address",)

    def __init__(self, address: int) -> None:
        self.address = address

    def __del__(self) -> None:
        ffi.free(self.address)


def _raw_view(address: int, shape: tuple[int, ...], strides: tuple[int, ...],
              dtype: np.dtype[Any], keepalive: object) -> np.ndarray[Any, Any]:
    if 0 in shape or not address:
        return np.zeros(shape, dtype)
    holder = _ArrayInterface(address, shape, strides, dtype.str, keepalive)
    array: np.ndarray[Any, Any] = np.asarray(holder)
    if array.dtype != dtype:  # e.g. bfloat16, whose typestr numpy reads as raw bytes
        array = array.view(dtype)
    return array


def read_descriptor(descriptor: Any, rank: int) -> tuple[int, int, int, tuple[int, ...],
                                                           tuple[int, ...]]:
    """(allocated, aligned, offset, sizes, strides) of a ranked descriptor struct."""
    if rank == 0:
        return descriptor.allocated or 0, descriptor.aligned or 0, descriptor.offset, (), ()
    return (descriptor.allocated or 0, descriptor.aligned or 0, descriptor.offset,
            tuple(descriptor.sizes), tuple(descriptor.strides))


def array_from_descriptor(descriptor: Any, rank: int, element: ScalarType,
                          keepalive: object = None) -> np.ndarray[Any, Any]:
    """A numpy view of the memory a ranked descriptor describes (no copy, no ownership)."""
    _, aligned, offset, sizes, strides = read_descriptor(descriptor, rank)
    dtype = element.dtype
    itemsize = dtype.itemsize
    return _raw_view(aligned + offset * itemsize, sizes,
                     tuple(s * itemsize for s in strides), dtype, keepalive)


def array_from_unranked(unranked: UnrankedDescriptor, element: ScalarType,
                        keepalive: object = None) -> np.ndarray[Any, Any]:
    """A numpy view of the memory an unranked descriptor describes."""
    rank = unranked.rank
    ranked = descriptor_type(rank).from_address(unranked.descriptor)
    return array_from_descriptor(ranked, rank, element, keepalive)


def owned_array_from_descriptor(descriptor: Any, rank: int, element: ScalarType,
                                owners: dict[int, object]) -> np.ndarray[Any, Any]:
    """An array for a memref the compiled code returned.

    ``owners`` maps an ``allocated`` pointer to the object that keeps it alive: the
    argument array it aliases, or the owner made for an earlier result of the same call.
    A pointer seen nowhere else was allocated by the compiled code with ``malloc``: the
    array takes it over and frees it when collected. (Put the engine under
    :data:`GLOBAL_MEMREF_MARKER` for results that are MLIR globals.)
    """
    allocated = read_descriptor(descriptor, rank)[0]
    owner = owners.get(allocated)
    if owner is None and allocated:
        owner = owners[allocated] = _MallocedBuffer(allocated)
    return array_from_descriptor(descriptor, rank, element, owner)


def free_unowned(descriptor: Any, rank: int, owners: dict[int, object]) -> None:
    """Free the memory of a memref result that :func:`owned_array_from_descriptor` would
    have taken over (an ``allocated`` pointer not NULL and in no ``owners``), as its
    array would have: for a call that failed, whose results no one will see. Adds it
    to ``owners``, so that a later result with the same memory does not free it again.
    """
    allocated = read_descriptor(descriptor, rank)[0]
    if allocated and allocated not in owners:
        owners[allocated] = None
        ffi.free(allocated)


def holds_elements(dtype: np.dtype[Any], element: ScalarType) -> bool:
    """Whether an array of ``dtype`` holds ``element`` values as they are: ``element``'s
    own dtype or, MLIR integers being signless, an unsigned one of the same width (a
    ``uint8`` array for ``memref<?xi8>``: the same bits, no copy)."""
    own = element.dtype
    return dtype == own or (own.kind == "i" and dtype.kind == "u" and dtype.isnative
                            and dtype.itemsize == own.itemsize)


def _check_array(value: Any, element: ScalarType, shape: tuple[int | None, ...],
                 what: str, kind: str) -> np.ndarray[Any, Any]:
    if type(value) is not np.ndarray:
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{what}: expected a numpy array for {kind}, "
                            f"got {type(value).__name__}")
        _refuse_masked(value, what)
    if not holds_elements(value.dtype, element):
        raise TypeError(f"{what}: expected dtype {element.dtype} for {kind}, got {value.dtype}")
    if value.ndim != len(shape):
        raise ValueError(f"{what}: expected a rank-{len(shape)} array for {kind}, "
                         f"got rank {value.ndim} (shape {value.shape})")
    for axis, (want, got) in enumerate(zip(shape, value.shape)):
        if want is not None and want != got:
            raise ValueError(f"{what}: dim {axis} must be {want} for {kind}, got {got} "
                             f"(shape {value.shape})")
    return value


def _refuse_masked(array: np.ndarray[Any, Any], what: str) -> None:
    """Refuse a numpy masked array, as numba does: compiled code would read its masked
    elements too. Other subclasses (np.memmap, ...) carry no such meaning and pass."""
    masked = sys.modules.get("numpy.ma")  # not imported: no value can be a masked array
    if masked is not None and isinstance(array, masked.MaskedArray):
        raise TypeError(f"{what}: got a numpy masked array, whose mask compiled code would "
                        f"ignore (it reads the masked elements too); pass .filled(value) "
                        f"for its elements with the masked ones replaced, or .data for "
                        f"every element as it is")


def _element_strides(array: np.ndarray[Any, Any], what: str) -> tuple[int, ...]:
    itemsize = array.itemsize
    # The stride of a dimension of 0 or 1 elements (of any dimension of an empty array)
    # carries no information: never checked.
    free = _free_axes(array)
    if any(s % itemsize for axis, s in enumerate(array.strides) if axis not in free):
        raise ValueError(f"{what}: strides {array.strides} are not a multiple of the item "
                         f"size {itemsize}; pass a copy")
    return tuple(s // itemsize for s in array.strides)


def _free_axes(array: np.ndarray[Any, Any]) -> set[int]:
    """The axes whose stride no element's address depends on: those of 0 or 1 elements,
    every axis of an empty array."""
    if array.size == 0:
        return set(range(array.ndim))
    return {axis for axis, size in enumerate(array.shape) if size <= 1}


def _check_layout(array: np.ndarray[Any, Any], memref: MemRefType, strides: tuple[int, ...],
                  what: str) -> tuple[int, ...]:
    """``strides`` checked against ``memref``'s layout; those of free axes (see
    :func:`_free_axes`) made what a static layout declares."""
    if memref.strides is None:
        if not array.flags.c_contiguous:
            raise ValueError(
                f"{what}: {memref.mlir} has the identity layout, so it needs a C-contiguous "
                f"array (got strides {array.strides}); pass np.ascontiguousarray(...) or "
                f"declare a strided layout such as strided<[?, ...], offset: ?>")
        return strides
    free = _free_axes(array)
    for axis, (want, got) in enumerate(zip(memref.strides, strides)):
        if want is not None and want != got and axis not in free:
            raise ValueError(f"{what}: {memref.mlir} needs stride {want} in dim {axis}, "
                             f"the array has {got} (in elements)")
    return tuple(got if want is None or axis not in free else want
                 for axis, (want, got) in enumerate(zip(memref.strides, strides)))


def descriptor_for_argument(value: Any, array_type: MemRefType | TensorType, what: str,
                            read_only: bool = False) -> tuple[Any, np.ndarray[Any, Any]]:
    """Check ``value`` against a memref or tensor parameter and describe it.

    Returns the descriptor (aliasing the array's memory) and the array it aliases, which
    the caller keeps alive for the duration of the call. A tensor is value-semantic: a
    non-contiguous array is copied; a memref is never copied, so its layout must admit the
    array's strides, and the array must be writable unless the function never writes the
    memref (``read_only``). ``what`` names the parameter in errors.
    """
    if isinstance(array_type, TensorType):
        array = _check_array(value, array_type.element, array_type.shape, what,
                             array_type.mlir)
        array = np.ascontiguousarray(array)
        strides = _element_strides(array, what)
        static_offset = 0
    else:
        array = _check_array(value, array_type.element, array_type.shape, what,
                             array_type.mlir)
        if not (read_only or array.flags.writeable):
            raise ValueError(f"{what}: the array is read-only, but the function may write "
                             f"this memref; pass a writable copy")
        strides = _check_layout(array, array_type, _element_strides(array, what), what)
        static_offset = array_type.offset or 0
    return _describe(array, strides, static_offset), array


def descriptor_for_unranked(value: Any, unranked: UnrankedMemRefType, what: str,
                            ) -> tuple[UnrankedDescriptor, Any, np.ndarray[Any, Any]]:
    """Check ``value`` against an unranked memref parameter and describe it.

    Returns the unranked descriptor, the ranked one it points to and the array; the
    caller keeps all three alive for the duration of the call.
    """
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array for {unranked.mlir}, "
                        f"got {type(value).__name__}")
    array = _check_array(value, unranked.element, (None,) * value.ndim, what, unranked.mlir)
    if not array.flags.writeable:
        raise ValueError(f"{what}: the array is read-only, but a memref can be written "
                         f"through; pass a writable copy")
    ranked = _describe(array, _element_strides(array, what), 0)
    return UnrankedDescriptor(array.ndim, ctypes.addressof(ranked)), ranked, array


def _describe(array: np.ndarray[Any, Any], strides: tuple[int, ...], static_offset: int) -> Any:
    descriptor = descriptor_type(array.ndim)()
    address = array.ctypes.data
    # The descriptor's offset must equal a static offset in the layout; shift the base.
    aligned = address - static_offset * array.itemsize
    descriptor.allocated = aligned
    descriptor.aligned = aligned
    descriptor.offset = static_offset
    if array.ndim:
        descriptor.sizes[:] = array.shape
        descriptor.strides[:] = strides
    return descriptor


def result_array(value: Any, memref: MemRefType, what: str) -> np.ndarray[Any, Any]:
    """``value``, a callback's result for ``memref``, checked (naming ``what`` in the
    error) and as a C-contiguous array: what :func:`fill_descriptor_with_copy` copies
    (and what a native trampoline's converter returns)."""
    array = _check_array(value, memref.element, memref.shape, what, memref.mlir)
    if memref.strides is not None and any(s is not None for s in memref.strides):
        raise ValueError(f"{what}: cannot return an array for {memref.mlir}, whose layout has "
                         f"static strides")
    return np.ascontiguousarray(array)


def fill_descriptor_with_copy(descriptor: Any, value: Any, memref: MemRefType,
                              what: str) -> None:
    """Copy ``value`` into fresh ``malloc`` memory and describe it in ``descriptor``.

    For a callback's memref result: the compiled code owns the copy and may ``free`` it.
    The layout is row-major contiguous, which fits the identity layout and any strided
    layout with dynamic strides.
    """
    array = result_array(value, memref, what)
    nbytes = max(array.nbytes, 1)
    address = ffi.malloc(nbytes)
    if not address:
        raise MemoryError(f"{what}: malloc of {nbytes} bytes failed")
    target = _raw_view(address, array.shape, _contiguous_strides(array), array.dtype, None)
    target[...] = array
    descriptor.allocated = address
    descriptor.aligned = address
    descriptor.offset = 0
    if array.ndim:
        descriptor.sizes[:] = array.shape
        descriptor.strides[:] = [s // array.itemsize for s in _contiguous_strides(array)]


def _contiguous_strides(array: np.ndarray[Any, Any]) -> tuple[int, ...]:
    strides = []
    step = array.itemsize
    for size in reversed(array.shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
