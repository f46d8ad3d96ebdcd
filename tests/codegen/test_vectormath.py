"""Math functions through glibc's libmvec with fastmath=True: accurate to a few ulp on
wide ranges and special values, the vector variants really called, and the code
loadable from the disk cache in a fresh process."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen import vectormath
from pymlirjit.lowering.pipeline import new_context, parse_module

FOUND = vectormath.library()
needs_libmvec = pytest.mark.skipif(FOUND is None, reason="no libmvec on this host")

#: Documented by glibc for libmvec (and the tolerance of the inline code, if any).
MAX_ULP = 4.0

_LD = np.longdouble


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.astype(np.float64)], dtype=_LD)


def _erfc(x: np.ndarray) -> np.ndarray:
    return np.array([math.erfc(v) for v in x.astype(np.float64)], dtype=_LD)


#: libm name -> (reference on long doubles, domain of the first (and second) operand).
REFERENCE: dict[str, tuple[Callable[..., Any], tuple[float, float]]] = {
    "exp": (np.exp, (-746.0, 710.0)), "exp2": (np.exp2, (-1076.0, 1024.0)),
    "expm1": (np.expm1, (-40.0, 709.0)), "log": (np.log, (0.0, np.inf)),
    "log10": (np.log10, (0.0, np.inf)), "log2": (np.log2, (0.0, np.inf)),
    "log1p": (np.log1p, (-1.0, np.inf)), "sin": (np.sin, (-1e6, 1e6)),
    "cos": (np.cos, (-1e6, 1e6)), "tan": (np.tan, (-1e6, 1e6)),
    "sinh": (np.sinh, (-710.0, 710.0)), "cosh": (np.cosh, (-710.0, 710.0)),
    "tanh": (np.tanh, (-np.inf, np.inf)), "asin": (np.arcsin, (-1.0, 1.0)),
    "acos": (np.arccos, (-1.0, 1.0)), "atan": (np.arctan, (-np.inf, np.inf)),
    "asinh": (np.arcsinh, (-np.inf, np.inf)), "acosh": (np.arccosh, (1.0, np.inf)),
    "atanh": (np.arctanh, (-1.0, 1.0)), "erf": (_erf, (-np.inf, np.inf)),
    "erfc": (_erfc, (-6.0, 27.0)), "cbrt": (np.cbrt, (-np.inf, np.inf)),
    "atan2": (np.arctan2, (-np.inf, np.inf)), "pow": (np.power, (0.0, 100.0)),
}
OP = {name: op for op, (name, _) in vectormath.FUNCTIONS.items()}
ARITY = {name: arity for name, arity in vectormath.FUNCTIONS.values()}
NAMES = sorted(FOUND.functions) if FOUND is not None else []


def _specials(dtype: type) -> list[float]:
    """nan, infinities, zeros, the smallest subnormal and normal, huge, and a few
    ordinary values, of both signs."""
    finfo = np.finfo(dtype)
    ordinary = [float(finfo.smallest_subnormal), float(finfo.tiny), float(finfo.max) / 2,
                float(finfo.max), 1.0, 0.5, 2.0]
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, *ordinary, *(-v for v in ordinary)]

#: Lanes of the vector kernels: every width of variant once, and a lane left over.
VECTOR_LANES = {"f64": 13, "f32": 29}


def _values(name: str, dtype: type, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values over the function's domain: uniform, and log-uniform magnitudes."""
    low, high = REFERENCE[name][1]
    finfo = np.finfo(dtype)
    low, high = max(low, -float(finfo.max)), min(high, float(finfo.max))
    if name == "pow":
        high = 30.0 if dtype == np.float32 else 300.0
    magnitude = np.exp(rng.uniform(math.log(float(finfo.tiny)), math.log(float(finfo.max)),
                                   n))
    signed = magnitude * rng.choice([-1.0, 1.0], n)
    mixed = np.where(rng.random(n) < 0.5, rng.uniform(max(low, -1e3), min(high, 1e3), n),
                     signed)
    inside = mixed[(mixed >= low) & (mixed <= high)]
    return inside.astype(dtype)


def _ulps(got: np.ndarray, reference: np.ndarray, dtype: type) -> np.ndarray:
    """|got - reference| in ulps of the reference rounded to ``dtype`` (0 where both are
    the same non-finite value)."""
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = reference.astype(dtype)
        spacing = np.spacing(np.abs(rounded)).astype(_LD)
        error = np.abs(got.astype(_LD) - reference) / spacing
    same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    return np.where(same, 0.0, np.where(np.isfinite(rounded), error, np.inf))


