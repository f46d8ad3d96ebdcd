"""f16 and bf16 parameters and results on the native entry (issue 28's audit: they took
the Python path, ~30 us a call): rounded as numpy (ml_dtypes) rounds, overflow refused
as the Python path refuses it, the arguments it does not take handed over, tuples of
results, several threads, and the relocatable code of the disk cache."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pymlirjit import Session
from tests.boundary.test_native_shapes import python_path_calls, run_python
from tests.threads import run_in_threads

HALVES = """
func.func @h(%x: f16) -> f16 { return %x : f16 }
func.func @bh(%x: bf16) -> bf16 { return %x : bf16 }
func.func @hadd(%x: f16, %y: bf16) -> (f16, f32, bf16) {
  %a = arith.extf %x : f16 to f32
  %b = arith.extf %y : bf16 to f32
  %s = arith.addf %a, %b : f32
  %h = arith.truncf %s : f32 to f16
  %t = arith.truncf %s : f32 to bf16
  return %h, %s, %t : f16, f32, bf16
}
"""

TYPES = {"h": np.float16, "bh": ml_dtypes.bfloat16}


@pytest.fixture(scope="module")
def module() -> Any:
    return Session().compile(HALVES)


def _native(call: Callable[[], Any]) -> Any:
    value, calls = python_path_calls(call)
    assert calls == 0, "took the Python path"
    return value


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_half_kernels_are_served_natively(module: Any) -> None:
    assert all(getattr(module, name).ensure_native() for name in ("h", "bh", "hadd"))


@pytest.mark.parametrize("name", sorted(TYPES))
def test_python_floats_round_as_numpy_rounds(module: Any, name: str) -> None:
    rng = np.random.default_rng(11)
    # Every binade of both types, subnormals, halfway cases, signed zeros, the largest
    # finite values, infinities and NaN.
    values = [0.0, -0.0, 1.5, 0.1, 1 / 3, 65504.0, 65519.0, -65519.0, 6e-8, 2.98e-8, 3e-8,
              1e-8, float("inf"), float("-inf"), float("nan"), 1e38, 3.3e38, 1e-40]
    scales = np.exp2(rng.integers(-30, 16, 200))
    values += [float(v) for v in rng.standard_normal(200) * scales]
    values += [float(np.nextafter(np.float64(v), np.inf)) for v in (1.0009765625, 2049.0)]
    function, numpy_type = getattr(module, name), TYPES[name]
    for value in values:
        with np.errstate(over="ignore"):
            expected = float(numpy_type(value))
        if expected in (float("inf"), float("-inf")) and abs(value) != float("inf"):
            continue  # refused: test_overflow_is_refused_as_by_the_python_path
        got = _native(lambda value=value: function(value))
        assert type(got) is float
        assert _bits(got) == _bits(expected) or (got != got and expected != expected), value


def test_numpy_halves_cross_bit_for_bit(module: Any) -> None:
    for bits in (0x0001, 0x3C00, 0x7BFF, 0x8000, 0xFC00, 0x7E00, 0x7C01, 0xFE12):
        half = np.array(bits, np.uint16).view(np.float16)[()]
        got = _native(lambda half=half: module.h(half))
        assert _bits(got) == _bits(float(half)), hex(bits)


def test_overflow_is_refused_as_by_the_python_path(module: Any) -> None:
    with pytest.raises(ValueError, match=r"h\(\) argument 1: 65520.0 is out of range for f16"):
        module.h(65520.0)
    with pytest.raises(ValueError, match="out of range for bf16"):
        module.bh(-1e300)
    # Other types go to the Python path, which converts exactly or refuses.
    assert python_path_calls(lambda: module.h(np.float32(2.5))) == (2.5, 1)
    assert python_path_calls(lambda: module.bh(ml_dtypes.bfloat16(2.5))) == (2.5, 1)
    assert python_path_calls(lambda: module.h(3)) == (3.0, 1)
    with pytest.raises(ValueError, match="not exactly representable in f16"):
        module.h(np.float32(0.1))
    with pytest.raises(TypeError, match=r"h\(\) argument 1: expected a float for f16"):
        module.h("1.5")


def test_tuples_mixing_half_results(module: Any) -> None:
    result = _native(lambda: module.hadd(1.5, 2.25))
    assert result == (3.75, 3.75, 3.75)
    assert [type(v) for v in result] == [float, float, float]


def test_several_threads_call_half_kernels(module: Any) -> None:
    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for value in rng.standard_normal(3000) * 100:
            assert module.h(float(value)) == float(np.float16(value))
            assert module.bh(float(value)) == float(ml_dtypes.bfloat16(value))

    run_in_threads(work, range(4))


CACHED = """
import sys
import numpy as np
from pymlirjit import Session
from tests.boundary.test_native_halffloat import HALVES
session = Session(cache_dir=sys.argv[1])
module = session.compile(HALVES)
print(type(module.h.engine).__name__, module.h.ensure_native(), module.h(0.1),
      module.h(np.float16(2.5)), module.bh(0.1), session.disk_cache.hits)
"""


def test_the_disk_cache_keeps_half_entries_native(tmp_path: Path) -> None:
    first = run_python(CACHED, str(tmp_path)).split()
    assert first == ["SharedLibrary", "True", "0.0999755859375", "2.5", "0.10009765625", "0"]
    assert run_python(CACHED, str(tmp_path)).split() == [*first[:-1], "1"]


def test_bf16_arithmetic_links_the_rounding_helpers_on_every_cpu() -> None:
    # Without AVX512-BF16, LLVM rounds to bf16 by calling __truncsfbf2, which libgcc before
    # GCC 13 does not define: the module must link MLIR's float16 utilities for it.
    module = Session().compile("""
func.func @mad(%x: bf16, %y: bf16, %z: f64) -> bf16 {
  %p = arith.mulf %x, %y : bf16
  %w = arith.truncf %z : f64 to bf16
  %s = arith.addf %p, %w : bf16
  return %s : bf16
}""")
    bf16 = ml_dtypes.bfloat16
    for x, y, z in [(1.5, 2.25, 0.1), (-3.0, 1e-3, 1e30), (255.0, 255.0, -7.75)]:
        product = bf16(np.float32(bf16(x)) * np.float32(bf16(y)))
        want = bf16(np.float32(product) + np.float32(bf16(z)))
        assert np.float32(module.mad(x, y, z)) == np.float32(want)
