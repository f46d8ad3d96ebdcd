"""@jit against numba's @njit on the same Python functions (run by hand, not in the test
suite): frontend time, first-call time, dispatch cost, kernel time.

    python benchmarks/jit_numba.py
"""

from __future__ import annotations

import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymlirjit import i64, jit, mlir_kernel
from pymlirjit.frontend import program as frontend_program
from pymlirjit.frontend import source as frontend_source
from pymlirjit.frontend.jtypes import F64, WEAK_FLOAT, WEAK_INT, Array


def fifty_lines(x, y, n, k):
    total = 0.0
    count = 0
    best = x[0]
    for i in range(n):
        v = x[i]
        if v > best:
            best = v
        if v < 0:
            continue
        total += v * k
        count += 1
    j = 0
    while j < n and y[j] >= 0:
        j += 1
    acc = 0
    for i in range(n - 1, -1, -1):
        if i % 3 == 0:
            acc += i // 3
        elif i % 3 == 1:
            acc -= i
        else:
            acc = acc * 2 % 1000003
    for i in range(1, n - 1):
        y[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0
    m = 0.0
    for i in range(n):
        d = abs(x[i] - y[i])
        m = max(m, d)
        if m > 1e9:
            break
    s = 0.0
    for i, v in enumerate(x):
        s += i * v
    for a, b in zip(x, y):
        s += a * b
    if count > 0:  # noqa: SIM108 (the if statement is what is measured)
        mean = total / count
    else:
        mean = 0.0
    r = 1.0
    for _ in range(10):
        r = r * 0.5 + mean
    z = min(r, best) + max(acc, j)
    return total, count, best, j, acc, m, s, mean, z


def total(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def laplace(u, out):
    n, m = u.shape
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def plaplace(u, out):
    n, m = u.shape
    for i in numba.prange(1, n - 1):  # numba's: @jit takes it as its own
        for j in range(1, m - 1):
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def add(a, b):
    return a + b


def median_time(f: Any, *args: Any, repeat: int = 15) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    # 1. Frontend (parse, check, infer, emit) of a ~50-line function.
    params = (Array(F64, 1), Array(F64, 1), WEAK_INT, WEAK_FLOAT)
    runs = []
    for _ in range(30):
        frontend_source._cache.clear()
        t = time.perf_counter()
        frontend_program.specialize(fifty_lines, params)
        runs.append(time.perf_counter() - t)
    print(f"frontend, 50-line function: median {statistics.median(runs) * 1e3:.2f} ms")

    # 2. First call (frontend + compile) against numba's.
    x = np.random.default_rng(0).random(1000)
    y = np.ones(1000)
    t = time.perf_counter()
    jit(fifty_lines)(x, y.copy(), 1000, 2.0)
    mine = time.perf_counter() - t
    t = time.perf_counter()
    numba.njit(fifty_lines)(x, y.copy(), 1000, 2.0)
    theirs = time.perf_counter() - t
    print(f"first call, 50-line function: @jit {mine * 1e3:.0f} ms, numba {theirs * 1e3:.0f} ms")

    # 3. Dispatch of a compiled specialization.
    @mlir_kernel(source="""
    func.func @kadd(%a: i64, %b: i64) -> i64 {
      %r = arith.addi %a, %b : i64
      return %r : i64
    }""")
    def kadd(a: i64, b: i64) -> i64: ...

    jadd, nadd = jit(add), numba.njit(add)
    kadd(1, 2), jadd(1, 2), nadd(1, 2)
    arr = np.ones(10)
    jtot, ntot = jit(total), numba.njit(total)
    jtot(arr), ntot(arr)
    for label, f, args in (("mlir_kernel add(1, 2)", kadd, (1, 2)),
                           ("@jit add(1, 2)", jadd, (1, 2)), ("numba add(1, 2)", nadd, (1, 2)),
                           ("@jit total(10 floats)", jtot, (arr,)),
                           ("numba total(10 floats)", ntot, (arr,))):
        per = min(timeit.repeat(lambda f=f, args=args: f(*args), number=20000, repeat=7))
        print(f"call {label}: {per / 20000 * 1e9:.0f} ns")

    # 4. Kernel time.
    big = np.random.default_rng(1).random(1_000_000)
    u = np.random.default_rng(2).random((1000, 1000))
    out = np.zeros_like(u)
    cases = [("total, 1e6 f64", total, (big,), {}),
             ("total fastmath, 1e6 f64", total, (big,), {"fastmath": True}),
             ("laplace 1000^2", laplace, (u, out), {}),
             ("laplace prange parallel 1000^2", plaplace, (u, out), {"parallel": True})]
    for label, f, args, options in cases:
        mine_f = jit(**options)(f)
        theirs_f = numba.njit(**options)(f)
        a = median_time(mine_f, *args)
        b = median_time(theirs_f, *args)
        print(f"{label}: @jit {a * 1e3:.3f} ms, numba {b * 1e3:.3f} ms, ratio {a / b:.2f}x")


if __name__ == "__main__":
    main()
