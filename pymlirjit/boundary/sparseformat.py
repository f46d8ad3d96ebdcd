"""The sparse tensor formats that cross the Python boundary, one row each.

A ranked tensor with a ``#sparse_tensor.encoding`` crosses as a scipy.sparse array. Each
row of :data:`FORMATS` names the level types it matches (MLIR's printed map), the storage
buffers MLIR's inline sparse code (``sparsifier{enable-runtime-library=false}``) keeps for
it, in MLIR's order, and the scipy format it becomes. :func:`sparse_format` reads an
encoding's text; everything else (the flat C signature, the MLIR wrapper, the scipy
conversions) is derived from the row (see :mod:`pymlirjit.boundary.sparse`).

This module imports nothing of pymlirjit: :mod:`pymlirjit.boundary.types` imports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["FORMATS", "Buffer", "SparseFormat", "SparseTensorType", "sparse_format"]


@dataclass(frozen=True)
class Buffer:
    """One storage buffer: ``kind`` is ``"pos"``, ``"crd"`` or ``"val"``; ``level`` the
    level it belongs to (``-1`` for the values); ``stride`` how many coordinates it holds
    per entry (2 for COO's coordinates, stored as (row, column) pairs)."""

    kind: str
    level: int
    stride: int = 1


@dataclass(frozen=True)
class SparseFormat:
    """A storage format: its name, MLIR's map of it, the dims in level order, its
    buffers in MLIR's storage order, and the scipy format it crosses as."""

    name: str
    map: str
    dim_order: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    scipy: str

    @property
    def rank(self) -> int:
        return len(self.dim_order)


_P, _C, _V = "pos", "crd", "val"

#: One row per format: everything about passing it is derived from these fields.
FORMATS: tuple[SparseFormat, ...] = (
    SparseFormat("CSR", "(d0, d1) -> (d0 : dense, d1 : compressed)", (0, 1),
                 (Buffer(_P, 1), Buffer(_C, 1), Buffer(_V, -1)), "csr"),
    SparseFormat("CSC", "(d0, d1) -> (d1 : dense, d0 : compressed)", (1, 0),
                 (Buffer(_P, 1), Buffer(_C, 1), Buffer(_V, -1)), "csc"),
    SparseFormat("DCSR", "(d0, d1) -> (d0 : compressed, d1 : compressed)", (0, 1),
                 (Buffer(_P, 0), Buffer(_C, 0), Buffer(_P, 1), Buffer(_C, 1),
                  Buffer(_V, -1)), "csr"),
    SparseFormat("COO", "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)", (0, 1),
                 (Buffer(_P, 0), Buffer(_C, 0, 2), Buffer(_V, -1)), "coo"),
    SparseFormat("COO (SoA)",
                 "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton(soa))", (0, 1),
                 (Buffer(_P, 0), Buffer(_C, 0), Buffer(_C, 1), Buffer(_V, -1)), "coo"),
    SparseFormat("sparse vector", "(d0) -> (d0 : compressed)", (0,),
                 (Buffer(_P, 0), Buffer(_C, 0), Buffer(_V, -1)), "coo"),
)
_BY_MAP = {f.map: f for f in FORMATS}

_ENCODING = re.compile(r"^#sparse_tensor\.encoding<\{ map = (?P<map>.+?)"
                       r"(?:, posWidth = (?P<pos>\d+))?(?:, crdWidth = (?P<crd>\d+))? \}>$")


@dataclass(frozen=True)
class SparseTensorType:
    """A ranked tensor with a sparse encoding of a format of :data:`FORMATS`: at a
    kernel's boundary it is a scipy.sparse array. ``element`` is a
    :class:`pymlirjit.boundary.types.ScalarType`; ``pos_width``/``crd_width`` are the
    encoding's (0: ``index``); ``mlir`` is the whole type as MLIR prints it."""

    element: Any
    shape: tuple[int | None, ...]
    format: SparseFormat
    pos_width: int
    crd_width: int
    mlir: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return self.mlir


def sparse_format(encoding: str) -> tuple[SparseFormat, int, int]:
    """The format, position width and coordinate width of an encoding as MLIR prints
    it; TypeError naming the formats that cross if it is none of them."""
    match = _ENCODING.match(encoding)
    found = _BY_MAP.get(match["map"]) if match is not None else None
    if match is None or found is None:
        names = ", ".join(f.name for f in FORMATS)
        raise TypeError(f"not a sparse format that crosses the Python boundary (those that "
                        f"do: {names}; with posWidth/crdWidth only)")
    return found, int(match["pos"] or 0), int(match["crd"] or 0)
