"""MLIR's printing utilities (``printF64``, ``vector.print``'s calls, ``printMemrefF32``
...) through Python's ``sys.stdout``.

MLIR's runner utilities write to the C ``stdout``: ``contextlib.redirect_stdout``,
pytest's capsys and notebooks see nothing, and piped output comes out of order with
Python's prints (two buffers). A module whose lowered code calls only print symbols
served here (and no other definition is given for them) links them to the built-in
callbacks of :func:`print_callbacks`; each call looks at ``sys.stdout`` then:

- when it is the process's fd 1 (a terminal, a pipe, the ``pymlirjit run`` CLI), it
  flushes ``sys.stdout``, calls MLIR's own function (the same bytes as ``mlir-runner``)
  and flushes C's ``stdout``: the two streams stay in order;
- otherwise it writes the text MLIR's function would print to ``sys.stdout``, formatted
  here as MLIR's runtime formats it (C's ``%g``, ``-nan``, the memref layout).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..boundary.callback import Callback
from ..boundary.ffi import fflush
from ..boundary.signature import Signature
from ..boundary.types import ScalarType, f32, f64, i16, i64, ptr
from ..lowering.pipeline import runtime_library

__all__ = ["PRINT_SYMBOLS", "format_float", "format_memref", "print_callbacks",
           "print_symbols_to_bind"]

_C_UTILS, _UTILS, _F16_UTILS = "mlir_c_runner_utils", "mlir_runner_utils", "mlir_float16_utils"
_MASK64 = (1 << 64) - 1


def format_float(value: float) -> str:
    """``value`` as MLIR's ``printF64`` prints it: C's ``%g``, and ``-nan`` for a nan
    whose sign bit is set."""
    if math.isnan(value) and math.copysign(1.0, value) < 0:
        return "-nan"
    return f"{value:g}"


def _half(bits: int) -> str:
    return format_float(float(np.array(bits & 0xFFFF, np.uint16).view(np.float16)))


def _bfloat(bits: int) -> str:
    return format_float(float(np.array((bits & 0xFFFF) << 16, np.uint32).view(np.float32)))


def _complex(value: complex) -> str:
    return f"({format_float(value.real)},{format_float(value.imag)})"


#: Each memref printer's element: numpy dtype and how ``std::ostream <<`` writes one.
_ELEMENTS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "F32": ("float32", lambda v: format_float(float(v))),
    "F64": ("float64", lambda v: format_float(float(v))),
    "F16": ("float16", lambda v: format_float(float(v))),
    "BF16": ("uint16", lambda v: _bfloat(int(v))),
    "I16": ("int16", lambda v: str(int(v))),
    "I32": ("int32", lambda v: str(int(v))),
    "I64": ("int64", lambda v: str(int(v))),
    "Ind": ("int64", lambda v: str(int(v))),
    "C32": ("complex64", lambda v: _complex(complex(v))),
    "C64": ("complex128", lambda v: _complex(complex(v))),
}


def format_memref(element: str, rank: int, descriptor: int) -> str:
    """What MLIR's ``printMemref<element>`` prints for the ranked descriptor at address
    ``descriptor`` (``{allocated, aligned, offset, sizes[rank], strides[rank]}``)."""
    dtype, show = np.dtype(_ELEMENTS[element][0]), _ELEMENTS[element][1]
    words = (ctypes.c_int64 * (3 + 2 * rank)).from_address(descriptor)
    aligned, offset = words[1] & _MASK64, words[2]
    sizes, strides = list(words[3:3 + rank]), list(words[3 + rank:3 + 2 * rank])

    def read(position: int) -> str:
        # As MLIR's printer, it reads the element at the offset even of an empty memref.
        raw = ctypes.string_at(aligned + position * dtype.itemsize, dtype.itemsize)
        return show(np.frombuffer(raw, dtype)[0])

    parts = [f"Unranked Memref base@ = {hex(aligned) if aligned else '0'} rank = {rank} "
             f"offset = {offset} sizes = [{', '.join(map(str, sizes))}] "
             f"strides = [{', '.join(map(str, strides))}] data = \n"]
    if rank == 0:
        parts += ["[", read(offset), "]"]
    else:
        _data(parts, read, rank, rank, offset, sizes, strides)
    parts.append("\n")
    return "".join(parts)


def _data(parts: list[str], read: Callable[[int], str], dim: int, rank: int, offset: int,
          sizes: Sequence[int], strides: Sequence[int]) -> None:
    """MLIR's ``MemRefDataPrinter::print``: rows separated by ``", \\n"``, each indented
    by its depth, elements by a comma and ``rank`` spaces."""
    if dim == 0:
        parts.append(read(offset))
        return
    inner_sizes, inner_strides = sizes[1:], strides[1:]
    parts.append("[")
    _data(parts, read, dim - 1, rank, offset, inner_sizes, inner_strides)
    if sizes[0] <= 1:
        parts.append("]")
        return
    separator = ", \n" if dim > 1 else ", "
    indent = " " * (rank - dim + 1)
    parts.append(separator)
    for i in range(1, sizes[0] - 1):
        parts.append(indent)
        _data(parts, read, dim - 1, rank, offset + i * strides[0], inner_sizes, inner_strides)
        parts.append(separator)
    parts.append(indent)
    _data(parts, read, dim - 1, rank, offset + (sizes[0] - 1) * strides[0], inner_sizes,
          inner_strides)
    parts.append("]")


def _unranked(element: str, rank: int, descriptor: int) -> str:
    return format_memref(element, rank, descriptor)


def _ciface_unranked(element: str, address: int) -> str:
    rank, descriptor = (ctypes.c_int64 * 2).from_address(address)
    return format_memref(element, rank, descriptor & _MASK64)


def _text(text: str) -> Callable[[], str]:
    return lambda: text


#: symbol -> (parameter types, the text it prints from its arguments, its library).
PRINT_SYMBOLS: dict[str, tuple[tuple[ScalarType, ...], Callable[..., str], str]] = {
    "printF64": ((f64,), format_float, _C_UTILS),
    "printF32": ((f32,), format_float, _C_UTILS),
    "printI64": ((i64,), str, _C_UTILS),
    "printU64": ((i64,), lambda v: str(v & _MASK64), _C_UTILS),
    "printF16": ((i16,), _half, _F16_UTILS),
    "printBF16": ((i16,), _bfloat, _F16_UTILS),
    "printString": ((ptr,), lambda p: ctypes.string_at(p).decode("utf-8", "replace"),
                    _C_UTILS),
    "printOpen": ((), _text("( "), _C_UTILS),
    "printClose": ((), _text(" )"), _C_UTILS),
    "printComma": ((), _text(", "), _C_UTILS),
    "printNewline": ((), _text("\n"), _C_UTILS),
    **{f"_mlir_ciface_printMemref{e}": ((ptr,), functools.partial(_ciface_unranked, e),
                                        _UTILS) for e in _ELEMENTS},
    **{f"printMemref{e}": ((i64, ptr), functools.partial(_unranked, e), _UTILS)
       for e in ("F32", "F64", "I32", "I64", "Ind", "C32", "C64")},
}


def _is_process_stdout(out: Any) -> bool:
    try:
        return bool(out.fileno() == 1)
    except (AttributeError, OSError, ValueError):  # StringIO, capsys, a notebook's stream
        return False


@functools.cache
def _native(symbol: str) -> Any:
    """MLIR's own function ``symbol``, typed as the print symbols' table says."""
    params, _, library = PRINT_SYMBOLS[symbol]
    function = getattr(ctypes.CDLL(runtime_library(library)), symbol)
    function.argtypes = [t.ctype for t in params]
    function.restype = None
    return function


def _printer(symbol: str) -> Callable[..., None]:
    text = PRINT_SYMBOLS[symbol][1]

    def print_(*args: Any) -> None:
        out = sys.stdout
        if out is None:
            return
        if _is_process_stdout(out):  # MLIR's bytes, in order with Python's
            out.flush()
            _native(symbol)(*args)
            fflush(None)
        else:
            out.write(text(*args))
    print_.__name__ = print_.__qualname__ = symbol
    return print_


@functools.cache
def print_callbacks() -> dict[str, Callback]:
    """The built-in callback of each print symbol, by symbol (the callback's name is
    ``pymlirjit.<symbol>``: no user callback's name, so a cache entry finds it)."""
    return {symbol: Callback(_printer(symbol), Signature.of(params, ()),
                             name=f"pymlirjit.{symbol}")
            for symbol, (params, _, _) in PRINT_SYMBOLS.items()}


def print_symbols_to_bind(external: Iterable[str], taken: Iterable[str],
                          shared_libs: Iterable[str]) -> tuple[str, ...]:
    """The print symbols of ``external`` (a lowered module's declarations), but those
    ``taken`` (linked to a callback or an extern of the user's), to link to
    :func:`print_callbacks`: all of them, or none where one is not served here (its C
    output would come out of order with the others') or is defined by a library of
    ``shared_libs`` that is not MLIR's (the user's own ``printF64``)."""
    printing = {n for n in external if n.startswith(("print", "_mlir_ciface_print"))}
    printing -= set(taken)
    served = printing & PRINT_SYMBOLS.keys()
    if not served or printing - served:
        return ()
    folder = os.path.dirname(runtime_library(_C_UTILS))
    for path in shared_libs:
        if os.path.dirname(path) != folder and any(
                hasattr(ctypes.CDLL(path), symbol) for symbol in served):
            return ()
    return tuple(sorted(served))
