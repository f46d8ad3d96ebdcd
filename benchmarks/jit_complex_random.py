"""@jit against numba's @njit on complex numbers and random numbers (issue 27 items 3 and 4;
run by hand, not in the test suite): the call cost of a complex scalar kernel beside a
float one, Mandelbrot with complex arithmetic, and Monte Carlo pi with
``np.random.random()`` serial and with ``prange``.

    python benchmarks/jit_complex_random.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from numba import prange  # @jit understands numba.prange too

from pymlirjit import jit


def add_complex(a: complex, b: complex) -> complex:
    return a + b


def add_float(a: float, b: float) -> float:
    return a + b


def mandel(x, y, max_iters):
    c = complex(x, y)
    z = 0.0j
    for i in range(max_iters):
        z = z * z + c
        if (z.real * z.real + z.imag * z.imag) >= 4:
            return i
    return max_iters


def fractal_source(kernel: Any) -> Any:
    def create_fractal(min_x, max_x, min_y, max_y, image, iters):
        height, width = image.shape
        pixel_x = (max_x - min_x) / width
        pixel_y = (max_y - min_y) / height
        for x in range(width):
            real = min_x + x * pixel_x
            for y in range(height):
                imag = min_y + y * pixel_y
                image[y, x] = kernel(real, imag, iters)
    return create_fractal


def monte_carlo_pi(nsamples):
    acc = 0
    for _ in range(nsamples):
        x = np.random.random()
        y = np.random.random()
        if (x ** 2 + y ** 2) < 1.0:
            acc += 1
    return 4.0 * acc / nsamples


def monte_carlo_pi_parallel(nsamples):
    acc = 0
    for _ in prange(nsamples):
        x = np.random.random()
        y = np.random.random()
        if (x ** 2 + y ** 2) < 1.0:
            acc += 1
    return 4.0 * acc / nsamples


def median_time(f: Any, *args: Any, repeat: int = 11) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def calls() -> None:
    """A complex scalar call must cost what a float one does (native entries both)."""
    mine_c, mine_f = jit(add_complex), jit(add_float)
    mine_c.compile(), mine_f.compile()  # exact annotations: native chain at once
    theirs_c, theirs_f = numba.njit(add_complex), numba.njit(add_float)
    theirs_c(1j, 2j), theirs_f(1.0, 2.0)
    rows = (("@jit add(complex, complex)", mine_c, (1 + 2j, 3 - 1j)),
            ("@jit add(float, float)", mine_f, (1.5, 2.5)),
            ("numba add(complex, complex)", theirs_c, (1 + 2j, 3 - 1j)),
            ("numba add(float, float)", theirs_f, (1.5, 2.5)))
    results = {label: float("inf") for label, _, _ in rows}
    for _ in range(15):  # interleaved: a burst of load hits every row alike
        for label, f, args in rows:
            per = timeit.timeit(lambda f=f, args=args: f(*args), number=20000)
            results[label] = min(results[label], per / 20000 * 1e9)
    for label, _, _ in rows:
        print(f"call {label}: {results[label]:.0f} ns (min of 15 interleaved runs)")
    ratio = results["@jit add(complex, complex)"] / results["@jit add(float, float)"]
    print(f"complex call / float call (@jit): {ratio:.2f}x")


def mandelbrot(quick: bool) -> None:
    shape = (200, 300) if quick else (1000, 1500)
    mine = jit(fractal_source(jit(mandel)))
    theirs = numba.njit(fractal_source(numba.njit(mandel)))
    a, b = np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)
    args = (-2.0, 1.0, -1.0, 1.0)
    t_mine = median_time(mine, *args, a, 20)
    t_theirs = median_time(theirs, *args, b, 20)
    assert np.array_equal(a, b)
    print(f"mandelbrot complex {shape[0]}x{shape[1]}, 20 iterations: @jit "
          f"{t_mine * 1e3:.2f} ms, numba {t_theirs * 1e3:.2f} ms, "
          f"ratio {t_mine / t_theirs:.2f}x")


def monte_carlo(quick: bool) -> None:
    n = 1_000_000 if quick else 10_000_000
    mine, theirs = jit(monte_carlo_pi), numba.njit(monte_carlo_pi)
    t_mine = median_time(mine, n)
    t_theirs = median_time(theirs, n)
    print(f"monte carlo pi, {n} samples: @jit {t_mine * 1e3:.2f} ms, numba "
          f"{t_theirs * 1e3:.2f} ms, ratio {t_mine / t_theirs:.2f}x "
          f"(estimate {mine(n):.4f})")
    par = jit(parallel=True)(monte_carlo_pi_parallel)
    npar = numba.njit(parallel=True)(monte_carlo_pi_parallel)
    t_par = median_time(par, n)
    t_npar = median_time(npar, n)
    print(f"monte carlo pi prange parallel=True: @jit {t_par * 1e3:.2f} ms "
          f"({t_mine / t_par:.2f}x serial @jit), numba {t_npar * 1e3:.2f} ms "
          f"({t_theirs / t_npar:.2f}x serial numba); estimate {par(n):.4f}")


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"load before: {os.getloadavg()}")
    calls()
    mandelbrot(quick)
    if "--complex" not in sys.argv:
        monte_carlo(quick)
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
