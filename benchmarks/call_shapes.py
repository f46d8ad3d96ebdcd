"""g. Call shapes (issue 13's table): what a call costs for each shape of arguments and
results a kernel or callback can have, against numba ``@njit`` with the same shape in the
same run. Kernel shapes: a scalar call with Python floats, two scalar results (a tuple),
``np.float64`` arguments, a memref result the kernel allocates (1000 f64), a 1000-element
tensor add returning a tensor; a kernel per parameter/result type (each says whether the
native entry serves it). Callback shapes (numba has no equivalent; per callback,
from a compiled loop): a memref result, a complex argument, f16, an unranked memref."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pymlirjit import MemRef, Session, UnrankedMemRef, callback, f16, f64, index

from ._timing import CaseResult, Config, Samples, Target, interleaved, per_call, per_unit

__all__ = ["run"]

KERNELS = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}
func.func @two(%a: f64, %b: f64) -> (f64, f64) {
  %s = arith.addf %a, %b : f64
  %p = arith.mulf %a, %b : f64
  return %s, %p : f64, f64
}
func.func @fill(%x: f64) -> memref<1000xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1000 : index
  %m = memref.alloc() : memref<1000xf64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %x, %m[%i] : memref<1000xf64>
  }
  return %m : memref<1000xf64>
}
func.func @tadd(%a: tensor<1000xf64>, %b: tensor<1000xf64>) -> tensor<1000xf64> {
  %e = tensor.empty() : tensor<1000xf64>
  %r = linalg.add ins(%a, %b : tensor<1000xf64>, tensor<1000xf64>)
                  outs(%e : tensor<1000xf64>) -> tensor<1000xf64>
  return %r : tensor<1000xf64>
}
"""

# Each callback shape: a compiled loop calling the callback %n times.
_LOOP = """
func.func @drive(%a: memref<?xf64>, %n: index) -> f64 {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {{
{body}
    %t = arith.addf %acc, %v : f64
    scf.yield %t : f64
  }}
  return %s : f64
}}
{declaration}
"""

CALLBACK_SHAPES: dict[str, tuple[str, str]] = {
    "memref result": ("""
    %m = func.call @give(%c4) : (index) -> memref<?xf64>
    %v = memref.load %m[%c0] : memref<?xf64>
    memref.dealloc %m : memref<?xf64>""", "func.func private @give(index) -> memref<?xf64>"),
    "complex argument": ("""
    %x = memref.load %a[%c0] : memref<?xf64>
    %z = complex.create %x, %x : complex<f64>
    %v = func.call @take_complex(%z) : (complex<f64>) -> f64""",
                         "func.func private @take_complex(complex<f64>) -> f64"),
    "f16 argument and result": ("""
    %h = arith.constant 1.5 : f16
    %r = func.call @half(%h) : (f16) -> f16
    %v = arith.extf %r : f16 to f64""", "func.func private @half(f16) -> f16"),
    "unranked memref argument": ("""
    %u = memref.cast %a : memref<?xf64> to memref<*xf64>
    %v = func.call @take_unranked(%u) : (memref<*xf64>) -> f64""",
                                 "func.func private @take_unranked(memref<*xf64>) -> f64"),
}

_FOUR = np.arange(4.0)


def give(k: index) -> MemRef[f64, None]:
    return _FOUR


def take_complex(z: complex) -> f64:
    return z.real  # type: ignore[return-value]


def half(x: f16) -> f16:
    return x


def take_unranked(a: UnrankedMemRef[f64]) -> f64:
    return a[0]  # type: ignore[no-any-return]


_CALLBACKS: dict[str, Callable[..., Any]] = {
    "memref result": give, "complex argument": take_complex,
    "f16 argument and result": half, "unranked memref argument": take_unranked,
}
#: What the callback returns per call in the loop, to check the loop's sum.
_EACH = {"memref result": 0.0, "complex argument": 1.0, "f16 argument and result": 1.5,
         "unranked memref argument": 1.0}


def _numba() -> dict[str, Callable[..., Any]]:
    import numba

    def add(a: float, b: float) -> float:
        return a + b

    def two(a: float, b: float) -> tuple[float, float]:
        return a + b, a * b

    def fill(x: float) -> Any:
        m = np.empty(1000)
        for i in range(1000):
            m[i] = x
        return m

    def tadd(a: Any, b: Any) -> Any:
        return a + b
    return {name: numba.njit(f) for name, f in
            {"add": add, "two": two, "fill": fill, "tadd": tadd}.items()}


