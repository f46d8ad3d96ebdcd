"""Integrate MLIR kernels with scipy.integrate.quad, with no Python in the loop.

``kernel.ctypes`` is a ctypes function pointer with the kernel's C prototype, which
``scipy.LowLevelCallable`` accepts. Two of quad's signatures:

- ``double f(double x)``: a scalar kernel;
- ``double f(int n, double *xx, void *user_data)``: the kernel reads ``x`` through a
  pointer (``!llvm.ptr``, annotated ``ctypes.POINTER(ctypes.c_double)`` so that scipy
  sees ``double *``) and a parameter through ``user_data``.

The same integrals through a Python integrand give the reference values and the time
each takes. See docs/interop.md.

Run: ``python examples/scipy_quad.py`` (needs scipy)
"""

from __future__ import annotations

import ctypes
import math
import time

import numpy as np
from scipy import LowLevelCallable, integrate

from pymlirjit import f64, i32, mlir_kernel


@mlir_kernel(source="""
func.func @damped(%x: f64) -> f64 {
  %m = arith.negf %x : f64
  %e = math.exp %m : f64
  %c = math.cos %x : f64
  %r = arith.mulf %e, %c : f64
  return %r : f64
}""")
def damped(x: f64) -> f64:
    """exp(-x) * cos(x)."""


DOUBLE_P = ctypes.POINTER(ctypes.c_double)


@mlir_kernel(source="""
func.func @gaussian(%n: i32, %xx: !llvm.ptr, %user: !llvm.ptr) -> f64 {
  %x = llvm.load %xx : !llvm.ptr -> f64
  %sigma = llvm.load %user : !llvm.ptr -> f64
  %z = arith.divf %x, %sigma : f64
  %z2 = arith.mulf %z, %z : f64
  %half = arith.constant -0.5 : f64
  %a = arith.mulf %z2, %half : f64
  %r = math.exp %a : f64
  return %r : f64
}""")
def gaussian(n: i32, xx: DOUBLE_P, user: ctypes.c_void_p) -> f64:  # type: ignore[valid-type]
    """exp(-(x / sigma)^2 / 2), sigma read through user_data."""


def timed(function: object, *args: float) -> tuple[float, float]:
    """quad's value, and its best time over a few batches of calls (the first call of
    a LowLevelCallable pays one-time costs)."""
    value, _ = integrate.quad(function, *args)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(20):
            integrate.quad(function, *args)
        best = min(best, (time.perf_counter() - start) / 20)
    return value, best


def main() -> None:
    native, native_time = timed(LowLevelCallable(damped.ctypes), 0.0, 50.0)
    python, python_time = timed(lambda x: math.exp(-x) * math.cos(x), 0.0, 50.0)
    print(f"exp(-x) cos(x) on [0, 50]: kernel {native:.12f} in {native_time * 1e6:.1f} us, "
          f"Python {python:.12f} in {python_time * 1e6:.1f} us")
    assert abs(native - 0.5) < 1e-9 and abs(native - python) < 1e-12

    sigma = ctypes.c_double(1.5)
    user = ctypes.cast(ctypes.pointer(sigma), ctypes.c_void_p)
    integrand = LowLevelCallable(gaussian.ctypes, user)
    print(f"C signature scipy sees: {integrand.signature}")
    value, _ = integrate.quad(integrand, -np.inf, np.inf)
    expected = sigma.value * math.sqrt(2 * math.pi)
    print(f"gaussian, sigma = {sigma.value}: {value:.12f} (expected {expected:.12f})")
    assert abs(value - expected) < 1e-9
    print("OK")


if __name__ == "__main__":
    main()
