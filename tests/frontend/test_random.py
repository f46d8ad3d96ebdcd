"""Random numbers in @jit code: the generator (xoshiro256**, bit for bit), seeding,
statistics of 10**6 draws, ranges, threads, prange and fork."""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

from pymlirjit import jit, prange
from pymlirjit.boundary.native.randomstate import SYMBOL, seed_words
from pymlirjit.frontend import JitTypeError
from pymlirjit.frontend.randoms import STATE_SYMBOL
from tests.threads import run_in_threads

M = (1 << 64) - 1
N = 1_000_000


def reference(seed: int, count: int) -> list[float]:
    """xoshiro256** from splitmix64(seed), as doubles in [0, 1)."""
    s = seed_words(seed)

    def rotl(x: int, k: int) -> int:
        return ((x << k) | (x >> (64 - k))) & M

    out = []
    for _ in range(count):
        result = rotl(s[1] * 5 & M, 7) * 9 & M
        t = s[1] << 17 & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        out.append((result >> 11) * 2.0 ** -53)
    return out


@jit
def seeded(n, k):
    np.random.seed(n)
    out = np.empty(k)
    for i in range(k):
        out[i] = np.random.random()
    return out


@jit
def py_seeded(n, k):
    random.seed(n)
    out = np.empty(k)
    for i in range(k):
        out[i] = random.random()
    return out


@jit
def draw():
    return np.random.random()


def test_the_native_state_is_the_one_declared() -> None:
    assert SYMBOL == STATE_SYMBOL


def test_a_seed_gives_xoshiro256starstar_of_splitmix64() -> None:
    assert seeded(42, 5).tolist() == reference(42, 5)
    assert py_seeded(42, 5).tolist() == reference(42, 5)
    assert seeded(-7, 3).tolist() == reference(-7, 3)


def test_same_seed_same_sequence_and_the_two_modules_are_separate() -> None:
    @jit
    def mixed(n):
        np.random.seed(n)
        a = np.random.random()
        random.seed(n + 1)  # the random module's own state: np's stream goes on
        b = np.random.random()
        return a, b

    assert mixed(3) == mixed(3)
    assert list(mixed(3)) == reference(3, 2)
    assert not np.array_equal(seeded(1, 4), seeded(2, 4))


def test_independent_of_numpys_global_state() -> None:
    np.random.seed(0)
    a = draw()
    np.random.seed(0)
    b = draw()
    assert a != b  # numpy's seed does not reach compiled code (as numba's)


@jit
def moments(n, which):
    s = 0.0
    ss = 0.0
    for _ in range(n):
        if which == 0:
            v = np.random.random()
        elif which == 1:
            v = np.random.uniform(2.0, 5.0)
        elif which == 2:
            v = np.random.normal(1.0, 2.0)
        elif which == 3:
            v = random.random()
        elif which == 4:
            v = random.gauss(-1.0, 0.5)
        else:
            v = random.uniform(-1.0, 1.0)
        s += v
        ss += v * v
    mean = s / n
    return mean, ss / n - mean * mean


@pytest.mark.parametrize("which, mean, var", [
    (0, 0.5, 1 / 12), (1, 3.5, 9 / 12), (2, 1.0, 4.0), (3, 0.5, 1 / 12), (4, -1.0, 0.25),
    (5, 0.0, 4 / 12)])
def test_mean_and_variance_of_a_million_draws(which: int, mean: float, var: float) -> None:
    got_mean, got_var = moments(N, which)
    # 6 standard errors: the mean's is sqrt(var/N); the variance's about var*sqrt(2/N)
    # (normal) or less (uniform).
    assert abs(got_mean - mean) < 6 * math.sqrt(var / N)
    assert abs(got_var - var) < 6 * var * math.sqrt(2 / N)


@jit
def integers(n, lo, hi, inclusive):
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        out[i] = random.randint(lo, hi) if inclusive else np.random.randint(lo, hi)
    return out


