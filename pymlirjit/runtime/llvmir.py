"""Seeing the code: the LLVM IR and the host assembly of a module lowered to the LLVM
dialect, made the way MLIR's ExecutionEngine makes them (``Kernel.inspect_llvm()`` and
``Kernel.inspect_asm()`` call these).

MLIR's engine translates the module to LLVM IR, sets the host's triple and data layout,
runs LLVM's default pipeline at the opt level, and generates code for the host CPU (its
name and features) at that same level. Here the translation is MLIR's own
(``translate_module_to_llvmir``) and the rest is llvmlite's, which links the same LLVM
version; the result is what the JIT compiles, not a byte-for-byte copy of it (the JIT's
code model and relocation may differ).

A matmul microkernel compiled apart from its module
(:func:`~pymlirjit.runtime.microkernelcache.compiled_apart`) is shown as it was compiled:
through :data:`~pymlirjit.runtime.objectcode.PASSES` only, in a module of its own (linked
in after, for the one text), not through the default pipeline with its callers.

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
from ..lowering.walk import operations
from .microkernelcache import compiled_apart
from .objectcode import clean_up, host_machine, llvm_binding, translate_module

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
    module = parse_module(lowered_mlir, new_context(), "<lowered module>")
    apart = _take_apart(module)
    optimized = _llvm_module(module, machine)
    # A pass builder per run: llvmlite's leak a little each (fine for inspection, which
    # is not a hot path).
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(optimized, builder)
    for alone in apart:
        piece = _llvm_module(alone, machine)
        clean_up(piece, machine, opt_level)
        optimized.link_in(piece)
    return optimized


def _llvm_module(module: Any, machine: Any) -> Any:
    """llvmlite's module of the LLVM IR ``module`` (MLIR, in the LLVM dialect)
    translates to, for ``machine``."""
    translated = llvm_binding().parse_assembly(
        translate_module(module, "<lowered module>", "the lowered module"))
    translated.triple = machine.triple
    translated.data_layout = str(machine.target_data)
    translated.verify()
    return translated


def _take_apart(module: Any) -> list[Any]:
    """Modules of their own for the functions of ``module`` compiled apart from it
    (each with declarations of what it calls), left in ``module`` as declarations."""
    from mlir import ir
    from mlir.dialects import llvm

    symbols = {ir.StringAttr(op.attributes["sym_name"]).value: op
               for op in module.body.operations if op.operation.name == "llvm.func"}
    apart = []
    for name, op in symbols.items():
        if not compiled_apart(name) or not op.regions[0].blocks:
            continue
        with module.context, ir.Location.unknown():
            alone = ir.Module.create()
            with ir.InsertionPoint(alone.body):
                for callee in sorted(_callees(op) - {name}):
                    if callee in symbols:
                        llvm.LLVMFuncOp(callee, symbols[callee].attributes["function_type"])
            op.operation.clone(ir.InsertionPoint(alone.body))
            with ir.InsertionPoint(op):
                llvm.LLVMFuncOp(name, op.attributes["function_type"])
        op.operation.erase()
        apart.append(alone)
    return apart


def _callees(function: Any) -> set[str]:
    from mlir import ir

    return {ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            for op in operations(function, names={"llvm.call"})
            if "callee" in op.attributes}


def _machine(opt_level: int) -> Any:
    """The host's target machine at ``opt_level``, as MLIR's JIT builds it (host CPU and
    features) but for the default code model."""
    return host_machine(opt_level, jit=False)
