"""a. Scalar callback: ns per f64 -> f64 callback made from a compiled ``scf.for`` loop."""

from __future__ import annotations

import ctypes

from pymlirjit import Session, callback, f64, index, mlir_kernel

from ._timing import CaseResult, Config, Target, interleaved, per_call, per_unit
from ._upstream import compile_upstream

__all__ = ["run"]

SOURCE = """
func.func @drive(%n: index) -> f64 {attrs} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {{
    %y = func.call @bump(%acc) : (f64) -> f64
    scf.yield %y : f64
  }}
  return %s : f64
}}
func.func private @bump(f64) -> f64 {attrs}
"""


def bump(x: f64) -> f64:
    """The callback: one float operation, so the crossing dominates."""
    return x + 1.0


def run(config: Config) -> CaseResult:
    """Measure pymlirjit's ``@callback``, upstream's ctypes callback and the Python floor."""
    calls = config.pick(1_000_000, 20_000)
    repeat = config.repeat
    result = CaseResult("a", f"scalar callback f64 -> f64, {calls:,} calls from a compiled "
                             f"loop (ns per callback)")

    session = Session()
    callback(session=session)(bump)

    @mlir_kernel(source=SOURCE.format(attrs=""), session=session)
    def drive(n: index) -> f64: ...

    assert drive(calls) == float(calls)

    prototype = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)
    upstream = compile_upstream(SOURCE.format(attrs="attributes {llvm.emit_c_interface}"),
                                {"bump": prototype(bump)})
    n, out = ctypes.c_int64(calls), ctypes.c_double()
    n_ptr, out_ptr = ctypes.pointer(n), ctypes.pointer(out)
    upstream.invoke("drive", n_ptr, out_ptr)
    assert out.value == float(calls)

    floor, ours, theirs = interleaved(
        lambda: per_call(bump, (1.0,), calls=calls, repeat=1),
        lambda: per_unit(lambda: drive(calls), units=calls, repeat=1),
        lambda: per_unit(lambda: upstream.invoke("drive", n_ptr, out_ptr), units=calls,
                         repeat=1),
        repeat=repeat)
    result.add("floor", "Python loop calling the same Python function", floor, "floor")
    result.add("pymlirjit", "pymlirjit @callback from @mlir_kernel loop", ours, "floor")
    result.add("upstream", "upstream register_runtime ctypes callback (invoke)", theirs,
               "floor")

    ratio = result.ratio("pymlirjit", "floor")
    result.targets.append(Target("pymlirjit <= 1.5x floor (Python loop calling the function)",
                                 ratio <= 1.5, f"{ratio:.2f}x"))
    versus = result.ratio("pymlirjit", "upstream")
    result.notes.append(f"pymlirjit / upstream ctypes callback = {versus:.2f}x")
    return result
