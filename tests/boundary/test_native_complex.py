"""complex<f32> and complex<f64> parameters and results on the native entry (issue 28:
they took the Python path, 7-12 us a call): values as the Python path converts them,
the arguments it does not take handed over untouched (errors named), tuples of results,
several threads, and the relocatable code of the disk cache in a new process."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import Session
from tests.boundary.test_native_shapes import python_path_calls, run_python
from tests.threads import run_in_threads

COMPLEX = """
func.func @cmul(%a: complex<f64>, %b: complex<f64>) -> complex<f64> {
  %r = complex.mul %a, %b : complex<f64>
  return %r : complex<f64>
}
func.func @cmul32(%a: complex<f32>, %b: complex<f32>) -> complex<f32> {
  %r = complex.mul %a, %b : complex<f32>
  return %r : complex<f32>
}
func.func @same(%a: complex<f64>) -> complex<f64> {
  return %a : complex<f64>
}
func.func @same32(%a: complex<f32>) -> complex<f32> {
  return %a : complex<f32>
}
func.func @parts(%a: complex<f64>, %x: f64, %k: i32) -> (f64, complex<f32>, i32, complex<f64>) {
  %re = complex.re %a : complex<f64>
  %im = complex.im %a : complex<f64>
  %s = arith.addf %re, %x : f64
  %t = arith.truncf %s : f64 to f32
  %u = arith.truncf %im : f64 to f32
  %z = complex.create %t, %u : complex<f32>
  return %s, %z, %k, %a : f64, complex<f32>, i32, complex<f64>
}
func.func @norm(%a: complex<f64>) -> f64 {
  %r = complex.abs %a : complex<f64>
  return %r : f64
}
"""


@pytest.fixture(scope="module")
def module() -> Any:
    return Session().compile(COMPLEX)


def _native(call: Callable[[], Any]) -> Any:
    value, calls = python_path_calls(call)
    assert calls == 0, "took the Python path"
    return value


def _f32(z: complex) -> complex:
    return complex(np.complex64(z))


def test_complex_kernels_are_served_natively(module: Any) -> None:
    for name in ("cmul", "cmul32", "same", "same32", "parts", "norm"):
        assert getattr(module, name).ensure_native(), name


@pytest.mark.parametrize("z", [1 + 2j, -0.0 - 0.0j, complex(math.inf, -math.inf),
                               complex(math.nan, 1.5), 1e-310 + 3e300j, 5 + 0j])
def test_values_cross_both_ways_unchanged(module: Any, z: complex) -> None:
    same = _native(lambda: module.same(z))
    assert type(same) is complex
    assert [math.copysign(1, p) for p in (same.real, same.imag)] == \
           [math.copysign(1, p) for p in (z.real, z.imag)]
    assert repr(same) == repr(z)
    assert repr(_native(lambda: module.same(np.complex128(z)))) == repr(z)
    if all(abs(p) < 3e38 or not math.isfinite(p) for p in (z.real, z.imag)):
        narrowed = _native(lambda: module.same32(z))
        assert repr(narrowed) == repr(_f32(z))
        assert repr(_native(lambda: module.same32(np.complex64(z)))) == repr(_f32(z))


def test_arithmetic_matches_python(module: Any) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        a, b = (complex(*rng.standard_normal(2)) for _ in range(2))
        assert _native(lambda a=a, b=b: module.cmul(a, b)) == pytest.approx(a * b, rel=1e-15)
        expected = np.complex64(a) * np.complex64(b)
        assert _native(lambda a=a, b=b: module.cmul32(a, b)) == pytest.approx(
            complex(expected), rel=1e-6)
    # A float or numpy's complex types convert as the Python path converts them.
    assert _native(lambda: module.cmul(2.5, np.complex64(1 - 1j))) == 2.5 - 2.5j
    assert _native(lambda: module.norm(3 + 4j)) == 5.0


def test_tuples_mixing_complex_results(module: Any) -> None:
    result = _native(lambda: module.parts(1.5 - 2j, 0.25, -7))
    assert result == (1.75, 1.75 - 2j, -7, 1.5 - 2j)
    assert [type(v) for v in result] == [float, complex, int, complex]


def test_other_arguments_go_to_the_python_path(module: Any) -> None:
    # Converted there (an int, numpy's float), or refused with the argument named.
    value, calls = python_path_calls(lambda: module.cmul(2, np.float64(1.5)))
    assert (value, calls) == (3 + 0j, 1)
    with pytest.raises(TypeError, match=r"cmul\(\) argument 1: expected a complex"):
        module.cmul("1+2j", 1j)
    with pytest.raises(TypeError, match="argument 2"):
        module.cmul(1j, None)
    with pytest.raises(TypeError):
        module.cmul(1j)
    # Past f32's range: a Python complex overflows it; numpy's complex128 is inexact.
    with pytest.raises(ValueError, match="out of range for complex<f32>"):
        module.cmul32(1e300 + 0j, 1)
    with pytest.raises(ValueError, match="out of range for complex<f32>"):
        module.cmul32(1, complex(0, -1e39))
    with pytest.raises(ValueError, match="not exactly representable in complex<f32>"):
        module.cmul32(np.complex128(0.1 + 0j), 1)
    value, calls = python_path_calls(lambda: module.same32(np.complex128(0.5 + 0.25j)))
    assert (value, calls) == (0.5 + 0.25j, 0)  # exact: taken natively


def test_several_threads_call_complex_kernels(module: Any) -> None:
    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(2000):
            a, b = (complex(*rng.standard_normal(2)) for _ in range(2))
            assert module.cmul(a, b) == pytest.approx(a * b, rel=1e-15)
            assert module.parts(a, 1.0, seed)[3] == a

    run_in_threads(work, range(4))


CACHED = """
import sys
from pymlirjit import Session
from tests.boundary.test_native_complex import COMPLEX
session = Session(cache_dir=sys.argv[1])
module = session.compile(COMPLEX)
print(type(module.cmul.engine).__name__, module.cmul.ensure_native(),
      module.cmul(1 + 2j, 3 - 1j), module.cmul32(0.5j, 2), module.parts(1j, 1.0, 2)[1],
      session.disk_cache.hits)
"""


def test_the_disk_cache_keeps_complex_entries_native(tmp_path: Path) -> None:
    # Entries in a shared library are relocatable: complex's type is found by the
    # loading process.
    first = run_python(CACHED, str(tmp_path)).split()
    assert first == ["SharedLibrary", "True", "(5+5j)", "1j", "(1+1j)", "0"]
    assert run_python(CACHED, str(tmp_path)).split() == [*first[:-1], "1"]
