"""c. Kernel call overhead with scalars: an MLIR function adding two f64, called from
Python, against upstream ``invoke``, numba and a Python function of the same arity; and
the same function generic over ``!T`` (issue 14: dispatch on a compiled binding costs at
most 1.5x the plain call)."""

from __future__ import annotations

import ctypes
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from pymlirjit import Session, callback, f64, mlir_kernel

from ._timing import CaseResult, Config, Target, interleaved, per_call
from ._upstream import compile_upstream

__all__ = ["run"]

SOURCE = """
func.func @add(%a: f64, %b: f64) -> f64 {attrs} {{
  %r = arith.addf %a, %b : f64
  return %r : f64
}}
"""


WITH_CALLBACK = SOURCE.format(attrs="") + """
func.func @hook_once(%x: f64) -> f64 {
  %r = func.call @hook(%x) : (f64) -> f64
  return %r : f64
}
func.func private @hook(f64) -> f64
"""


#: ``add`` generic over its type: Python floats bind ``!T = f64``, np.float32 ``f32``.
GENERIC = SOURCE.format(attrs="").replace("f64", "!T")

#: Generic dispatch on a compiled binding may cost this much more than the plain call.
GENERIC_TARGET = 1.5


def add(a: float, b: float) -> float:
    """The floor: a Python function of the same arity."""
    return a + b


def _with_callback() -> Callable[..., Any]:
    """``add`` of a module that also calls a Python callback (so its kernel calls keep a
    call record for the callbacks)."""
    session = Session()

    @callback(session=session)
    def hook(x: f64) -> f64:
        return x

    module = session.compile(WITH_CALLBACK)
    assert module.hook_once(2.0) == 2.0
    return module.add


def _from_disk(directory: str) -> Callable[..., Any]:
    """``add`` as a new process loads it from the disk cache (a shared library)."""
    Session(cache_dir=directory).compile(SOURCE.format(attrs=""))
    loaded = Session(cache_dir=directory).compile(SOURCE.format(attrs=""))
    assert type(loaded.engine).__name__ in ("SharedLibrary", "ObjectEngine")
    return loaded.add


def _numba_baselines(address: int) -> dict[str, Callable[..., Any]] | str:
    """numba ``@njit`` add, and ``@njit`` calling the MLIR function pointer; or why not."""
    try:
        import numba
    except Exception as error:  # numba is optional (the `bench` extra)
        return f"numba unavailable ({type(error).__name__}: {error})"
    jit_add = numba.njit(add)
    mlir_add = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)(address)

    @numba.njit
    def call_pointer(a: float, b: float) -> float:
        return mlir_add(a, b)  # type: ignore[no-any-return]

    assert jit_add(1.0, 2.0) == 3.0 and call_pointer(1.0, 2.0) == 3.0
    return {"numba": jit_add, "numba pointer": call_pointer}


