"""h. numpy ufuncs compiled from MLIR (``mlir_ufunc``): a binary elementwise ufunc on
10^6 f64, against numpy's own ufunc and numba's ``@vectorize`` with the same body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pymlirjit import Session, mlir_ufunc

from ._timing import CaseResult, Config, Target, interleaved, per_unit

__all__ = ["run"]

ADD = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}"""

# np.hypot's formula without its overflow guard (numba's body below is the same).
HYPOT = """
func.func @hypot2(%a: f64, %b: f64) -> f64 {
  %x = arith.mulf %a, %a : f64
  %y = arith.mulf %b, %b : f64
  %s = arith.addf %x, %y : f64
  %r = math.sqrt %s : f64
  return %r : f64
}"""


def _numba() -> dict[str, Callable[..., Any]] | str:
    """numba ``@vectorize`` twins of the two bodies; or why not."""
    try:
        import numba
    except Exception as error:  # numba is optional (the `bench` extra)
        return f"numba unavailable ({type(error).__name__}: {error})"

    @numba.vectorize(["float64(float64, float64)"])
    def add(a: float, b: float) -> float:
        return a + b

    @numba.vectorize(["float64(float64, float64)"])
    def hypot2(a: float, b: float) -> float:
        return (a * a + b * b) ** 0.5  # type: ignore[no-any-return]

    return {"add": add, "hypot": hypot2}


def run(config: Config) -> CaseResult:
    """Measure ``mlir_ufunc`` loops against numpy's and numba's (ns per element)."""
    n = config.pick(1_000_000, 1_000)
    number = config.pick(20, 5)
    result = CaseResult("h", f"binary elementwise ufunc, f64, {n:,} elements, out= given "
                             f"(ns per element)")
    session = Session()
    ufuncs = {"add": mlir_ufunc(source=ADD, session=session),
              "hypot": mlir_ufunc(source=HYPOT, session=session)}
    numpy_twins = {"add": np.add, "hypot": np.hypot}
    rng = np.random.default_rng(0)
    a, b = rng.random(n), rng.random(n)
    out = np.empty(n)
    numba = _numba()
    if isinstance(numba, str):
        result.notes.append(numba + "; numba rows skipped")
    paths: list[tuple[str, str, str, Any]] = []
    for body in ("add", "hypot"):
        np.testing.assert_allclose(ufuncs[body](a, b), numpy_twins[body](a, b), rtol=1e-15)
        paths += [(f"numpy {body}", f"numpy np.{body}", f"numpy {body}", numpy_twins[body]),
                  (f"mlir {body}", f"pymlirjit mlir_ufunc, {body} body", f"numpy {body}",
                   ufuncs[body])]
        if not isinstance(numba, str):
            np.testing.assert_allclose(numba[body](a, b), numpy_twins[body](a, b), rtol=1e-15)
            paths.append((f"numba {body}", f"numba @vectorize, same {body} body",
                          f"numpy {body}", numba[body]))
    samples = interleaved(*(lambda f=f: per_unit(lambda: f(a, b, out=out), units=n, repeat=1,
                                                 number=number)
                            for *_, f in paths), repeat=config.repeat)
    for (key, label, ref, _), measured in zip(paths, samples):
        result.add(key, label, measured, ref)
    for body in ("add", "hypot"):
        ratio = result.ratio(f"mlir {body}", f"numpy {body}")
        result.targets.append(Target(f"mlir_ufunc {body} within 1.2x np.{body}", ratio <= 1.2,
                                     f"{ratio:.2f}x"))
        if result.has(f"numba {body}"):
            versus = result.ratio(f"mlir {body}", f"numba {body}")
            result.targets.append(Target(f"mlir_ufunc {body} faster than numba @vectorize",
                                         versus < 1.0, f"{versus:.2f}x numba"))
    result.notes.append("np.hypot guards against overflow (libm hypot per element); the "
                        "MLIR and numba bodies compute sqrt(a*a + b*b)")
    return result
