"""Python scalars to and from their C forms, both directions, driven by the boundary form.

A scalar crosses the C ABI as :attr:`pymlirjit.types.ScalarType.boundary` says: as itself,
as i8 (i1), as the bits of a float ctypes cannot express (f16, bf16, the f8 types), or as
(re, im). Every Python-side conversion of a scalar (kernel arguments and results, callback
parameters and results, by value or in a result struct) is one of the functions here, so
a new scalar type needs no conversion code of its own.

>>> from pymlirjit.types import bf16, complex64, i1
>>> to_c(complex64)(1 + 2j, "x")
(1.0, 2.0)
>>> from_c(bf16)(to_c(bf16)(1.5, "x")[0])
1.5
>>> from_c(i1)(1)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .types import ScalarType, to_python_scalar

__all__ = ["bits_of", "from_bits", "from_c", "from_memory", "to_c", "to_memory"]


def bits_of(t: ScalarType, value: float) -> int:
    """The bits of ``value`` as the float type ``t`` (f16, bf16, f8), as a signed int."""
    signed = np.dtype(f"i{t.dtype.itemsize}")
    return int(np.array(value, dtype=t.dtype).view(signed))


def from_bits(t: ScalarType, bits: int) -> float:
    """The ``t`` value (f16, bf16, f8) whose bits are ``bits`` (signed or unsigned)."""
    itemsize = t.dtype.itemsize
    mask = (1 << (8 * itemsize)) - 1
    return float(np.array(bits & mask, dtype=f"u{itemsize}").view(t.dtype))


def _identity(value: Any) -> Any:
    return value


def to_c(t: ScalarType, exact: bool = False) -> Callable[[Any, str], tuple[Any, ...]]:
    """A function checking a Python value for ``t`` (naming it ``what`` in errors) and
    returning the C arguments it crosses as (one per type of ``t.boundary``).
    ``exact``: convert other widths only when exact (kernel arguments; see
    :func:`pymlirjit.types.to_python_scalar`)."""
    if t.crossing == "pair":
        def pair(value: Any, what: str) -> tuple[Any, ...]:
            number = to_python_scalar(t, value, what, exact)
            return (number.real, number.imag)
        return pair
    if t.crossing == "bits":
        return lambda value, what: (bits_of(t, to_python_scalar(t, value, what, exact)),)
    if t.crossing == "widened":
        return lambda value, what: (int(to_python_scalar(t, value, what, exact)),)
    return lambda value, what: (to_python_scalar(t, value, what, exact),)


def from_c(t: ScalarType) -> Callable[..., Any]:
    """A function taking the C values of ``t`` (``len(t.boundary)`` of them, as ctypes
    hands them over) and returning the Python value."""
    if t.crossing == "pair":
        return complex
    if t.crossing == "bits":
        return lambda bits: from_bits(t, bits)
    if t.crossing == "widened":
        return bool
    return _identity


def to_memory(t: ScalarType, value: Any, what: str) -> Any:
    """A Python value checked for ``t`` and made what a ctypes field of ``t.ctype`` holds."""
    number = to_python_scalar(t, value, what)
    if t.crossing == "pair":
        return t.ctype(number.real, number.imag)
    if t.crossing == "bits":
        return bits_of(t, number) & ((1 << (8 * t.dtype.itemsize)) - 1)
    return number


def from_memory(t: ScalarType) -> Callable[[Any], Any]:
    """A function turning what a ctypes field of ``t.ctype`` holds into the Python value."""
    if t.crossing == "pair":
        return lambda field: complex(field.real, field.imag)
    return from_c(t)
