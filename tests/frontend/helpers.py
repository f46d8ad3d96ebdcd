"""Run a @jit function compiled and as plain Python, and compare everything."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(
            same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)) and \
            np.asarray(a).dtype == np.asarray(b).dtype
    if isinstance(a, float) or isinstance(b, float) or isinstance(a, np.floating):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return True
        return fa == fb and math.copysign(1, fa) == math.copysign(1, fb)
    return bool(a == b)


def _copy(value: Any) -> Any:
    """A copy keeping an array's layout (deepcopy makes views contiguous)."""
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous and value.ndim:
        out = np.empty((*value.shape[:-1], value.shape[-1] * 2), value.dtype)[..., ::2]
        out[...] = value
        return out
    return copy.deepcopy(value)


def check(f: Any, *args: Any) -> Any:
    """Call ``f`` compiled and ``f.py_func`` on copies of ``args``; the results, the
    raised exception types and the arrays after the call all agree."""
    mine, theirs = tuple(map(_copy, args)), tuple(map(_copy, args))
    try:
        expected = f.py_func(*theirs)
    except Exception as exc:  # the compiled call raises the same type
        try:
            f(*mine)
        except type(exc):
            return None
        raise AssertionError(f"Python raised {exc!r}, the compiled call did not") from exc
    got = f(*mine)
    assert same(got, expected), f"{f.__name__}{args}: compiled {got!r}, Python {expected!r}"
    for a, b in zip(mine, theirs):
        if isinstance(a, np.ndarray):
            assert same(a, b), f"{f.__name__}: arrays differ after the call: {a} vs {b}"
    return got
