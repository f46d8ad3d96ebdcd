"""Checks of a module on its way to the LLVM dialect: what MLIR would abort on before a
stage runs, and what the JIT could not take once the pipeline has run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Diagnostic, MLIRError
from .walk import operations

__all__ = ["Lowered", "check_lowered", "check_no_stack_results", "check_no_sub_byte_access"]

#: Memory operations, by the index of their memref operand.
_MEMORY_ACCESSES = {"memref.load": 0, "memref.store": 1, "affine.load": 0, "affine.store": 1,
                    "memref.generic_atomic_rmw": 0, "memref.atomic_rmw": 1}


def check_no_sub_byte_access(module: Any, filename: str) -> None:
    """Raise instead of letting MLIR 22 abort the process: its memref lowering asserts
    on loads and stores of integers narrower than a byte (such as i1)."""
    from mlir import ir

    def element(op: Any) -> Any:
        return ir.MemRefType(op.operands[_MEMORY_ACCESSES[op.name]].type).element_type

    def sub_byte(op: Any) -> bool:
        accessed = element(op)
        return isinstance(accessed, ir.IntegerType) and accessed.width < 8

    found = [Diagnostic(
        "error", f"'{op.name}' of {element(op)} cannot be lowered by MLIR 22 (its "
        f"memref lowering aborts on elements narrower than a byte); use i8 and "
        f"arith.trunci/arith.extui", str(op.location)).renamed_source(filename)
        for op in operations(module, sub_byte, names=_MEMORY_ACCESSES, limit=5)]
    if found:
        raise MLIRError("unsupported memory access", found)


#: Ops whose memref result views the memory of their first operand.
_VIEWS = frozenset({"memref.cast", "memref.subview", "memref.reinterpret_cast",
                    "memref.collapse_shape", "memref.expand_shape", "memref.view",
                    "memref.transpose", "memref.memory_space_cast"})


def check_no_stack_results(module: Any, filename: str) -> None:
    """Raise if a public ``func.func`` returns a ``memref.alloca`` (or a view of one):
    that memory is the function's stack frame, gone when it returns, and the array made
    of it would free it, which ends the process. Only the top-level functions' return
    ops are looked at (no walk)."""
    found: list[Diagnostic] = []
    for function in module.body.operations:
        if (function.operation.name != "func.func"
                or "sym_visibility" in function.attributes):  # private: not called from Python
            continue
        for block in function.regions[0].blocks:
            last = block.operations[len(block.operations) - 1]
            if last.operation.name != "func.return":
                continue
            for value in last.operands:
                owner = value.owner
                while getattr(owner, "name", None) in _VIEWS:
                    owner = owner.operands[0].owner
                if getattr(owner, "name", None) == "memref.alloca" and len(found) < 5:
                    found.append(Diagnostic(
                        "error", "a function returns the stack memory of this "
                        "'memref.alloca', which is gone once it returns; use memref.alloc",
                        str(owner.location)).renamed_source(filename))
    if found:
        raise MLIRError("a function returns memory on its own stack", found)


@dataclass(frozen=True)
class Lowered:
    """What :func:`check_lowered` found in a module the JIT can take."""

    #: It calls LLVM's matrix intrinsics (``llvm.intr.matrix.*``), which LLVM lowers
    #: only when told to.
    uses_matrix_intrinsics: bool


def check_lowered(module: Any, filename: str) -> Lowered:
    """Raise :class:`MLIRError` if an op outside the LLVM dialect survived the pipeline
    (the JIT rejects it), naming up to five with their locations; else say what the
    module holds that the JIT must be prepared for."""
    from mlir import ir

    leftovers: list[Diagnostic] = []
    matrix = False

    def visit(op: Any) -> Any:
        nonlocal matrix
        name = op.name
        matrix = matrix or name.startswith("llvm.intr.matrix.")
        if not name.startswith("llvm.") and name != "builtin.module" and len(leftovers) < 5:
            leftovers.append(Diagnostic("error", f"'{name}' was not lowered to the LLVM dialect",
                                        str(op.location)).renamed_source(filename))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if leftovers:
        raise MLIRError("the pipeline left operations that cannot be JIT-compiled "
                        "(add the passes that lower them)", leftovers)
    return Lowered(uses_matrix_intrinsics=matrix)
