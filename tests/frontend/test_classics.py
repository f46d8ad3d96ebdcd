"""Classic numba programs (sorting, a sieve, a scan, a convolution, gcd, a kernel density
estimate), compiled and compared with plain Python."""

from __future__ import annotations

import math

import numpy as np

from pymlirjit import jit

from .helpers import check


@jit
def bubble(a):
    n = len(a)
    for i in range(n):
        swapped = False
        for j in range(n - i - 1):
            if a[j] > a[j + 1]:
                a[j], a[j + 1] = a[j + 1], a[j]
                swapped = True
        if not swapped:
            break

@jit
def sieve(n):
    flags = np.ones(n + 1, dtype=np.uint8)
    flags[0] = 0
    flags[1] = 0
    i = 2
    while i * i <= n:
        if flags[i]:
            for j in range(i * i, n + 1, i):
                flags[j] = 0
        i += 1
    count = 0
    for f in flags:
        count += f
    return count, flags

@jit
def cumsum(x):
    out = np.empty_like(x)
    acc = 0.0
    for i in range(x.size):
        acc += x[i]
        out[i] = acc
    return out

@jit
def conv2d(img, k):
    H, W = img.shape
    kh, kw = k.shape
    out = np.zeros((H - kh + 1, W - kw + 1))
    for i in range(H - kh + 1):
        for j in range(W - kw + 1):
            s = 0.0
            for u in range(kh):
                for v in range(kw):
                    s += img[i + u, j + v] * k[u, v]
            out[i, j] = s
    return out

@jit
def gcd(a, b):
    while b:
        a, b = b, a % b
    return a

@jit
def kde(xs, pts, bw):
    out = np.zeros(len(pts))
    for i in range(len(pts)):
        s = 0.0
        for x in xs:
            z = (pts[i] - x) / bw
            s += math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        out[i] = s / (len(xs) * bw)
    return out



def test_classic_programs() -> None:
    check(bubble, np.random.default_rng(0).random(50))
    count, flags = check(sieve, 100)
    assert count == 25 and flags.dtype == np.uint8
    check(cumsum, np.arange(10.0))
    img = np.random.default_rng(1).random((8, 9))
    np.testing.assert_allclose(conv2d(img, np.ones((3, 3)) / 9),
                               conv2d.py_func(img, np.ones((3, 3)) / 9))
    for a, b in ((48, 18), (17, 5), (0, 3)):
        check(gcd, a, b)
    xs = np.random.default_rng(2).normal(size=100)
    pts = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(kde(xs, pts, 0.5), kde.py_func(xs, pts, 0.5))