def _source(names: list[str], element: str) -> str:
    """A scalar loop and a loop of vector<LANES> ops per function."""
    lanes = VECTOR_LANES[element]
    parts = []
    for name in names:
        op, arity = OP[name], ARITY[name]
        operands = "%a" if arity == 1 else "%a, %b"
        vec = f"vector<{lanes}x{element}>"
        parts.append(f"""
func.func @s_{name}(%x: memref<?x{element}>, %y: memref<?x{element}>,
                    %out: memref<?x{element}>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?x{element}>
  scf.for %i = %c0 to %n step %c1 {{
    %a = memref.load %x[%i] : memref<?x{element}>
    %b = memref.load %y[%i] : memref<?x{element}>
    %r = {op} {operands} : {element}
    memref.store %r, %out[%i] : memref<?x{element}>
  }}
  return
}}
func.func @v_{name}(%x: memref<?x{element}>, %y: memref<?x{element}>,
                    %out: memref<?x{element}>) {{
  %c0 = arith.constant 0 : index
  %step = arith.constant {lanes} : index
  %n = memref.dim %x, %c0 : memref<?x{element}>
  scf.for %i = %c0 to %n step %step {{
    %a = vector.load %x[%i] : memref<?x{element}>, {vec}
    %b = vector.load %y[%i] : memref<?x{element}>, {vec}
    %r = {op} {operands} : {vec}
    vector.store %r, %out[%i] : memref<?x{element}>, {vec}
  }}
  return
}}""")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    """Both element types' modules, compiled once for every accuracy test."""
    return {element: Session(fastmath=True).compile(_source(NAMES, element))
            for element in ("f64", "f32")}