def run(config: Config) -> CaseResult:
    """Measure a pymlirjit scalar kernel call against its baselines."""
    repeat = config.repeat
    calls = config.pick(200_000, 5_000)
    upstream_calls = config.pick(20_000, 500)
    result = CaseResult("c", "kernel call with scalars, (f64, f64) -> f64 add, from a Python "
                             "loop (ns per call)")

    @mlir_kernel(source=SOURCE.format(attrs=""), name="add", session=Session())
    def mlir_add(a: f64, b: f64) -> f64: ...

    @mlir_kernel(source=SOURCE.format(attrs=""), name="add", session=Session(),
                 release_gil=False)
    def add_keeping_gil(a: f64, b: f64) -> f64: ...

    @mlir_kernel(source=GENERIC, name="add", session=Session())
    def generic(a: Any, b: Any) -> Any: ...

    @mlir_kernel(source=GENERIC, name="add", session=Session())
    def generic_cold(a: Any, b: Any) -> Any: ...

    f32_args = (np.float32(1.0), np.float32(2.0))
    for kernel in (generic, generic_cold):
        assert kernel(1.0, 2.0) == kernel(*f32_args) == 3.0  # binds f64, then f32
    generic.compile()  # both bindings compiled: dispatched natively from now on
    generic_cold.native_after = 1 << 62  # never hot: Python dispatch, for comparison

    scratch = tempfile.TemporaryDirectory()
    with_callback, from_disk = _with_callback(), _from_disk(scratch.name)
    assert mlir_add(1.0, 2.0) == add_keeping_gil(1.0, 2.0) == 3.0
    assert with_callback(1.0, 2.0) == from_disk(1.0, 2.0) == 3.0
    compiled = mlir_add.compile()
    raw = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)(compiled.address)

    upstream = compile_upstream(SOURCE.format(attrs="attributes {llvm.emit_c_interface}"))
    a, b, out = ctypes.c_double(1.0), ctypes.c_double(2.0), ctypes.c_double()
    pointers = ctypes.pointer(a), ctypes.pointer(b), ctypes.pointer(out)
    upstream.invoke("add", *pointers)
    assert out.value == 3.0

    paths: list[tuple[str, str, Callable[..., Any], tuple[Any, ...], int]] = [
        ("floor", "Python loop calling def add(a, b): return a + b", add, (1.0, 2.0), calls),
        ("pymlirjit", "pymlirjit @mlir_kernel", mlir_add, (1.0, 2.0), calls),
        ("compiled", "pymlirjit CompiledFunction (kernel.compile())", compiled, (1.0, 2.0),
         calls),
        ("keep_gil", "pymlirjit @mlir_kernel(release_gil=False)", add_keeping_gil,
         (1.0, 2.0), calls),
        ("callbacks", "pymlirjit, in a module that calls a Python callback", with_callback,
         (1.0, 2.0), calls),
        ("disk", "pymlirjit, loaded from the disk cache", from_disk, (1.0, 2.0), calls),
        ("generic", "generic @mlir_kernel over !T, floats bind f64 (1st binding)",
         generic, (1.0, 2.0), calls),
        ("generic 2nd", "generic, np.float32 bind f32 (2nd binding of the chain)", generic,
         f32_args, calls),
        ("generic cold", "generic, dispatched in Python (before native_after calls)",
         generic_cold, (1.0, 2.0), calls),
        ("ctypes", "ctypes CFUNCTYPE on the same C-ABI address", raw,
         (1.0, 2.0), calls),
        ("upstream", "upstream invoke, ctypes pointers prebuilt", upstream.engine.invoke,
         ("add", *pointers), upstream_calls),
    ]
    numba = _numba_baselines(compiled.address)
    if isinstance(numba, str):
        result.notes.append(numba + "; numba rows skipped")
    else:
        paths += [
            ("numba", "numba @njit add (numba dispatch)", numba["numba"], (1.0, 2.0), calls),
            ("numba pointer", "numba @njit calling the MLIR C-ABI function pointer",
             numba["numba pointer"], (1.0, 2.0), calls),
        ]
    samples = interleaved(*(lambda f=f, args=args, n=n: per_call(f, args, calls=n, repeat=1)
                            for _, _, f, args, n in paths), repeat=repeat)
    for (key, label, *_), measured in zip(paths, samples):
        result.add(key, label, measured, "pymlirjit" if key.startswith("generic") else "floor")
    scratch.cleanup()

    ratio = result.ratio("pymlirjit", "floor")
    result.targets.append(Target("pymlirjit kernel call <= 2x floor (Python function, same "
                                 "arity)", ratio <= 2.0, f"{ratio:.2f}x"))
    worst = max(result.ratio(key, "pymlirjit") for key in ("generic", "generic 2nd"))
    result.targets.append(Target(f"generic kernel, compiled binding <= {GENERIC_TARGET}x the "
                                 f"plain kernel call (issue 14)", worst <= GENERIC_TARGET,
                                 f"{worst:.2f}x (worst of both bindings)"))
    if result.has("numba"):
        versus = result.ratio("pymlirjit", "numba")
        result.targets.append(Target("pymlirjit kernel call faster than numba @njit dispatch",
                                     versus < 1.0, f"{versus:.2f}x numba"))
    else:
        result.targets.append(Target("pymlirjit kernel call faster than numba @njit dispatch",
                                     None, "numba not installed"))
    return result
