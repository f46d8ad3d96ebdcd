"""scipy.sparse arrays to sparse storage buffers and back (see :mod:`.sparse`).

:func:`to_buffers` checks a scipy.sparse argument against a
:class:`~pymlirjit.boundary.sparseformat.SparseTensorType` (format, rank, element type,
shape, index arrays consistent and in range), naming the parameter in every error, and
returns the buffers and level sizes the wrapper takes: scipy's own arrays where their
dtype is the encoding's width (no copy), converted copies otherwise. Inputs are never
modified: a matrix whose indices are not sorted and unique (where the format needs them
so) is passed as a sorted copy. :func:`from_buffers` makes the scipy.sparse array of a
result, owning the kernel's buffers.

Validity is read from scipy's own cached ``has_canonical_format`` where scipy keeps one
(CSR, CSC), and the range of a canonical matrix's indices is checked once per pair of
index arrays (remembered here, by the matrix's id, while it lives): a matrix whose index
arrays were changed in place after scipy checked them must be told
(``A.has_canonical_format = False``), as scipy's own routines need.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .sparseformat import SparseTensorType

__all__ = ["buffer_converter", "from_buffers", "index_dtype", "to_buffers"]

_INDEX_DTYPES: dict[int, np.dtype[Any]] = {
    0: np.dtype(np.int64), 8: np.dtype(np.int8), 16: np.dtype(np.int16),
    32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def index_dtype(width: int) -> np.dtype[Any]:
    """The numpy dtype of an index buffer of ``width`` bits (0: MLIR's ``index``)."""
    return _INDEX_DTYPES[width]


def _sparse_module() -> Any:
    import scipy.sparse  # only when a sparse kernel is called: scipy takes ~100 ms

    return scipy.sparse


def _describe_format(t: SparseTensorType) -> str:
    article = {"csr": "a CSR", "csc": "a CSC", "coo": "a COO"}[t.format.scipy]
    return f"{article} scipy.sparse {'array' if t.rank == 1 else 'matrix or array'}"


def to_buffers(value: Any, t: SparseTensorType, what: str, name: str) -> list[Any]:
    """The wrapper's arguments for ``value`` (buffers, then level sizes); ``what`` names
    the parameter in errors, ``name`` spells it in the fixes they suggest."""
    return buffer_converter(t, what, name)(value)


def buffer_converter(t: SparseTensorType, what: str, name: str
                     ) -> Callable[[Any], list[Any]]:
    """:func:`to_buffers` for one parameter, with what its type fixes worked out once."""
    sparse = _sparse_module()
    wanted, rank, element = t.format.scipy, t.rank, t.element.dtype
    static = [(d, size) for d, size in enumerate(t.shape) if size is not None]
    storage = _STORAGE[t.format.name]
    order = t.format.dim_order
    widths = {"pos": t.pos_width, "crd": t.crd_width}
    # Per buffer: None for the values, else (dtype, kind, level, stride).
    plan = [None if b.kind == "val" else (index_dtype(widths[b.kind]), b.kind, b.level,
                                          b.stride) for b in t.format.buffers]

    compressed = t.format.name in ("CSR", "CSC")

    def convert(value: Any) -> list[Any]:
        if not sparse.issparse(value):
            raise _not_sparse(value, t, what, name)
        if value.ndim != rank:
            raise ValueError(f"{what}: expected a {rank}-D sparse array for {t.mlir}, got "
                             f"a {value.ndim}-D one of shape {value.shape}")
        if value.format != wanted:
            raise TypeError(f"{what}: expected {_describe_format(t)} for the "
                            f"{t.format.name} format, got a {value.format.upper()} one; "
                            f"pass {name}.to{wanted}() (a copy)")
        if value.dtype != element:
            raise TypeError(f"{what}: expected {element} values for {t.mlir}, got "
                            f"{value.dtype}; pass {name}.astype(np.{element.name})")
        shape = value.shape
        for dim, size in static:
            if shape[dim] != size:
                raise ValueError(f"{what}: dim {dim} is {shape[dim]}, but {t.mlir} has "
                                 f"{size}")
        levels = [shape[d] for d in order]
        buffers: list[Any] = []
        for step, array in zip(plan, storage(value, shape, what)):
            if step is None:
                buffers.append(array if array.flags.c_contiguous and array.flags.writeable
                               else np.array(array, order="C"))
                continue
            dtype, kind, level, stride = step
            if array.dtype == dtype and array.flags.c_contiguous:
                buffers.append(array if array.flags.writeable else array.copy())
                continue
            largest = ((int(array[-1]) if kind == "pos" else
                        (levels[level] if stride == 1 else max(levels)) - 1)
                       if array.size else 0)
            buffers.append(_as_width(array, dtype, largest, what, kind))
        flat = [*buffers, *levels]
        if compressed and buffers[-1] is value.data and value.has_canonical_format:
            # Its index arrays converted to the encoding's widths: kept for the next
            # calls with the same arrays (while the matrix lives), as scipy keeps what
            # it knows of them; the values are its own, so changing them in place is seen.
            _remember(_passed, value, (t, value.indptr, value.indices, value.data, shape,
                                       flat))
        return flat

    if t.format.name in ("CSR", "CSC") and plan[0] is not None and plan[1] is not None:
        return _compressed_converter(t, plan[0][0], plan[1][0], static, convert)
    return convert


def _compressed_converter(t: SparseTensorType, pos: np.dtype[Any], crd: np.dtype[Any],
                          static: list[tuple[int, int]],
                          general: Callable[[Any], list[Any]]) -> Callable[[Any], list[Any]]:
    """The common case of a CSR or CSC parameter, in few steps: a matrix of the
    parameter's index dtypes, passed before as it is (remembered while it lives, with its
    arrays: see the module's docstring), passes again after identity checks; the
    others take the ``general`` path, which checks, converts, copies or raises."""
    wanted, element, csr = t.format.scipy, t.element.dtype, t.format.name == "CSR"

    def convert(value: Any) -> list[Any]:
        try:
            passed = _passed.get(id(value))
            if passed is not None and passed[0]() is value and passed[1] is t:
                # The matrix's state read where scipy keeps it: its ``shape`` and
                # ``has_canonical_format`` properties cost ~150-200 ns each, as much as
                # the rest of this test. A state other than the one expected here (not
                # yet known canonical, or another scipy's attributes) takes the paths
                # below, which ask the properties.
                state = value.__dict__
                if (state["indptr"] is passed[2] and state["indices"] is passed[3]
                        and state["data"] is passed[4] and state["_shape"] == passed[5]
                        and state.get("_has_canonical_format") is True
                        and state.get("_has_sorted_indices", True) is True
                        and passed[2].flags.writeable and passed[3].flags.writeable
                        and passed[4].flags.writeable):  # (see _writable; inline: faster)
                    remembered: list[Any] = passed[6]
                    return remembered
            if value.format != wanted or value.dtype != element or static:
                return general(value)
            indptr, indices, data = value.indptr, value.indices, value.data
        except (AttributeError, KeyError):
            return general(value)
        shape = value.shape
        major, minor = shape if csr else shape[::-1]
        if (indptr.dtype != pos or indices.dtype != crd or not value.has_canonical_format
                or _remembered(_checked, value) != (id(indices), id(indptr), minor)
                or not (indptr.flags.c_contiguous and indices.flags.c_contiguous
                        and data.flags.c_contiguous)
                or not _writable(indptr, indices, data)):
            return general(value)
        nnz = indices.shape[0]
        if (indptr.shape[0] != major + 1 or indptr[0] != 0 or indptr[-1] != nnz
                or data.shape[0] != nnz):
            return general(value)  # which names the inconsistency
        flat = [indptr, indices, data, major, minor]
        _remember(_passed, value, (t, indptr, indices, data, shape, flat))
        return flat
    return convert


#: What pymlirjit remembers of the CSR and CSC matrices it was given, by ``id()`` (scipy's
#: sparse arrays are not hashable; nothing is stored in the caller's object): a weak
#: reference to the matrix (its entry goes when it does), then what is remembered.
#: ``_passed``: a matrix passed as it is: the parameter's type, its arrays, its shape and
#: the wrapper's arguments. ``_checked``: the ids of index arrays found valid, and the dim.
_passed: dict[int, tuple[Any, ...]] = {}
_checked: dict[int, tuple[Any, ...]] = {}


def _remembered(table: dict[int, tuple[Any, ...]], value: Any) -> Any:
    entry = table.get(id(value))
    return entry[1] if entry is not None and entry[0]() is value else None


def _remember(table: dict[int, tuple[Any, ...]], value: Any, what: Any) -> None:
    key = id(value)
    try:
        ref = weakref.ref(value, lambda _: table.pop(key, None))
    except TypeError:  # a matrix type without weak references: nothing remembered
        return
    table[key] = (ref, *what) if table is _passed else (ref, what)


def _writable(*arrays: np.ndarray) -> bool:
    """Whether the wrapper's memrefs may alias ``arrays`` (a memref argument must be
    writable; the sparse code never writes an argument's buffers, but read-only arrays
    are passed as copies rather than trusted)."""
    return all(a.flags.writeable for a in arrays)


def _not_sparse(value: Any, t: SparseTensorType, what: str, name: str) -> TypeError:
    dense = isinstance(value, np.ndarray)
    kind = "a dense numpy array" if dense else type(value).__name__
    fix = f"; pass scipy.sparse.{t.format.scipy}_array({name})" if dense else ""
    return TypeError(f"{what}: expected {_describe_format(t)} for {t.format.name} "
                     f"{t.mlir}, got {kind}{fix}")


def _as_width(array: np.ndarray, dtype: np.dtype[Any], largest: int, what: str, kind: str
              ) -> np.ndarray:
    """``array`` as ``dtype``; ValueError if ``largest`` (the last position, or the
    largest coordinate the level's size allows: a kernel's result may hold it) does not
    fit."""
    if largest > np.iinfo(dtype).max:
        spelled = f"i{dtype.itemsize * 8}"
        field = "posWidth" if kind == "pos" else "crdWidth"
        found = (f"a position of {largest}" if kind == "pos" else
                 f"a dim of {largest + 1} (coordinates up to {largest})")
        raise ValueError(f"{what}: {found} overflows the encoding's {field} ({spelled}); "
                         f"declare a wider {field}")
    return np.ascontiguousarray(array, dtype=dtype)


def _checked_compressed(value: Any, shape: tuple[int, ...], what: str) -> Any:
    """``value`` (CSR or CSC) checked, or a sorted copy where its indices are not sorted
    and unique (scipy's canonical format, which MLIR's compressed levels need)."""
    major = shape[0] if value.format == "csr" else shape[1]
    minor = shape[1] if value.format == "csr" else shape[0]
    indptr, indices = value.indptr, value.indices
    nnz = indices.size
    if (indptr.ndim != 1 or indptr.size != major + 1 or int(indptr[0]) != 0
            or int(indptr[-1]) != nnz or value.data.size != nnz):
        raise ValueError(f"{what}: inconsistent {value.format.upper()} arrays (indptr of "
                         f"{indptr.size} for {major} rows, ending at "
                         f"{int(indptr[-1]) if indptr.size else None}; {nnz} indices, "
                         f"{value.data.size} values)")
    key = (id(indices), id(indptr), minor)
    if _remembered(_checked, value) == key and value.has_canonical_format:
        return value  # checked by an earlier call (see the module's docstring)
    if np.any(indptr[1:] < indptr[:-1]):  # first: scipy's check reads through it
        raise ValueError(f"{what}: indptr decreases: not a valid {value.format.upper()} "
                         f"matrix")
    _check_range(indices, minor, what, "index")
    if value.has_canonical_format:
        _remember(_checked, value, key)  # its arrays: no other array can have their ids
        return value
    value = value.copy()  # the caller's matrix is never changed
    value.sum_duplicates()
    return value


def _check_range(indices: np.ndarray, size: int, what: str, noun: str) -> None:
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= size):
        bad = indices[(indices < 0) | (indices >= size)][0]
        raise ValueError(f"{what}: {noun} {int(bad)} is out of range [0, {size})")