def test_randint_ranges_and_uniformity() -> None:
    a = integers(N, -3, 7, False)
    assert a.min() == -3 and a.max() == 6
    counts = np.bincount(a + 3)
    expected = N / 10
    assert np.all(np.abs(counts - expected) < 6 * math.sqrt(expected))
    b = integers(10_000, 1, 6, True)  # random.randint includes its end
    assert b.min() == 1 and b.max() == 6
    c = integers(10_000, -(2**62), 2**62, False)  # a span needing all 64 bits
    assert c.min() >= -(2**62) and c.max() < 2**62 and len(np.unique(c)) == 10_000

    @jit
    def one_argument(n):
        return np.random.randint(n)

    assert all(0 <= one_argument(3) < 3 for _ in range(50))


def test_uniform_bounds() -> None:
    @jit
    def bounds(n):
        lo = 10.0
        hi = -10.0
        for _ in range(n):
            v = np.random.uniform(-2.0, 3.0)
            lo = min(lo, v)
            hi = max(hi, v)
        return lo, hi

    lo, hi = bounds(100_000)
    assert -2.0 <= lo < -1.99 and 2.99 < hi < 3.0


def test_empty_ranges_raise_value_error() -> None:
    with pytest.raises(ValueError, match="low >= high"):
        integers(1, 5, 5, False)
    with pytest.raises(ValueError, match="empty range"):
        integers(1, 3, 2, True)


def test_unsupported_forms_are_compile_errors() -> None:
    @jit
    def sized():
        return np.random.random(5)

    with pytest.raises(JitTypeError, match="size= is not supported"):
        sized()

    @jit
    def float_bounds():
        return np.random.randint(1.5, 3)

    with pytest.raises(JitTypeError, match="integers"):
        float_bounds()


def test_each_thread_has_its_own_stream() -> None:
    outcomes = run_in_threads(lambda _: (draw(), seeded(11, 3).tolist()), range(4))
    assert len({first for first, _ in outcomes}) == 4  # unseeded: distinct streams
    assert all(run == reference(11, 3) for _, run in outcomes)  # a seed is per thread


def test_prange_threads_draw_distinct_streams() -> None:
    @jit(parallel=True)
    def fill(n):
        out = np.empty(n)
        for i in prange(n):
            out[i] = np.random.random()
        return out

    @jit(parallel=True)
    def pi(n):
        acc = 0
        for _ in prange(n):
            x = np.random.random()
            y = np.random.random()
            if x * x + y * y < 1.0:
                acc += 1
        return 4.0 * acc / n

    out = fill(200_000)
    assert len(np.unique(out)) == out.size  # a repeated stream would repeat values
    assert abs(out.mean() - 0.5) < 6 * math.sqrt(1 / 12 / out.size)
    assert abs(pi(N) - math.pi) < 6 * 4 * math.sqrt(math.pi / 4 * (1 - math.pi / 4) / N)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_another_stream() -> None:
    draw()  # the parent's state exists before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next draw, then leave at once
        try:
            os.write(write, repr(draw()).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = float(os.read(read, 100).decode())
    os.close(read)
    os.waitpid(pid, 0)
    assert child != draw()  # the parent's next draw: the same without reseeding


def test_the_state_is_fetched_once_per_chunk_not_per_iteration() -> None:
    @jit(parallel=True)
    def fill(out):
        for i in prange(out.shape[0]):
            out[i] = np.random.random()

    fill(np.empty(10))
    llvm = fill.inspect_llvm()
    declaration = next(line for line in llvm.splitlines()
                       if line.startswith(f"declare ptr @_mlir_ciface_{STATE_SYMBOL}"))
    group = declaration.rsplit("#", 1)[1]
    attributes = next(line for line in llvm.splitlines()
                      if line.startswith(f"attributes #{group} "))
    assert "memory(none)" in attributes  # so LLVM hoists it out of the chunk's loop
