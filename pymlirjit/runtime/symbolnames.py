"""Symbols of a user's module that would collide with others once lowered: definitions
named like C functions the process exports (renamed, so that lowering's calls of ``@exp``
or ``@malloc`` reach the C library) and names reserved for pymlirjit's shims (refused)."""

from __future__ import annotations

from typing import Any

from ..boundary import ffi
from ..boundary.abi import RESERVED_PREFIX, defined_function_symbol
from ..errors import Diagnostic, MLIRError

__all__ = ["check_reserved_names", "rename_definitions_named_like_c_functions"]


def rename_definitions_named_like_c_functions(module: Any) -> dict[str, str]:
    """Rename each ``func.func`` defined in ``module`` whose name the process already
    exports (``@exp``, ``@malloc``, ...): lowering passes call those C functions by name
    (``math.exp`` becomes a call to ``@exp``, ``memref.alloc`` one to ``@malloc``) and
    would call the module's own function instead. Returns new symbol -> name given."""
    from mlir import ir

    renamed: dict[str, str] = {}
    for op in module.body.operations:
        if op.operation.name != "func.func" or len(op.regions[0].blocks) == 0:
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if ffi.process_exports(name):
            symbol = defined_function_symbol(name)
            ir.SymbolTable.replace_all_symbol_uses(name, symbol, module.operation)
            ir.SymbolTable.set_symbol_name(op, symbol)
            renamed[symbol] = name
    return renamed


def check_reserved_names(module: Any, filename: str) -> None:
    """Refuse symbols named like pymlirjit's shims: the session would call a function
    defined by the user with a shim's ABI."""
    from mlir import ir

    found = []
    for op in module.body.operations:
        attributes = op.operation.attributes
        if "sym_name" not in attributes:
            continue
        name = ir.StringAttr(attributes["sym_name"]).value
        if name.startswith(RESERVED_PREFIX):
            found.append(Diagnostic(
                "error", f"@{name}: symbols starting with {RESERVED_PREFIX!r} are reserved "
                f"for pymlirjit's own functions; rename it", str(op.location),
            ).renamed_source(filename))
    if found:
        raise MLIRError("reserved symbol names", found)