def _kernel_shapes(config: Config, result: CaseResult) -> None:
    module = Session().compile(KERNELS)
    numba = _numba()
    a, b = np.full(1000, 1.5), np.full(1000, 2.0)
    one, two = np.float64(1.0), np.float64(2.0)
    shapes: list[tuple[str, str, tuple[Any, ...]]] = [
        ("scalar kernel call, Python float arguments", "add", (1.0, 2.0)),
        ("two scalar results (a tuple)", "two", (1.0, 2.0)),
        ("np.float64 arguments", "add", (one, two)),
        ("memref result allocated by the kernel (1000 f64)", "fill", (1.0,)),
        ("1000-element tensor add, tensor out", "tadd", (a, b)),
    ]
    calls = config.pick(20_000, 300)
    samplers = []
    for _, name, args in shapes:
        ours, theirs = getattr(module, name), numba[name]
        mine, reference = ours(*args), theirs(*args)
        if not np.array_equal(np.asarray(mine), np.asarray(reference)):
            raise AssertionError(f"{name}: pymlirjit {mine!r} != numba {reference!r}")
        samplers += [lambda f=ours, args=args: per_call(f, args, calls=calls, repeat=1),
                     lambda f=theirs, args=args: per_call(f, args, calls=calls, repeat=1)]
    samples = interleaved(*samplers, repeat=config.repeat)
    for i, (label, _, _) in enumerate(shapes):
        result.add(label, f"{label}: pymlirjit", samples[2 * i], f"{label} numba")
        result.add(f"{label} numba", f"{label}: numba @njit", samples[2 * i + 1])
        ratio = result.ratio(label, f"{label} numba")
        result.targets.append(Target(f"{label}: pymlirjit <= 0.5x numba @njit",
                                     ratio <= 0.5, f"{ratio:.2f}x"))


#: A kernel per parameter/result type, each returning its argument: (MLIR type, argument).
TYPED: tuple[tuple[str, Any], ...] = (
    ("f64", 1.5), ("f32", 1.5), ("i1", True), ("i8", 3), ("i16", 3), ("i32", 3), ("i64", 3),
    ("index", 3), ("complex<f64>", 1.5 + 2j), ("complex<f32>", 1.5 + 2j), ("f16", 1.5),
    ("bf16", 1.5), ("f8E4M3FN", 1.5), ("f8E5M2", 1.5),
)


def _typed_kernels() -> str:
    lines = [f"func.func @t{i}(%x: {t}) -> {t} {{ return %x : {t} }}"
             for i, (t, _) in enumerate(TYPED)]
    lines += ["func.func @ranked(%a: memref<?xf64>) -> index {",
              "  %c0 = arith.constant 0 : index",
              "  %n = memref.dim %a, %c0 : memref<?xf64>",
              "  return %n : index", "}",
              "func.func @unranked(%a: memref<*xf64>) -> index {",
              "  %r = memref.rank %a : memref<*xf64>",
              "  return %r : index", "}"]
    return "\n".join(lines)


def _type_rows(config: Config, result: CaseResult) -> None:
    """A row per scalar type (a kernel returning its argument), ranked and unranked
    memref parameters; each says whether the native entry serves it or the Python path
    (issue 28: complex took the Python path, 7-12 us a call)."""
    module = Session().compile(_typed_kernels())
    array = np.ones(4)
    cases = [(t, getattr(module, f"t{i}"), (value,)) for i, (t, value) in enumerate(TYPED)]
    cases += [("memref<?xf64>", module.ranked, (array,)),
              ("memref<*xf64>", module.unranked, (array,))]
    calls = config.pick(20_000, 300)
    samples = interleaved(*(lambda f=f, args=args: per_call(f, args, calls=calls, repeat=1)
                            for _, f, args in cases), repeat=config.repeat)
    for (t, f, _), measured in zip(cases, samples):
        path = "native entry" if f.ensure_native() else "Python path"
        result.add(f"type {t}", f"kernel {t} -> its argument back, {path}", measured, "type f64")
    for t in ("complex<f64>", "complex<f32>"):
        ratio = result.ratio(f"type {t}", "type f64")
        result.targets.append(Target(f"kernel with a {t} parameter and result <= 1.5x a "
                                     f"float kernel's call", ratio <= 1.5, f"{ratio:.2f}x"))


def _callback_shapes(config: Config, result: CaseResult) -> None:
    calls = config.pick(20_000, 300)
    array = np.ones(3)
    samplers: list[Callable[[], Samples]] = []
    for shape, (body, declaration) in CALLBACK_SHAPES.items():
        session = Session()
        callback(session=session)(_CALLBACKS[shape])
        drive = session.compile(_LOOP.format(body=body, declaration=declaration)).drive
        if drive(array, calls) != _EACH[shape] * calls:
            raise AssertionError(f"callback {shape}: wrong sum {drive(array, calls)}")
        samplers.append(lambda drive=drive: per_unit(lambda: drive(array, calls),
                                                     units=calls, repeat=1))
    samplers.append(lambda: per_call(half, (1.5,), calls=calls, repeat=1))
    samples = interleaved(*samplers, repeat=config.repeat)
    result.add("floor", "Python loop calling the callback's function (f16 one)",
               samples[-1], "floor")
    for shape, measured in zip(CALLBACK_SHAPES, samples):
        result.add(f"callback {shape}", f"callback, {shape}: pymlirjit (per call)",
                   measured, "floor")
        ns = measured.median
        result.targets.append(Target(f"callback, {shape}: <= 1 us", ns <= 1000,
                                     f"{ns:,.0f} ns"))


def run(config: Config) -> CaseResult:
    """Measure every call shape of issue 13's table, pymlirjit against numba @njit."""
    result = CaseResult("g", "call shapes: pymlirjit vs numba @njit with the same shape "
                             "(ns per call)")
    try:
        import numba  # noqa: F401
    except Exception as error:  # numba is optional (the `bench` extra)
        result.notes.append(f"numba unavailable ({type(error).__name__}): kernel shapes "
                            f"skipped")
    else:
        _kernel_shapes(config, result)
    _type_rows(config, result)
    _callback_shapes(config, result)
    result.notes.append("numba has no equivalent of the callback shapes: their rows "
                        "compare with the Python call floor")
    return result
