"""External declarations that nothing refers to, erased from a lowered module (as in
mlir-runner, a function declared but never called needs no definition).

MLIR's ``symbol-dce`` finds the unreferenced ones: it erases private symbols that no live
op refers to, in attributes too. The declarations that may go are made private for its
run, and every other private symbol public, so that it erases those declarations and
nothing else; the visibilities are restored afterwards. Only attributes named
``sym_name`` and ``sym_visibility`` are read from Python (converting others, such as a
dense complex constant, can abort the bindings). Counting the names in the printed
module did the same in ~6-10 ms for a matmul microkernel's module; this takes ~2-3 ms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["drop_unused_declarations", "is_declaration"]

_VISIBILITY = "sym_visibility"


def drop_unused_declarations(module: Any, keep: Callable[[str], bool] | None) -> None:
    """Erase the external ``llvm.func`` declarations of ``module`` (in the LLVM dialect)
    that nothing refers to: MLIR's async runtime's always (convert-async-to-llvm declares
    them all); with ``keep``, every other one whose name ``keep`` does not accept."""
    from mlir import ir
    from mlir.passmanager import PassManager

    candidates, private = set(), set()  # names
    for op in module.body.operations:
        operation = op.operation
        if operation.name == "builtin.module":
            return  # a nested symbol table: symbol-dce would look inside it too
        if "sym_name" not in operation.attributes:
            continue
        name = ir.StringAttr(operation.attributes["sym_name"]).value
        if (_VISIBILITY in operation.attributes
                and ir.StringAttr(operation.attributes[_VISIBILITY]).value == "private"):
            private.add(name)
        if is_declaration(operation) and (name.startswith("mlirAsyncRunti")
                            or (keep is not None and not keep(name))):
            candidates.add(name)
    if not candidates:
        return
    with module.context:
        _set_visibility(module, private - candidates, None)  # kept, whatever refers to them
        _set_visibility(module, candidates, "private")
        try:  # the op objects are invalidated: _set_visibility finds them anew
            PassManager.parse("builtin.module(symbol-dce)").run(module.operation)
        finally:
            _set_visibility(module, candidates - private, None)
            _set_visibility(module, private, "private")


def is_declaration(op: Any) -> bool:
    """Whether ``op`` (of a module lowered to the LLVM dialect) is a function without a
    body: an external declaration."""
    operation = op.operation
    return operation.name == "llvm.func" and len(operation.regions[0].blocks) == 0


def _set_visibility(module: Any, names: set[str], visibility: str | None) -> None:
    """Give the top-level symbols of ``module`` named in ``names`` that visibility
    (``None``: public, no attribute)."""
    from mlir import ir

    for op in module.body.operations:
        attributes = op.operation.attributes
        if "sym_name" not in attributes or ir.StringAttr(attributes["sym_name"]).value not in names:
            continue
        if visibility is not None:
            attributes[_VISIBILITY] = ir.StringAttr.get(visibility)
        elif _VISIBILITY in attributes:
            del attributes[_VISIBILITY]
