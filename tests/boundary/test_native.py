"""Native entry points and trampolines: the code for this process, and relocatable
code for shared libraries (whose every process-specific value sits in a named slot)."""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np
import pytest

from pymlirjit import Session, callback
from pymlirjit.boundary.abi import boundary_abi, native_callback_supported
from pymlirjit.boundary.callback import Callback, TrampolineHelpers
from pymlirjit.boundary.callframe import call_machinery
from pymlirjit.boundary.native import NativeBatch
from pymlirjit.boundary.relocation import SLOT_PREFIX
from pymlirjit.boundary.signature import as_signature
from pymlirjit.runtime.module import slot_values

KERNEL_SIGNATURES = [
    "(f64, f32, i64, i32, i16, i8, i1, index) -> f64",
    "(memref<?x3xf32>, memref<4xi64, strided<[?], offset: ?>>, tensor<2x?xf64>) -> ()",
    "(i32) -> i1",
    "(f32) -> f32",
    "() -> i64",
    "(f64, i32) -> (f64, i1, i32, f32)",
    "(memref<?xf64>, f64) -> (memref<?x3xf32>, tensor<2xi64>, i32)",
    "(tensor<4xf64>) -> tensor<4xf64>",
]
CALLBACK_SIGNATURES = [
    "(f64, f32, i64, i1) -> f64",
    "(memref<?x?xf32>, memref<3xi8>) -> ()",
    "(i32) -> i1",
    "(f32) -> f32",
    "() -> i64",
    "(complex<f64>, f16, bf16, complex<f32>) -> f64",
    "(memref<*xf32>, index) -> memref<?x?xf64>",
    "(f64) -> f16",
    "(f32) -> bf16",
]


def callbacks() -> dict[str, Callback]:
    session = Session()
    made = {}
    for i, text in enumerate(CALLBACK_SIGNATURES):
        made[f"cb{i}"] = callback(text, name=f"cb{i}", session=session)(lambda *a: None)
    return made


def elf_type(code: bytes) -> int:
    assert code[:4] == b"\x7fELF"
    return struct.unpack_from("<H", code, 16)[0]


@pytest.mark.parametrize("calls", [None, call_machinery()], ids=["plain", "calls"])
@pytest.mark.parametrize("release_gil", [True, False, None])
def test_relocatable_code_names_every_value_it_uses(calls: Any,
                                                    release_gil: bool | None) -> None:
    batch = NativeBatch(relocatable=True)
    for i, text in enumerate(KERNEL_SIGNATURES):
        batch.add_kernel_entry(boundary_abi(as_signature(text)), f"_mlir_ciface_k{i}",
                               calls, release_gil, unwind=calls is not None,
                               symbol=f"entry{i}")
    by_name = callbacks()
    for name, cb in by_name.items():
        batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                      TrampolineHelpers(cb), symbol=f"_mlir_ciface_{name}")
    code = batch.emit_object()
    assert elf_type(code) == 1  # a relocatable object
    for symbol in batch.symbols:
        assert symbol.encode() in code
    values, _ = slot_values(batch.slot_names, by_name)
    assert len(values) == len(batch.slot_names) and all(values)
    assert f"{SLOT_PREFIX}{len(values) - 1}".encode() in code


def test_code_for_this_process_embeds_no_slots() -> None:
    batch = NativeBatch()
    cb = callbacks()["cb0"]
    batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                  TrampolineHelpers(cb))
    addresses, owner = batch.compile()
    assert batch.slot_names == [] and len(addresses) == 1 and addresses[0] != 0
    assert owner


def test_forwarders_call_through_their_slot() -> None:
    batch = NativeBatch(relocatable=True)
    signature = as_signature("(f64, memref<*xf32>) -> (complex<f64>, i1)")
    batch.add_forwarder("_mlir_ciface_f", boundary_abi(signature), "callback:f:entry")
    assert batch.slot_names == ["callback:f:entry"]
    assert elf_type(batch.emit_object()) == 1


def test_address_is_a_guard_only_in_modules_with_callbacks(session: Session) -> None:
    import ctypes

    @callback(session=session)
    def twice(x: float) -> float:
        return 2 * x

    with_callbacks = session.compile("""
    func.func @f(%x: f64) -> f64 {
      %y = call @twice(%x) : (f64) -> f64
      return %y : f64
    }
    func.func private @twice(f64) -> f64
    """).f
    plain = session.compile("""
    func.func @g(%x: f64) -> f64 {
      %y = arith.addf %x, %x : f64
      return %y : f64
    }
    """).g
    raw = with_callbacks.engine.function_address("_mlir_ciface_f")
    assert with_callbacks.address != raw  # the guard, same C ABI
    assert plain.address == plain.engine.function_address("_mlir_ciface_g")
    for function in (with_callbacks, plain):
        call = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(function.address)
        assert call(1.5) == 3.0


