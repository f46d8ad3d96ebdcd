"""b. Memref callback: a rank-2 f32 memref handed to a Python callback that reads one
element, called many times from a compiled loop, for a 1x1 and a 1000x1000 array."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from mlir.runtime.np_to_memref import make_nd_memref_descriptor, ranked_memref_to_numpy

from pymlirjit import MemRef, Session, callback, f32, index, mlir_kernel

from ._timing import CaseResult, Config, Target, interleaved, per_call, per_unit
from ._upstream import compile_upstream

__all__ = ["run"]

SOURCE = """
func.func @drive(%a: memref<?x?xf32>, %n: index) -> f32 {attrs} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f32 {{
    %x = func.call @first(%a) : (memref<?x?xf32>) -> f32
    %t = arith.addf %acc, %x : f32
    scf.yield %t : f32
  }}
  return %s : f32
}}
func.func private @first(memref<?x?xf32>) -> f32 {attrs}
"""

#: The ctypes descriptor type upstream's helpers use for memref<?x?xf32> (built once).
UPSTREAM_DESCRIPTOR = make_nd_memref_descriptor(2, ctypes.c_float)


def first(a: MemRef[f32, None, None]) -> f32:
    """The callback: read one element of the array it is given."""
    return a[0, 0]  # type: ignore[no-any-return]


def first_upstream(pointer: Any) -> float:
    """The upstream callback: the descriptor pointer turned into numpy as upstream shows."""
    return float(ranked_memref_to_numpy(pointer)[0, 0])


def run(config: Config) -> CaseResult:
    """Measure pymlirjit's memref ``@callback`` against upstream's ctypes pattern."""
    repeat = config.repeat
    calls = config.pick(20_000, 1_000)
    upstream_calls = config.pick(1_000, 100)
    result = CaseResult("b", "memref callback, memref<?x?xf32> -> f32 reading one element, "
                             "from a compiled loop (ns per callback)")

    session = Session()
    callback(session=session)(first)

    @mlir_kernel(source=SOURCE.format(attrs=""), session=session)
    def drive(a: np.ndarray, n: index) -> f32: ...

    prototype = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.POINTER(UPSTREAM_DESCRIPTOR))
    upstream = compile_upstream(SOURCE.format(attrs="attributes {llvm.emit_c_interface}"),
                                {"first": prototype(first_upstream)})

    for rows, cols in ((1, 1), (1000, 1000)):
        size = f"{rows}x{cols}"
        array = np.full((rows, cols), 0.5, dtype=np.float32)
        assert drive(array, calls) == 0.5 * calls

        descriptor = UPSTREAM_DESCRIPTOR()
        descriptor.allocated = array.ctypes.data
        descriptor.aligned = array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        descriptor.offset = 0
        descriptor.shape[:] = array.shape
        descriptor.strides[:] = [s // array.itemsize for s in array.strides]
        n, out = ctypes.c_int64(upstream_calls), ctypes.c_float()
        pointers = (ctypes.pointer(ctypes.pointer(descriptor)), ctypes.pointer(n),
                    ctypes.pointer(out))
        upstream.invoke("drive", *pointers)
        assert out.value == 0.5 * upstream_calls

        floor, ours, theirs = interleaved(
            lambda array=array: per_call(first, (array,), calls=calls, repeat=1),
            lambda array=array: per_unit(lambda: drive(array, calls), units=calls, repeat=1),
            lambda pointers=pointers: per_unit(lambda: upstream.invoke("drive", *pointers),
                                               units=upstream_calls, repeat=1),
            repeat=repeat)
        result.add(f"floor {size}", f"Python loop calling the function, {size} array", floor,
                   f"floor {size}")
        result.add(f"pymlirjit {size}", f"pymlirjit @callback, {size}", ours,
                   f"upstream {size}")
        result.add(f"upstream {size}",
                   f"upstream ctypes callback + ranked_memref_to_numpy, {size}", theirs,
                   f"upstream {size}")

    for size in ("1x1", "1000x1000"):
        ns = result.median(f"pymlirjit {size}")
        result.targets.append(Target(f"pymlirjit memref callback < 1 us ({size})", ns < 1000,
                                     f"{ns:,.0f} ns"))
    return result
