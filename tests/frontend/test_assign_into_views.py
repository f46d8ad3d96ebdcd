"""Assignments into views (``out[:] = a * x + b``, ``a += b``, ``a[1:] = a[:-1]``):
written straight into the target when no operand shares memory with it, through a copy
when one does, with Python's results either way (each compared with plain Python,
serial and ``parallel=True``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pymlirjit import jit

from .helpers import check


def fused_into(out, x):
    out[:] = x * 2.0 + 1.0


def fused_shifted_right(a):
    a[1:] = a[:-1] * 2.0 + 1.0  # reads elements the loop would already have written


def fused_shifted_left(a):
    a[:-1] = a[1:] + a[:-1]


def fused_in_place(a):
    a[:] = a * a - 1.0  # the same elements in the same order: no copy needed


def fused_transposed(m):
    m[:, :] = m.T * 1.0


def fused_row_from_rows(m):
    m[0] = m[1] + m[2]


def fused_broadcast(m, v):
    m[1:, :] = v * 2.0


def fused_ufunc(m):
    m[:, 1:] = np.sqrt(m[:, :-1]) + m[:, 1:]


def fused_strided(out, x):
    out[:] = x[::2] + 1.0


def fused_converted(out, x):
    out[:] = x * 2.5  # to out's dtype, as numpy's assignment casts


def fused_wrong_shape(out, x):
    out[:3] = x * 2.0


def copied_shifted(a):
    a[1:] = a[:-1]


def added_shifted(a):
    a[1:] += a[:-1]


def added_self(a):
    a += a


def added_other(a, b):
    a += b


def copied_rows(m):
    m[1:, :] = m[:-1, :]


def copied_transposed(m):
    m[:, :] = m.T


CASES: list[tuple[Any, Any]] = [
    (fused_into, lambda: (np.zeros(7), np.arange(7.0))),
    (fused_into, lambda: (np.zeros(0), np.arange(0.0))),
    (fused_shifted_right, lambda: (np.arange(9.0),)),
    (fused_shifted_left, lambda: (np.arange(9.0),)),
    (fused_in_place, lambda: (np.arange(9.0),)),
    (fused_transposed, lambda: (np.arange(16.0).reshape(4, 4),)),
    (fused_row_from_rows, lambda: (np.arange(12.0).reshape(3, 4),)),
    (fused_broadcast, lambda: (np.zeros((3, 4)), np.arange(4.0))),
    (fused_ufunc, lambda: (np.arange(12.0).reshape(3, 4),)),
    (fused_strided, lambda: (np.zeros(5), np.arange(10.0))),
    (fused_converted, lambda: (np.zeros(5, np.float32), np.arange(5.0))),
    (fused_converted, lambda: (np.zeros(5, np.int64), np.arange(5.0))),
    (fused_wrong_shape, lambda: (np.zeros(5), np.arange(5.0))),
    (copied_shifted, lambda: (np.arange(9.0),)),
    (added_shifted, lambda: (np.arange(9.0),)),
    (added_self, lambda: (np.arange(9.0),)),
    (added_other, lambda: (np.arange(9.0), np.ones(9))),
    (copied_rows, lambda: (np.arange(12.0).reshape(3, 4),)),
    (copied_transposed, lambda: (np.arange(16.0).reshape(4, 4),)),
]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("f, make", CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_views_get_what_python_gives(f: Any, make: Any, parallel: bool) -> None:
    kernel = jit(parallel=parallel)(f)
    for _ in range(2):
        check(kernel, *make())


def test_a_view_of_a_parameter_is_written_through() -> None:
    kernel = jit(fused_into)
    base = np.zeros(10)
    kernel(base[2:9], np.arange(7.0))  # a view the caller keeps
    np.testing.assert_array_equal(base, [0, 0, *(np.arange(7.0) * 2 + 1), 0])


def windows(a, i, j, n):
    a[i:i + n] = a[j:j + n] * 1.0 + 0.0


def strided_windows(a, i, j, n):
    a[i:i + 2 * n:2] = a[j:j + n] - 0.0


def added_windows(a, i, j, n):
    a[i:i + n] += a[j:j + n]


@pytest.mark.parametrize("f", [windows, strided_windows, added_windows],
                         ids=lambda f: f.__name__)
def test_every_overlap_of_two_windows_gives_what_python_gives(f: Any) -> None:
    kernel = jit(f)
    for n in range(0, 5):
        for i in range(0, 12 - 2 * n):
            for j in range(0, 12 - n):
                check(kernel, np.arange(12.0), i, j, n)