@needs_libmvec
@pytest.mark.parametrize("element", ["f64", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_every_function_is_accurate_to_a_few_ulp(compiled: dict[str, Any], name: str,
                                                  element: str) -> None:
    dtype = np.float64 if element == "f64" else np.float32
    rng = np.random.default_rng(sum(map(ord, name + element)))
    lanes = VECTOR_LANES[element]
    n = 20_000 // lanes * lanes
    x = _values(name, dtype, n, rng)
    y = _values(name, dtype, len(x), rng) if ARITY[name] == 2 else np.ones_like(x)
    if name == "pow":  # exponents of either sign that keep most results finite
        y = rng.uniform(-30, 30, len(x)).astype(dtype)
    x, y = x[: len(x) // lanes * lanes], y[: len(x) // lanes * lanes]
    function = REFERENCE[name][0]
    with np.errstate(all="ignore"):
        reference = function(x.astype(_LD), *([y.astype(_LD)] if ARITY[name] == 2 else []))
    for kind in ("s", "v"):
        out = np.full_like(x, 7.0)
        getattr(compiled[element], f"{kind}_{name}")(x, y, out)
        ulps = _ulps(out, reference, dtype)
        worst = int(np.argmax(ulps))
        assert ulps[worst] <= MAX_ULP, (
            f"{kind}_{name}({x[worst]!r}, {y[worst]!r}) = {out[worst]!r}, expected "
            f"{reference[worst]!r}: {ulps[worst]:.1f} ulp")


@needs_libmvec
@pytest.mark.parametrize("element", ["f64", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values_give_what_numpy_gives(compiled: dict[str, Any], name: str,
                                              element: str) -> None:
    dtype = np.float64 if element == "f64" else np.float32
    lanes = VECTOR_LANES[element]
    specials = _specials(dtype)
    pairs = [(a, b) for a in specials for b in (specials if ARITY[name] == 2 else [1.0])]
    pairs += [pairs[0]] * (-len(pairs) % lanes)
    x = np.array([a for a, _ in pairs], dtype=dtype)
    y = np.array([b for _, b in pairs], dtype=dtype)
    function = REFERENCE[name][0]
    with np.errstate(all="ignore"):
        reference = function(x.astype(_LD), *([y.astype(_LD)] if ARITY[name] == 2 else []))
    for kind in ("s", "v"):
        out = np.full_like(x, 7.0)
        getattr(compiled[element], f"{kind}_{name}")(x, y, out)
        ulps = _ulps(out, reference, dtype)
        bad = [(x[i], y[i], out[i], reference.astype(dtype)[i])
               for i in np.flatnonzero(ulps > MAX_ULP)]
        assert not bad, f"{kind}_{name}: (x, y, got, expected): {bad[:4]}"
        with np.errstate(over="ignore"):
            zeros = reference.astype(dtype) == 0
        assert np.array_equal(np.signbit(out[zeros]), np.signbit(reference[zeros])), name


@needs_libmvec
@pytest.mark.parametrize("n", [0, 1, 7, 1001, 100_000])
def test_a_vectorized_loop_of_any_length_is_right(n: int) -> None:
    module = Session(fastmath=True).compile(_source(["exp", "tanh", "sin"], "f64"))
    x = np.random.default_rng(n).uniform(-20, 20, n)
    for name, function in (("exp", np.exp), ("tanh", np.tanh), ("sin", np.sin)):
        out = np.full(n, 7.0)
        getattr(module, f"s_{name}")(x, x, out)
        reference = function(x.astype(_LD))
        assert np.all(_ulps(out, reference, np.float64) <= MAX_ULP)


def _kernel(source: str, name: str, **options: Any) -> Any:
    return mlir_kernel(source=source, name=name, **options)(lambda x, y, out: None)


@needs_libmvec
@pytest.mark.parametrize("element", ["f64", "f32"])
def test_the_machine_code_calls_the_widest_vector_variant(element: str) -> None:
    assert FOUND is not None
    source = _source(["sin"], element)
    bits = 64 if element == "f64" else 32
    letter, lanes = FOUND.lanes(bits)[0]
    called = re.compile(rf"\bcall\w*\s+{FOUND.variant('sin', letter, lanes, 1, bits)}\b")
    # A loop of scalar ops, vectorized by LLVM; and vector<N> ops.
    assert called.search(_kernel(source, "s_sin", fastmath=True).inspect_asm())
    assert called.search(_kernel(source, "v_sin", fastmath=True).inspect_asm())
    assert "_ZGV" not in _kernel(source, "s_sin").inspect_asm()  # no fastmath: as before


@pytest.mark.parametrize("element", ["f64", "f32"])
@pytest.mark.parametrize("function", ["exp", "tanh"])
def test_exp_and_tanh_are_computed_inline_in_the_widest_vectors(function: str,
                                                                 element: str) -> None:
    source = _source([function], element)
    suffix = "pd" if element == "f64" else "ps"
    register = "zmm" if "avx512f" in Path("/proc/cpuinfo").read_text() else "[xy]mm"
    for name in (f"s_{function}", f"v_{function}"):
        code = _kernel(source, name, fastmath=True).inspect_asm()
        assert not re.search(rf"\bcall\w*\s+(_ZGV\w+_)?{function}f?\b", code), name
        assert re.search(rf"vfmadd\w+{suffix}\s+%{register}", code), name
    libm = _kernel(source, f"s_{function}").inspect_asm()
    assert re.search(rf"\bcall\w*\s+{function}", libm)


def test_without_libmvec_only_exp_is_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module(_source(["sin", "exp"], "f64"), new_context())
    monkeypatch.setattr(vectormath, "library", lambda: None)
    assert vectormath.use_vector_library(module) == 2  # the two math.exp, inline
    text = str(module)
    assert "math.sin" in text and "math.exp" not in text and "llvm.call" not in text
    assert vectormath.cache_tag() == ""


@needs_libmvec
def test_a_module_with_its_own_sin_symbol_keeps_calling_it() -> None:
    source = """
    func.func private @sin(f64) -> f64
    func.func @f(%x: f64) -> f64 {
      %r = math.sin %x : f64
      %s = math.cos %r : f64
      return %s : f64
    }"""
    module = parse_module(source, new_context())
    assert vectormath.use_vector_library(module) == 1  # cos only
    assert "math.sin" in str(module) and "llvm.call @cos" in str(module)


@needs_libmvec
def test_the_cache_key_names_the_library() -> None:
    from pymlirjit.runtime.prepare import CompileOptions

    fast, plain = CompileOptions.make(fastmath=True), CompileOptions.make()
    assert "libmvec" in fast.pipeline_key and "libmvec" not in plain.pipeline_key


CACHED = textwrap.dedent("""
    import sys
    import numpy as np
    from pymlirjit import Session
    session = Session(cache_dir=sys.argv[1], fastmath=True)
    module = session.compile('''SOURCE''')
    x = np.linspace(-30, 30, 1001)
    out = np.zeros_like(x)
    module.s_exp(x, x, out)
    assert np.allclose(out, np.exp(x), rtol=1e-14, atol=0), "s_exp"
    module.s_sin(x, x, out)
    assert np.allclose(out, np.sin(x), rtol=1e-14, atol=1e-15), "s_sin"
    y = np.linspace(-3, 3, 13 * 7)
    out = np.zeros_like(y)
    module.v_sin(y, y, out)
    assert np.allclose(out, np.sin(y), rtol=1e-14, atol=1e-15), "v_sin"
    print(type(module.engine).__name__, session.disk_cache.hits, session.disk_cache.misses)
""")


def _run_cached(cache_dir: Path, env: dict[str, str]) -> str:
    code = CACHED.replace("SOURCE", _source(["exp", "sin"], "f64"))
    done = subprocess.run([sys.executable, "-c", code, str(cache_dir)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


@needs_libmvec
@pytest.mark.parametrize("env, compiled, loaded", [
    ({}, "SharedLibrary", "SharedLibrary"),  # linked at the miss, loaded at once
    ({"CC": ""}, "ExecutionEngine", "ObjectEngine"),  # no C compiler: object code
])
def test_a_fresh_process_loads_cached_code_that_calls_libmvec(
        tmp_path: Path, env: dict[str, str], compiled: str, loaded: str) -> None:
    assert _run_cached(tmp_path, env) == f"{compiled} 0 1"
    assert _run_cached(tmp_path, env) == f"{loaded} 1 0"


@needs_libmvec
@pytest.mark.parametrize("name", ["exp", "tanh", "atan2"])
def test_ops_on_vectors_of_two_dimensions(name: str) -> None:
    operands = "%a" if ARITY[name] == 1 else "%a, %a"
    source = f"""
    func.func @f(%x: memref<?xf32>, %out: memref<?xf32>) {{
      %c0 = arith.constant 0 : index
      %c6 = arith.constant 6 : index
      %n = memref.dim %x, %c0 : memref<?xf32>
      scf.for %i = %c0 to %n step %c6 {{
        %flat = vector.load %x[%i] : memref<?xf32>, vector<6xf32>
        %a = vector.shape_cast %flat : vector<6xf32> to vector<2x3xf32>
        %r = {OP[name]} {operands} : vector<2x3xf32>
        %back = vector.shape_cast %r : vector<2x3xf32> to vector<6xf32>
        vector.store %back, %out[%i] : memref<?xf32>, vector<6xf32>
      }}
      return
    }}"""
    module = Session(fastmath=True).compile(source)
    x = np.linspace(-4, 4, 6 * 50, dtype=np.float32)
    out = np.zeros_like(x)
    module.f(x, out)
    arguments = [x.astype(_LD)] * ARITY[name]
    assert np.all(_ulps(out, REFERENCE[name][0](*arguments), np.float32) <= MAX_ULP)


@needs_libmvec
def test_a_module_with_its_own_compiler_used_list_keeps_libm_calls() -> None:
    source = """
    llvm.func @keep()
    llvm.mlir.global appending @llvm.compiler.used() {section = "llvm.metadata"}
        : !llvm.array<1 x ptr> {
      %u = llvm.mlir.undef : !llvm.array<1 x ptr>
      %p = llvm.mlir.addressof @keep : !llvm.ptr
      %a = llvm.insertvalue %p, %u[0] : !llvm.array<1 x ptr>
      llvm.return %a : !llvm.array<1 x ptr>
    }
    func.func @f(%x: f64) -> f64 {
      %r = math.sin %x : f64
      return %r : f64
    }"""
    module = parse_module(source, new_context())
    assert vectormath.use_vector_library(module) == 0
    assert "math.sin" in str(module) and "_ZGV" not in str(module)


@needs_libmvec
def test_a_linked_shared_library_needs_libmvec_only_if_it_calls_it(tmp_path: Path) -> None:
    # glibc's libm.so, which the link names, is a script adding libmvec.so.1 as needed.
    from pymlirjit.runtime.sharedlib import c_compiler, link_shared_library

    compiler = c_compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    objects = {}
    for name, body in (("calls", "return _ZGVbN2v_sin(x);"), ("plain", "return x;")):
        source = tmp_path / f"{name}.c"
        source.write_text("typedef double v2 __attribute__((vector_size(16)));\n"
                          f"v2 _ZGVbN2v_sin(v2);\nv2 f(v2 x) {{ {body} }}\n")
        subprocess.run([*compiler, "-c", "-fPIC", "-o", str(tmp_path / f"{name}.o"),
                        str(source)], check=True, capture_output=True)
        objects[name] = (tmp_path / f"{name}.o").read_bytes()
    assert vectormath.LIBRARY.encode() in link_shared_library([objects["calls"]])
    assert vectormath.LIBRARY.encode() not in link_shared_library([objects["plain"]])

