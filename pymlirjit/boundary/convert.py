"""Python scalars to and from their C forms, both directions, driven by the boundary form.

A scalar crosses the C ABI as :attr:`pymlirjit.boundary.types.ScalarType.boundary` says: as itself,
as i8 (i1), as the bits of a float ctypes cannot express (f16, bf16, the f8 types), or as
(re, im). Every Python-side conversion of a scalar (kernel arguments and results, callback
parameters and results, by value or in a result struct) is one of the functions here, so
a new scalar type needs no conversion code of its own.

>>> from pymlirjit.boundary.types import bf16, complex64, i1
>>> to_c(complex64)(1 + 2j, "x")
(1.0, 2.0)
>>> from_c(bf16)(to_c(bf16)(1.5, "x")[0])
1.5
>>> from_c(i1)(1)
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .types import ScalarType, to_python_scalar

__all__ = ["bits_of", "from_bits", "from_c", "from_memory", "result_scalar", "to_c",
           "to_memory"]


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


def result_scalar(t: ScalarType, value: Any, what: str) -> Any:
    """``value``, a callback's result for ``t``, checked and as a plain Python number
    (naming ``what`` in errors). Any float rounds to ``t``, as a Python float does for a
    kernel argument; a finite value ``t`` cannot hold (``1e300`` for ``f32``) raises
    ``ValueError``, as for a kernel argument, where it would become inf silently; inf and
    nan themselves pass."""
    number = to_python_scalar(t, value, what)
    limits = _limits(t)
    if limits is not None:
        largest, part_dtype = limits
        parts = (number.real, number.imag) if t.kind == "complex" else (number,)
        for part in parts:
            if not -largest <= part <= largest and math.isfinite(part):
                with np.errstate(over="ignore", invalid="ignore"):
                    rounded = float(np.array(part).astype(part_dtype))
                if not math.isfinite(rounded):  # else it rounds down to the largest
                    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                    raise ValueError(f"{what}: {shown} is out of range for {t.mlir}")
    return number


@functools.cache
def _limits(t: ScalarType) -> tuple[float, np.dtype[Any]] | None:
    """The largest finite value of ``t`` (of a part of a complex ``t``) and the dtype of
    such a value; None where every Python float fits (f64, complex<f64>)."""
    if t.kind not in ("float", "complex"):
        return None
    info = np.finfo(t.dtype)
    return None if info.dtype.itemsize >= 8 else (float(info.max), info.dtype)


def to_c(t: ScalarType, exact: bool = False) -> Callable[[Any, str], tuple[Any, ...]]:
    """A function checking a Python value for ``t`` (naming it ``what`` in errors) and
    returning the C arguments it crosses as (one per type of ``t.boundary``).
    ``exact``: convert other widths only when exact (kernel arguments; see
    :func:`pymlirjit.boundary.types.to_python_scalar`); else as a callback's result
    (:func:`result_scalar`)."""
    checked: Callable[[Any, str], Any] = (
        functools.partial(to_python_scalar, t, exact=True) if exact
        else functools.partial(result_scalar, t))
    if t.crossing == "pair":
        def pair(value: Any, what: str) -> tuple[Any, ...]:
            number = checked(value, what)
            return (number.real, number.imag)
        return pair
    if t.crossing == "bits":
        return lambda value, what: (bits_of(t, checked(value, what)),)
    if t.crossing == "widened":
        return lambda value, what: (int(to_python_scalar(t, value, what, exact)),)
    if exact or _limits(t) is None:  # arguments, f64, ints: to_python_scalar checks all
        return lambda value, what: (to_python_scalar(t, value, what, exact),)
    return lambda value, what: (result_scalar(t, value, what),)


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
    """A Python value checked for ``t`` (as a callback's result: :func:`result_scalar`)
    and made what a ctypes field of ``t.ctype`` holds."""
    number = result_scalar(t, value, what)
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
