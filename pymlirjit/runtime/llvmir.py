"""Seeing the code: the LLVM IR and the host assembly of a module lowered to the LLVM
dialect, made the way MLIR's ExecutionEngine makes them (``Kernel.inspect_llvm()`` and
``Kernel.inspect_asm()`` call these).

MLIR's engine translates the module to LLVM IR, sets the host's triple and data layout,
runs LLVM's default pipeline at the opt level, and generates code for the host CPU (its
name and features) at that same level. Here the translation is MLIR's own
(``translate_module_to_llvmir``) and the rest is llvmlite's, which links the same LLVM
version; the result is what the JIT compiles, not a byte-for-byte copy of it (the JIT's
code model and relocation may differ).

>>> text = '''llvm.func @twice(%x: f64) -> f64 {
...   %r = llvm.fadd %x, %x : f64
...   llvm.return %r : f64
... }'''
>>> "fadd double" in llvm_ir(text)
True
>>> "twice:" in assembly(text)
True
"""

from __future__ import annotations

from typing import Any

from ..lowering.pipeline import check_opt_level, new_context, parse_module
from .objectcode import host_machine, llvm_binding, translate_module

__all__ = ["assembly", "llvm_ir"]


def llvm_ir(lowered_mlir: str, opt_level: int = 2) -> str:
    """The LLVM IR of ``lowered_mlir`` (MLIR text in the LLVM dialect) after LLVM's
    default pipeline at ``opt_level`` (0 to 3), for the host."""
    level = check_opt_level(opt_level)
    return str(_optimized(lowered_mlir, level, _machine(level)))


def assembly(lowered_mlir: str, opt_level: int = 2) -> str:
    """The host assembly (AT&T syntax on x86) of ``lowered_mlir`` optimized at
    ``opt_level`` (0 to 3), as the JIT generates it for this CPU."""
    level = check_opt_level(opt_level)
    machine = _machine(level)
    return str(machine.emit_assembly(_optimized(lowered_mlir, level, machine)))


def translate(lowered_mlir: str) -> str:
    """The LLVM IR MLIR translates ``lowered_mlir`` to, before any optimization."""
    module = parse_module(lowered_mlir, new_context(), "<lowered module>")
    return translate_module(module, "<lowered module>", "the lowered module")


def _optimized(lowered_mlir: str, opt_level: int, machine: Any) -> Any:
    llvm = llvm_binding()
    module = llvm.parse_assembly(translate(lowered_mlir))
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    # A pass builder per run: llvmlite's leak a little each (fine for inspection, which
    # is not a hot path).
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def _machine(opt_level: int) -> Any:
    """The host's target machine at ``opt_level``, as MLIR's JIT builds it (host CPU and
    features) but for the default code model."""
    return host_machine(opt_level, jit=False)