def _csr(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    value = _checked_compressed(value, shape, what)
    return [value.indptr, value.indices, value.data]


def _dcsr(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    value = _checked_compressed(value, shape, what)
    indptr = value.indptr
    rows = np.flatnonzero(indptr[1:] > indptr[:-1])
    row_positions = np.append(indptr[rows], indptr[-1])
    return [np.array([0, rows.size]), rows, row_positions, value.indices, value.data]


def _sorted_coords(value: Any, shape: tuple[int, ...], what: str
                   ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The coordinates and values of a COO array, sorted (row-major), unique and in
    range: the array's own where they already are. Duplicates are summed, as scipy
    means them, for COO's nonunique level too: MLIR would keep them as separate entries,
    and an elementwise kernel (a square) would see the parts, not their sum."""
    coords = tuple(value.coords)
    data = value.data
    for dim, c in enumerate(coords):
        if c.size != data.size:
            raise ValueError(f"{what}: {c.size} coordinates of dim {dim} for {data.size} "
                             f"values")
        _check_range(c, shape[dim], what, f"coordinate of dim {dim}:")
    if data.size < 2 or getattr(value, "has_canonical_format", False):
        return coords, data
    key = coords[0].astype(np.int64)
    if len(coords) == 2:
        key = key * shape[1] + coords[1]
    if bool(np.all(np.diff(key) > 0)):
        return coords, data
    copy = value.copy()  # the caller's array is never changed
    copy.sum_duplicates()
    return tuple(copy.coords), copy.data


def _coo(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (rows, cols), data = _sorted_coords(value, shape, what)
    pairs = np.empty((data.size, 2), dtype=np.result_type(rows, cols))
    pairs[:, 0], pairs[:, 1] = rows, cols  # MLIR's COO keeps (row, column) pairs
    return [np.array([0, data.size]), pairs.reshape(-1), data]


def _coo_soa(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (rows, cols), data = _sorted_coords(value, shape, what)
    return [np.array([0, data.size]), rows, cols, data]


def _vector(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (coords,), data = _sorted_coords(value, shape, what)
    return [np.array([0, data.size]), coords, data]


_STORAGE = {"CSR": _csr, "CSC": _csr, "DCSR": _dcsr, "COO": _coo, "COO (SoA)": _coo_soa,
            "sparse vector": _vector}


def from_buffers(t: SparseTensorType, buffers: list[np.ndarray], shape: tuple[int, ...]
                 ) -> Any:
    """The scipy.sparse array of a result of type ``t`` from its buffers (arrays that
    own the kernel's memory) and dim sizes: CSR (DCSR too), CSC or COO."""
    sparse = _sparse_module()
    name = t.format.name
    values = buffers[-1]
    if name in ("CSR", "CSC"):
        made = getattr(sparse, f"{t.format.scipy}_array")(
            (values, buffers[1], buffers[0]), shape=shape, copy=False)
        made.has_canonical_format = True
        return made
    if name == "DCSR":
        pos0, rows, row_positions, cols = buffers[:4]
        counts = np.zeros(shape[0] + 1, dtype=row_positions.dtype)
        counts[rows[:int(pos0[1])].astype(np.int64) + 1] = np.diff(row_positions)
        # (the row pointer of the columns' dtype: else scipy converts the columns)
        indptr = np.cumsum(counts, dtype=counts.dtype)
        made = sparse.csr_array((values, cols, indptr), shape=shape, copy=False)
        made.has_canonical_format = True
        return made
    if name == "COO":
        pairs = buffers[1].reshape(-1, 2)
        coords: tuple[np.ndarray, ...] = (pairs[:, 0].copy(), pairs[:, 1].copy())
    elif name == "COO (SoA)":
        coords = (buffers[1], buffers[2])
    else:
        coords = (buffers[1],)
    made = sparse.coo_array((values, coords), shape=shape, copy=False)
    if name == "sparse vector":
        made.has_canonical_format = True
    return made
