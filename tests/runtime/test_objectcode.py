"""Host object code through llvmlite's short pipeline (the microkernels' path): it loads
and runs, on several threads at once, and bad input is a clear error."""

from __future__ import annotations

import ctypes

import pytest

from pymlirjit.errors import MLIRError
from pymlirjit.lowering.pipeline import new_context, parse_module
from pymlirjit.runtime.objectcode import object_code, translate_module
from pymlirjit.runtime.objectfile import ObjectEngine
from tests.threads import run_in_threads

LOWERED = """
llvm.func @axpy(%a: f64, %x: f64, %y: f64) -> f64 {
  %p = llvm.fmul %a, %x : f64
  %r = llvm.fadd %p, %y : f64
  llvm.return %r : f64
}
"""


def axpy_code(opt_level: int = 2) -> bytes:
    return object_code(translate_module(parse_module(LOWERED, new_context())), opt_level)


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_the_object_code_runs(opt_level: int) -> None:
    engine = ObjectEngine(axpy_code(opt_level), {})
    axpy = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double,
                            ctypes.c_double)(engine.function_address("axpy"))
    assert axpy(2.0, 3.0, 0.5) == 6.5


def test_threads_compile_at_once() -> None:
    codes = run_in_threads(axpy_code, [2, 2, 2, 2])
    assert len(set(codes)) == 1  # the same code, each from its own context and machine


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(MLIRError, match="LLVM cannot read a microkernel's IR"):
        object_code("define i32 @broken( {")
    with pytest.raises(ValueError, match="opt_level"):
        object_code("", 7)
    not_lowered = parse_module("func.func @f() { return }", new_context())
    with pytest.raises(MLIRError, match=r"'func\.func' was not lowered to the LLVM dialect"):
        translate_module(not_lowered)


def test_an_older_llvm_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import llvmlite.binding as llvm

    monkeypatch.setattr(llvm, "llvm_version_info", (20, 1, 8))
    with pytest.raises(MLIRError, match=r"links LLVM 20\.1\.8, older than MLIR's \(22\): "
                                        r"install llvmlite>=0\.50"):
        axpy_code()
