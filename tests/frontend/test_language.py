"""More of the language, each program compiled and compared with plain Python."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymlirjit import jit

from .helpers import check

SCALE = 2.5
LIMIT = np.float32(0.5)


@jit
def pick(x, y, c):
    if c > 0:  # noqa: SIM108 (the statement form is what is tested)
        a = x
    else:
        a = y
    total = 0.0
    for v in a:
        total += v
    return total


@jit
def swap_in_loop(x, y, n):
    for _ in range(n):
        x, y = y, x
    return x[0] - y[0]


def test_arrays_merge_across_branches_and_loops() -> None:
    x, y = np.arange(3.0), np.ones(2)
    for c in (1, -1):
        check(pick, x, y, c)
    for n in range(4):
        check(swap_in_loop, x, y, n)
    check(pick, x, y[::1], 0)
    check(pick, x, np.ones(6)[::2], 1)  # one contiguous, one strided: a view type


def stats(a):
    lo = a[0]
    hi = a[0]
    for v in a:
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


def scaled_shape(shape, k):
    n, m = shape
    return n * k, m * k


@jit
def uses_tuples(a):
    lo, hi = stats(a[0])
    n, m = scaled_shape(a.shape, 2)
    t = (lo, hi)
    u = t
    return u[0] + u[1] + n + m, t[-1]


def test_tuple_results_and_tuple_parameters() -> None:
    check(uses_tuples, np.arange(6.0).reshape(2, 3))


@jit
def uses_globals(x):
    return x * SCALE + math.pi + LIMIT


def test_globals_are_frozen_constants() -> None:
    check(uses_globals, 2.0)
    check(uses_globals, np.float32(2.0))


def make_closure(k):
    @jit
    def inner(x):
        return x * k

    return inner


def test_closures_freeze_their_cells() -> None:
    assert make_closure(3)(2) == 6
    assert make_closure(1.5)(2) == 3.0


@jit
def views(a):
    row = a[1]
    col = a[:, 2]
    block = a[1:, ::2]
    row[0] = -1.0
    return row, col, block, a[-1, -1], a[1][2]


def test_views_share_memory() -> None:
    a = np.arange(12.0).reshape(3, 4)
    row, col, block, last, item = views(a)
    assert a[1, 0] == -1.0 and row[0] == -1.0  # written through the view
    want = views.py_func(np.arange(12.0).reshape(3, 4))
    for got, exp in zip((row, col, block, last, item), want):
        np.testing.assert_array_equal(got, exp)


@jit
def identity(a):
    return a


def test_returning_an_argument_shares_it() -> None:
    a = np.arange(4.0)
    b = identity(a)
    b[0] = 7.0
    assert a[0] == 7.0


@jit
def make(n, m):
    z = np.zeros((n, m), np.float32)
    o = np.ones(n, dtype=np.int32)
    e = np.empty_like(z)
    for i in range(n):
        for j in range(m):
            e[i, j] = z[i, j] + o[i] * (i + j)
    return e, o


def test_allocations() -> None:
    e, o = check(make, 3, 4)
    assert e.dtype == np.float32 and o.dtype == np.int32
    check(make, 0, 2)


@jit
def while_true(n):
    i = 0
    while True:
        i += 1
        if i * i > n:
            break
    return i


@jit
def nested_returns(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if a[i, j] < 0:
                return i * 100 + j
    return -1


def test_loops_and_early_exits() -> None:
    for n in (0, 5, 99):
        check(while_true, n)
    a = np.ones((3, 4))
    check(nested_returns, a)
    a[2, 1] = -1
    check(nested_returns, a)


@jit
def mathy(x, n):
    return (math.sqrt(x), math.exp(x), math.log(x), math.sin(x), math.floor(x),
            math.ceil(-x), np.sqrt(x), np.exp(np.float32(x)), abs(-n), math.isnan(x),
            math.atan2(x, 1.0), math.hypot(x, 2.0), np.minimum(x, 1.0), int(-x), float(n),
            n ** 2, x ** 0.5, 7 // 2 * 2, -7 % 3, bool(n), round_trip(x))


def round_trip(v):
    return float(int(v * 100)) / 100


def test_math_functions() -> None:
    for x, n in ((2.25, 3), (0.5, -4), (10.0, 0)):
        got = mathy(x, n)
        want = mathy.py_func(x, n)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=1e-6), (got, want)
            assert type(g) is type(w) or isinstance(w, np.generic)


@jit
def defaults(a, b=2, c=0.5):
    return a * b + c


def test_defaults_and_keywords() -> None:
    assert defaults(1) == 2.5
    assert defaults(1, c=1.0) == 3.0
    assert defaults(b=3, a=1) == 3.5


@jit
def slices(x, a):
    x[1:-1] += 1
    x[0] = x[-1]
    a[0, :] = 5
    a[1:, 1:] *= 2.0
    a[:, 0] = x[:3]
    x[1:] = x[:-1]  # overlapping: numpy copies first
    return x


def test_slice_assignment_edges() -> None:
    check(slices, np.arange(6.0), np.ones((3, 3)))
    with pytest.raises(ValueError):
        slices(np.arange(2.0), np.ones((3, 3)))  # x[:3] is shorter than a[:, 0]


@jit
def reductions(a, b):
    return (a.sum(), a.min(), a.max(), a.mean(), np.sum(b), np.prod(b), np.max(b), b.mean(),
            a[1:].sum())


def test_array_reductions() -> None:
    a = np.array([[3.0, -1.0, 4.5], [1.0, 5.0, -9.0]])
    b = np.array([2, 3, 4], dtype=np.int32)
    got, want = reductions(a, b), reductions.py_func(a, b)
    for g, w in zip(got, want):
        assert g == pytest.approx(w) and type(g) in (int, float, bool)
    with pytest.raises(ValueError, match="zero-size"):
        reductions(np.zeros((0, 3)), b)


def compute_bin(x, edges):
    n = edges.shape[0] - 1
    b = int(n * (x - edges[0]) / (edges[-1] - edges[0]))
    if b < 0 or b >= n:
        return None
    return b


@jit
def binned(a, edges):
    hist = np.zeros(edges.shape[0] - 1, np.int64)
    for x in a:
        b = compute_bin(x, edges)
        if b is not None:
            hist[b] += 1
    return hist


@jit
def maybe(n):
    if n > 0:
        return n * 2
    if n == 0:
        return None
    return None if n < -5 else n


@jit
def misuse(n):
    return maybe(n) + 1


def test_optional_results() -> None:
    check(binned, np.array([0.1, 0.5, 0.9, 1.5, -3.0]), np.linspace(0.0, 1.0, 5))
    for n in (3, 0, -2, -9):
        check(maybe, n)
    assert maybe(0) is None and maybe(2) == 4
    with pytest.raises(TypeError):
        misuse(0)
    assert misuse(1) == 3


@jit
def unicode_names(naïve, pc1):
    résumé = naïve + pc1
    return résumé


def test_unicode_names() -> None:
    check(unicode_names, 1.5, 2)


def hélper(v):
    return v + 1


@jit
def façade(x):
    return hélper(x) * 2


def test_unicode_function_names() -> None:
    check(façade, 3)


@jit
def temporaries(n, m):
    total = 0.0
    scratch = np.zeros(n)
    for i in range(m):
        row = np.ones(n)
        if i == 3:
            continue
        for j in range(n):
            scratch[j] += row[j]
        if i > 6:
            break
    kept = np.empty(2)
    kept[0] = scratch[0]
    kept[1] = total
    if m > 100:
        return kept
    return kept


def test_temporary_arrays_are_freed() -> None:
    from pymlirjit.frontend.ownership import freeable  # noqa: F401 (the pass tested)

    check(temporaries, 4, 10)
    text = temporaries.inspect_mlir()
    assert text.count("memref.dealloc") >= 4  # scratch at both returns, row thrice
    before = _rss()
    for _ in range(30):
        temporaries(200_000, 3)  # ~1.6 MB per array: 30 calls would keep ~100 MB
    assert _rss() - before < 40 * 2**20


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@jit
def whole_arrays(a, b, k):
    c = a * k + b          # a temporary for a * k, freed once added
    d = -c / 2.0
    e = np.sqrt(np.abs(d)) + 1
    a += b                 # in place, as numpy's
    a[1:] -= 1.0
    return c, d, e, (c * d).sum()


def test_whole_array_expressions() -> None:
    a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    check(whole_arrays, a, b, 2.0)
    check(whole_arrays, np.arange(4, dtype=np.float32), np.ones(4, np.float32), 3)
    with pytest.raises(ValueError, match="broadcast"):
        whole_arrays(np.ones(3), np.ones(4), 1.0)
    text = whole_arrays.inspect_mlir()
    # Fused: one loop and one array per statement; a copy of b for a += b (it might
    # overlap a); the product of (c * d).sum() is freed once summed.
    raises = text.count("func.call @__jit_raise")  # each returns 3 placeholder arrays
    assert text.count("memref.alloc(") - 3 * raises == 5
    assert text.count("memref.dealloc") == 2
    before = _rss()
    big = np.ones(200_000)
    for _ in range(20):
        whole_arrays(big.copy(), big, 2.0)  # returned arrays are freed by Python
    assert _rss() - before < 60 * 2**20
