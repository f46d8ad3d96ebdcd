"""frontend.md §4.7's first programs: each runs compiled and as plain Python, compared."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymlirjit import f32, jit

from .helpers import check


@jit
def add(a, b):
    return a + b


def test_add_specializes_per_argument_types() -> None:
    fn = jit(add.py_func)
    assert check(fn, 1, 2) == 3
    assert check(fn, 1.5, 2.25) == 3.75
    assert check(fn, 1, 2.5) == 3.5
    assert check(fn, True, True) == 2
    assert fn.signatures == [("i64", "i64"), ("f64", "f64"), ("i64", "f64"), ("i1", "i1")]
    check(fn, np.float32(1.5), 2.0)
    assert isinstance(fn(np.float32(1.5), 2.0), float)
    assert fn(2**62, 2**62) == -(2**63)  # ints wrap (documented)


def test_annotations_constrain() -> None:
    @jit
    def scaled(a: int, b: float) -> float:
        return a * b

    assert scaled(2, 1.5) == 3.0
    assert scaled(2, 3) == 6.0  # an int for a float parameter: a float
    with pytest.raises(TypeError, match=r"'a'.*annotated int"):
        scaled(2.5, 1.0)

    @jit
    def exact(x: f32) -> float:
        return x * 2.0

    assert exact(1.5) == 3.0
    assert exact.signatures == [("f32",)]
    assert "f32" in exact.inspect_mlir()
    assert exact.compile() is exact.kernel()


def test_wrong_arguments() -> None:
    with pytest.raises(TypeError, match="'b'"):
        add(1, "x")
    with pytest.raises(TypeError, match="missing"):
        add(1)


@jit
def total(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_total() -> None:
    check(total, np.arange(10.0))
    check(total, np.arange(10, dtype=np.float32))
    assert isinstance(total(np.arange(3, dtype=np.float32)), float)
    check(total, np.zeros(0))
    check(total, np.arange(20.0)[::3])
    assert ("memref<?xf64, strided<[?], offset: ?>>",) in total.signatures
    assert total(np.ones(10, dtype=np.int32)) == 10.0


@jit
def axpy(a, x, y):
    for i in range(len(x)):
        y[i] = a * x[i] + y[i]


def test_axpy_stays_f32_and_writes_through() -> None:
    x = np.arange(5, dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    check(axpy, 0.1, x, y)
    text = axpy.inspect_mlir()
    assert "arith.mulf" in text and not any("mulf" in line and ": f64" in line
                                            for line in text.splitlines())


def test_axpy_boundscheck_names_the_line() -> None:
    checked = jit(boundscheck=True)(axpy.py_func)
    with pytest.raises(IndexError, match=r"test_programs.py:\d+"):
        checked(1.0, np.ones(5), np.ones(3))


@jit
def matmul(a, b, c):
    n, k = a.shape
    m = b.shape[1]
    for i in range(n):
        for j in range(m):
            for p in range(k):
                c[i, j] += a[i, p] * b[p, j]


def test_matmul() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((4, 3)), rng.random((3, 5))
    c = np.zeros((4, 5))
    matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b)


@jit
def collatz(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def test_collatz() -> None:
    for n in (1, 2, 7, 27, 97):
        check(collatz, n)


@jit
def divmod_py(a, b):
    return a // b, a % b


def test_divmod_signs_and_zero() -> None:
    for a in (7, -7, 0, 6):
        for b in (2, -2, 3, -3):
            check(divmod_py, a, b)
            check(divmod_py, float(a) + 0.5, float(b))
    with pytest.raises(ZeroDivisionError, match=r"test_programs\.py"):
        divmod_py(1, 0)
    with pytest.raises(ZeroDivisionError):
        divmod_py(1.0, 0.0)
    lenient = jit(error_model="numpy")(divmod_py.py_func)
    assert lenient(1, 0) == (0, 0)
    q, _ = lenient(1.0, 0.0)
    assert math.isinf(q) or math.isnan(q)


@jit
def rsum(start, stop, step):
    s = 0
    for i in range(start, stop, step):
        s += i
    return s


@jit
def rsum_const(n):
    s = 0
    for i in range(n, -3, -2):
        s += i
    for i in range(n):
        s += i
    for i in range(2, n, 3):
        s += i * 100
    return s


def test_range_steps() -> None:
    for start in (-5, 0, 3, 10):
        for stop in (-4, 0, 7, 10):
            for step in (-3, -1, 1, 2):
                check(rsum, start, stop, step)
    for n in (-5, 0, 1, 9):
        check(rsum_const, n)
    with pytest.raises(ValueError, match="must not be zero"):
        rsum(0, 5, 0)


@jit
def find(x, t):
    for i in range(len(x)):
        if x[i] == t:
            return i
    return -1


@jit
def first_positive(x):
    i = 0
    n = len(x)
    while i < n and x[i] <= 0:
        i += 1
    return i


@jit
def loops(x):
    count = 0
    for i in range(len(x)):
        if x[i] < 0:
            continue
        if x[i] > 100:
            break
        for j in range(i):
            if j > 3:
                break
            count += 1
        count += 10
    return count


def test_control_flow() -> None:
    x = np.array([3.0, -1.0, 5.0, 7.0, 200.0, 1.0])
    for t in (3.0, 5.0, 9.0):
        check(find, x, t)
    check(first_positive, np.array([-1.0, 0.0, 2.0]))
    check(first_positive, np.array([-1.0, 0.0]))  # guard stops at n: no load of x[n]
    check(loops, x)
    checked = jit(boundscheck=True)(first_positive.py_func)
    assert checked(np.array([-1.0, -2.0])) == 2


@jit
def normalize(m):
    out = np.empty_like(m)
    lo = m[0, 0]
    hi = m[0, 0]
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            lo = min(lo, m[i, j])
            hi = max(hi, m[i, j])
    span = hi - lo
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            out[i, j] = math.sqrt(abs(m[i, j] - lo) / span)
    norms = np.zeros((m.shape[0],), np.float64)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            norms[i] += out[i, j] ** 2
    return out, norms


def test_normalize_returns_new_arrays() -> None:
    m = np.arange(12.0).reshape(3, 4) - 3.0
    out, _ = check(normalize, m)
    assert out.flags.owndata or out.base is not None


@jit
def edges(x):
    first = x[-1]
    x[0] = x[0 - 1] + first
    x[1:-1] += 1
    inner = x[1:-1]
    for i in range(len(inner)):
        inner[i] += 1.0
    return len(inner)


def test_edges_negative_indices_and_views() -> None:
    check(edges, np.arange(6.0))
    check(edges, np.arange(2.0))


@jit
def shapes(a):
    n, m = a.shape
    total = 0
    for row in a:
        for v in row:
            total += v
    return n * m, a.ndim, a.size, total


def test_shapes_and_iteration() -> None:
    check(shapes, np.arange(6).reshape(2, 3))
    check(shapes, np.arange(12.0).reshape(3, 4)[:, ::2])


@jit
def iterate(a, b):
    s = 0.0
    for i, v in enumerate(a):
        s += i * v
    for u, v in zip(a, b):
        s += u - v
    for v in a.flat:
        s += v
    return s


def test_enumerate_zip_flat() -> None:
    check(iterate, np.arange(5.0), np.ones(3))


@jit
def unify_acc(x):
    acc = 0
    for i in range(len(x)):
        acc += x[i]
    return acc


def test_variables_unify() -> None:
    r = check(unify_acc, np.arange(4, dtype=np.float32))
    assert isinstance(r, float)
    assert unify_acc.signatures[-1] == ("memref<?xf32>",)
    check(unify_acc, np.arange(4))


@jit
def pyops(a, b):
    return (a / b, a ** 2, -a, not a, a and b, a or b, 1 < a <= b, a != b, True + True,
            abs(a - b), int(a), float(b), bool(a))


@jit
def nan_order(a, b):
    return min(a, b), max(a, b), min(b, a), max(b, a), a != b, a == a, a < b


def test_python_operators() -> None:
    for a, b in ((3, 4), (-7, 2), (0, 5), (2.5, -1.5), (1e300, -0.0)):
        check(pyops, a, b)
    nan = float("nan")
    for a, b in ((nan, 1.0), (1.0, nan), (nan, nan), (-0.0, 0.0)):
        check(nan_order, a, b)


def test_native_chain_keeps_argument_types_apart() -> None:
    fn = jit(add.py_func)
    arrays = jit(total.py_func)
    for i in range(fn.native_after + 20):  # past the point the chain tests scalar types
        assert type(fn(i, 1)) is int and fn(i, 1) == i + 1
        assert fn(0.5, 1.0) == 1.5
        assert fn(1, 0.5) == 1.5
        assert fn(True, True) == 2
        assert fn(np.int8(100), np.int8(100)) == -56  # an int8 sum wraps as numpy's
        assert arrays(np.ones(3)) == 3.0 and arrays(np.ones(3, np.float32)) == 3.0
        assert arrays(np.ones(6)[::2]) == 3.0
    assert len(fn.signatures) == 5 and len(arrays.signatures) == 3
    with pytest.raises(TypeError):
        fn("a", 1)
