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
(CSR, CSC): a matrix whose index arrays were changed in place after scipy checked them
must be told (``A.has_canonical_format = False``), as scipy's own routines need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .sparseformat import SparseTensorType

__all__ = ["from_buffers", "index_dtype", "to_buffers"]

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
    sparse = _sparse_module()
    wanted = t.format.scipy
    if not sparse.issparse(value):
        kind = ("a dense numpy array" if isinstance(value, np.ndarray)
                else type(value).__name__)
        fix = (f"; pass scipy.sparse.{wanted}_array({name})"
               if isinstance(value, np.ndarray) else "")
        raise TypeError(f"{what}: expected {_describe_format(t)} for {t.format.name} "
                        f"{t.mlir}, got {kind}{fix}")
    if value.ndim != t.rank:
        raise ValueError(f"{what}: expected a {t.rank}-D sparse array for {t.mlir}, got a "
                         f"{value.ndim}-D one of shape {value.shape}")
    if value.format != wanted:
        raise TypeError(f"{what}: expected {_describe_format(t)} for the {t.format.name} "
                        f"format, got a {value.format.upper()} one; pass {name}.to{wanted}() "
                        f"(a copy)")
    if value.dtype != t.element.dtype:
        raise TypeError(f"{what}: expected {t.element.dtype} values for {t.mlir}, got "
                        f"{value.dtype}; pass {name}.astype(np.{t.element.dtype.name})")
    shape = tuple(int(d) for d in value.shape)
    for dim, (static, actual) in enumerate(zip(t.shape, shape)):
        if static is not None and static != actual:
            raise ValueError(f"{what}: dim {dim} is {actual}, but {t.mlir} has {static}")
    converted = _STORAGE[t.format.name](value, shape, what)
    levels = [shape[d] for d in t.format.dim_order]
    widths = {"pos": t.pos_width, "crd": t.crd_width}
    buffers = []
    for buffer, array in zip(t.format.buffers, converted):
        if buffer.kind == "val":
            buffers.append(np.ascontiguousarray(array))
            continue
        width = widths[buffer.kind]
        limit = _largest(buffer.kind, levels, array, buffer.level)
        buffers.append(_as_width(array, width, limit, what, buffer.kind))
    return [*buffers, *levels]


def _largest(kind: str, levels: list[int], array: np.ndarray, level: int) -> int:
    """The largest value ``array`` holds, known without reading it all: a position is at
    most the entries' count (its last value), a coordinate less than its level's size."""
    if kind == "pos":
        return int(array[-1]) if array.size else 0
    return max(levels) - 1 if array.size else 0


def _as_width(array: np.ndarray, width: int, largest: int, what: str, kind: str
              ) -> np.ndarray:
    dtype = index_dtype(width)
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    if largest > np.iinfo(dtype).max:
        spelled = "index" if width == 0 else f"i{width}"
        field = "posWidth" if kind == "pos" else "crdWidth"
        raise ValueError(f"{what}: {'a position' if kind == 'pos' else 'a coordinate'} of "
                         f"{largest} overflows the encoding's {field} ({spelled}); declare a "
                         f"wider {field}")
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
    if not value.has_canonical_format:
        if np.any(np.diff(indptr) < 0):
            raise ValueError(f"{what}: indptr decreases: not a valid "
                             f"{value.format.upper()} matrix")
        _check_range(indices, minor, what, "index")
        value = value.copy()  # the caller's matrix is never changed
        value.sum_duplicates()
        indptr, indices = value.indptr, value.indices
    # Sorted and unique within each row: its first and last indices bound the rest.
    starts, ends = indptr[:-1], indptr[1:]
    filled = ends > starts
    if filled.any():
        first = indices[starts[filled]]
        last = indices[ends[filled] - 1]
        if int(first.min()) < 0 or int(last.max()) >= minor:
            _check_range(indices, minor, what, "index")
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


def _sorted_coords(value: Any, shape: tuple[int, ...], what: str,
                   unique: bool) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The coordinates and values of a COO array, sorted (row-major), unique if asked,
    and in range: the array's own where they already are."""
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
    steps = np.diff(key)
    if bool(np.all(steps > 0)) or (not unique and bool(np.all(steps >= 0))):
        return coords, data
    copy = value.copy()  # the caller's array is never changed
    if unique:
        copy.sum_duplicates()
        return tuple(copy.coords), copy.data
    order = np.argsort(key, kind="stable")
    return tuple(c[order] for c in coords), data[order]


def _coo(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (rows, cols), data = _sorted_coords(value, shape, what, unique=False)
    pairs = np.empty((data.size, 2), dtype=np.result_type(rows, cols))
    pairs[:, 0], pairs[:, 1] = rows, cols  # MLIR's COO keeps (row, column) pairs
    return [np.array([0, data.size]), pairs.reshape(-1), data]


def _coo_soa(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (rows, cols), data = _sorted_coords(value, shape, what, unique=False)
    return [np.array([0, data.size]), rows, cols, data]


def _vector(value: Any, shape: tuple[int, ...], what: str) -> list[np.ndarray]:
    (coords,), data = _sorted_coords(value, shape, what, unique=True)
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
        made = sparse.csr_array((values, cols, np.cumsum(counts)), shape=shape, copy=False)
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