def test_an_entry_with_exact_types_takes_only_calls_of_those_types() -> None:
    """``exact=`` (generic kernels' entries): every group holds one route; a route, all
    its allowed types and one of its required ones. Other calls go to the Python path."""
    from pymlirjit.boundary.vectorcall import NativeCallable, set_entry

    function = Session().compile("""
    func.func @add(%a: f64, %b: f64) -> f64 {
      %r = arith.addf %a, %b : f64
      return %r : f64
    }""").add
    any_float = (float, np.float64, np.float32)
    exact = (((((0, any_float), (1, any_float)), ((0, (np.float64,)),)),  # np.float64 first
              (((0, (float,)), (1, (float,))), ())),)                     # or two floats
    batch = NativeBatch()
    index = batch.add_kernel_entry(function.abi, function._raw_address, None, exact=exact)
    addresses, code = batch.compile()

    class Probe(NativeCallable):
        pass

    def python_path(*args: Any) -> str:
        return "handed"

    obj = Probe()
    set_entry(obj, addresses[index], python_path, function._python_call.in_flight)
    assert obj(np.float64(1.0), 2.0) == obj(np.float64(1.0), np.float32(2.0)) == 3.0
    assert obj(1.0, 2.5) == 3.5
    for args in ((1.0, np.float64(2.0)), (np.float32(1.0), 2.0), (1.0, 2), (np.float64(1.0), 2)):
        assert obj(*args) == "handed", args
    assert function(1.0, 2) == 3.0  # the function itself converts any of them
    del code  # the entry's machine code: alive until here


def test_python_ints_reach_float_parameters_natively(session: Session) -> None:
    import sys

    function = session.compile("""
    func.func @mix(%x: f64, %y: f32) -> f64 {
      %e = arith.extf %y : f32 to f64
      %r = arith.addf %x, %e : f64
      return %r : f64
    }""").mix
    assert function(1.5, 2) == 3.5  # the first call builds the entry
    seen: list[str] = []
    sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code.co_name)
                   if event == "call" else None)
    try:
        results = [function(3, 4), function(-(2**53), 2**24), function(0.5, -7)]
    finally:
        sys.setprofile(None)
    assert results == [7.0, -(2.0**53) + 2.0**24, -6.5]
    assert seen == []  # no Python ran: the entry unboxed the ints itself


# (type, the first double that rounds to inf, the largest finite value)
ROUNDING_BOUNDARIES = [
    ("f32", float.fromhex("0x1.ffffffp127"), float.fromhex("0x1.fffffep127")),
    ("f16", 65520.0, 65504.0),
    ("bf16", float.fromhex("0x1.ffp127"), float.fromhex("0x1.fep127")),
]


@pytest.mark.parametrize(("mlir", "boundary", "largest"), ROUNDING_BOUNDARIES,
                         ids=[b[0] for b in ROUNDING_BOUNDARIES])
def test_a_trampoline_raises_for_a_finite_result_that_would_round_to_inf(
        session: Session, mlir: str, boundary: float, largest: float) -> None:
    """Below the boundary the trampoline rounds the result itself (no Python converter);
    from it on, a finite result raises as a kernel argument would; inf passes."""
    import math
    import sys

    returned = [0.0]
    cb = callback(f"(f64) -> {mlir}", name="cb", session=session)(lambda x: returned[0])
    assert native_callback_supported(cb.signature)
    run = session.compile(f"""
    func.func private @cb(f64) -> {mlir}
    func.func @run(%x: f64) -> {mlir} {{
      %r = func.call @cb(%x) : (f64) -> {mlir}
      return %r : {mlir}
    }}""").run
    below = math.nextafter(boundary, 0.0)
    seen: list[str] = []
    sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code.co_name)
                   if event == "call" else None)
    try:
        for sign in (1.0, -1.0):
            returned[0] = sign * below
            assert run(1.0) == sign * largest
    finally:
        sys.setprofile(None)
    assert "convert_result" not in seen
    for sign in (1.0, -1.0):
        returned[0] = sign * boundary
        with pytest.raises(ValueError, match=rf"callback 'cb': result #0: "
                                             rf"{re.escape(repr(sign * boundary))} is out "
                                             rf"of range for {mlir}"):
            run(1.0)
        returned[0] = sign * math.inf
        assert run(1.0) == sign * math.inf
