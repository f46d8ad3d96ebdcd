"""d. Kernel call with three ``memref<?xf32>`` arguments of 1 and of 10^7 elements.

The kernel reads one element of each of two arrays and writes one of the third
(``c[0] = a[0] + b[0]``), so the compute does not hide the call overhead: the cost
measured is that of passing the arrays, which must not depend on their size.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
from mlir.runtime.np_to_memref import get_ranked_memref_descriptor

from pymlirjit import Session, mlir_kernel

from ._timing import CaseResult, Config, Samples, Target, interleaved, per_call
from ._upstream import UpstreamModule, compile_upstream

__all__ = ["run"]

SOURCE = """
func.func @touch(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) {attrs} {{
  %c0 = arith.constant 0 : index
  %x = memref.load %a[%c0] : memref<?xf32>
  %y = memref.load %b[%c0] : memref<?xf32>
  %s = arith.addf %x, %y : f32
  memref.store %s, %c[%c0] : memref<?xf32>
  return
}}
"""

#: How much slower the large-array call may be and still count as "the same cost".
SAME_COST_TOLERANCE = 1.25


def touch(a: Any, b: Any, c: Any) -> None:
    """The floor: a Python function of the same arity (it does nothing)."""


def _upstream_call(upstream: UpstreamModule, a: np.ndarray, b: np.ndarray,
                   c: np.ndarray) -> None:
    """The upstream way: a fresh descriptor per array per call, pointers to pointers."""
    upstream.engine.invoke(
        "touch",
        ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))),
        ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(b))),
        ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(c))),
    )


def run(config: Config) -> CaseResult:
    """Measure passing arrays to a pymlirjit kernel against upstream, at two sizes."""
    repeat = config.repeat
    calls = config.pick(20_000, 500)
    # Upstream leaks ~8 KB of ctypes types per call: keep its call count small.
    upstream_calls = config.pick(300, 50)
    large = config.pick(10_000_000, 100_000)
    result = CaseResult("d", "kernel call with three memref<?xf32> arguments, c[0] = a[0] + "
                             "b[0] (ns per call)")

    @mlir_kernel(source=SOURCE.format(attrs=""), name="touch", session=Session())
    def kernel(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    # The same kernel generic over !T: the arrays' dtype binds it (see case c for
    # scalar-bound aliases).
    @mlir_kernel(source=SOURCE.format(attrs="").replace("f32", "!T"), name="touch",
                 session=Session())
    def generic(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    upstream = compile_upstream(SOURCE.format(attrs="attributes {llvm.emit_c_interface}"))

    arrays = {size: tuple(np.full(size, v, dtype=np.float32) for v in (1.0, 2.0, 0.0))
              for size in (1, large)}
    for a, b, c in arrays.values():
        kernel(a, b, c)
        assert c[0] == 3.0
        c[0] = 0.0
        generic(a, b, c)
        assert c[0] == 3.0
        c[0] = 0.0
        _upstream_call(upstream, a, b, c)
        assert c[0] == 3.0
    prebuilt = tuple(ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(x)))
                     for x in arrays[1])

    samplers: list[tuple[str, str, str, Callable[[], Samples]]] = [
        ("floor", "Python loop calling a 3-argument Python function", "floor",
         lambda: per_call(touch, (None, None, None), calls=calls, repeat=1)),
        ("upstream prebuilt", "upstream invoke, descriptors prebuilt, n=1", "upstream 1",
         lambda: per_call(upstream.engine.invoke, ("touch", *prebuilt), calls=upstream_calls,
                          repeat=1)),
    ]
    a, b, c = arrays[1]
    samplers.append(("generic 1", "generic @mlir_kernel over !T (memref<?x!T>), n=1",
                     "pymlirjit 1",
                     lambda: per_call(generic, (a, b, c), calls=calls, repeat=1)))
    for size, (a, b, c) in arrays.items():
        samplers += [
            (f"pymlirjit {size}", f"pymlirjit @mlir_kernel, n={size:,}", f"upstream {size}",
             lambda a=a, b=b, c=c: per_call(kernel, (a, b, c), calls=calls, repeat=1)),
            (f"upstream {size}", f"upstream invoke + get_ranked_memref_descriptor, "
                                 f"n={size:,}", f"upstream {size}",
             lambda a=a, b=b, c=c: per_call(_upstream_call, (upstream, a, b, c),
                                            calls=upstream_calls, repeat=1)),
        ]
    samples = interleaved(*(sampler for *_, sampler in samplers), repeat=repeat)
    order = ["floor", "pymlirjit 1", f"pymlirjit {large}", "generic 1", "upstream 1",
             "upstream prebuilt", f"upstream {large}"]
    measured = {key: (label, ref, s) for (key, label, ref, _), s in zip(samplers, samples)}
    for key in order:
        label, ref, values = measured[key]
        result.add(key, label, values, ref)

    growth = result.ratio(f"pymlirjit {large}", "pymlirjit 1")
    result.targets.append(Target(
        f"pymlirjit: n={large:,} costs no more than n=1 (within {SAME_COST_TOLERANCE}x)",
        growth <= SAME_COST_TOLERANCE, f"{growth:.2f}x"))
    generic_ratio = result.ratio("generic 1", "pymlirjit 1")
    result.targets.append(Target("generic kernel, compiled binding <= 1.5x the plain kernel "
                                 "call (issue 14)", generic_ratio <= 1.5,
                                 f"{generic_ratio:.2f}x"))
    floor = result.ratio("pymlirjit 1", "floor")
    result.notes.append(f"pymlirjit n=1 / Python 3-argument call floor = {floor:.1f}x "
                        f"(no design target)")
    return result
