"""Matmul microkernels lowered once per process, then reused by every module that calls one.

A microkernel (:mod:`pymlirjit.codegen.microkernels`) is ~200 lines of MLIR whose lowering
took three quarters of the MLIR passes' time in a module with one ``linalg.matmul`` (~30
of ~45 ms), and it is the same function for every matmul of the same element type, layout
and options. So once the schedules have put microkernels in a module, :func:`split_off`
looks each one up, by its MLIR and the pipeline and options that lower it: one lowered
before in this process is taken out of the module, leaving its declaration; the others
stay and are lowered with the module. After the module's passes, :func:`splice` puts each
one taken out back, lowered, in place of its lowered declaration (with the declarations
it calls that the module lacks), and keeps a copy of each one lowered in the module for
the next modules. LLVM compiles the same module either way (a test compares them).

Parallel microkernels are not kept: their loops become outlined functions whose names
would clash between modules.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ..codegen.options import CompileOptions
from ..errors import MLIRError
from ..lowering.declarations import is_declaration
from ..lowering.walk import operations, top_level_symbols

__all__ = ["ENABLED", "Microkernel", "clear", "splice", "split_off"]

#: Whether microkernels are kept and reused (tests compare the modules made either way).
ENABLED = True

#: Lowered microkernels kept, the least recently used dropped first: one per element type,
#: layout and set of options in use (~15 KB of bytecode each).
_KEPT = 32

#: The name of each microkernel as kept (its module's name is put back).
_CANONICAL = "__pymlirjit_microkernel"

_PREFIX = "__pymlirjit_matmul"

#: The attributes by which a lowered function's ops refer to other symbols.
_REFERENCES = ("callee", "global_name")

_lowered: OrderedDict[Hashable, bytes] = OrderedDict()
_lock = threading.Lock()


class Microkernel:
    """A microkernel of a module being lowered: its name there, its key, and (if it was
    taken out of the module) the MLIR bytecode of a module holding it lowered, under the
    name ``_CANONICAL``, with the declarations it calls."""

    __slots__ = ("key", "lowered", "name")

    def __init__(self, name: str, key: Hashable, lowered: bytes | None) -> None:
        self.name = name
        self.key = key
        self.lowered = lowered


def clear() -> None:
    """Forget every lowered microkernel (the next modules lower theirs again)."""
    with _lock:
        _lowered.clear()


def split_off(module: Any, pipeline: str, options: CompileOptions) -> list[Microkernel]:
    """Find the microkernels of ``module`` (MLIR about to be lowered by ``pipeline`` for
    ``options``); replace each one lowered before by its declaration. Returns them all,
    for :func:`splice`. Parallel ones (``options.parallel_loops``) are left alone."""
    if not ENABLED or options.parallel_loops:
        return []
    from mlir import ir
    from mlir.dialects import func

    found = []
    for op in [op for op in module.body.operations if _is_microkernel(op)]:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        op.attributes["sym_name"] = ir.StringAttr.get(_CANONICAL, module.context)
        key = (_bytecode(op), pipeline, options)
        op.attributes["sym_name"] = ir.StringAttr.get(name, module.context)
        lowered = _found(key)
        if lowered is not None:
            with module.context, ir.InsertionPoint(op), op.location:
                func.FuncOp(name, ir.TypeAttr(op.attributes["function_type"]).value,
                            visibility="private")
            op.erase()
        found.append(Microkernel(name, key, lowered))
    return found


def splice(module: Any, microkernels: list[Microkernel]) -> None:
    """Put each of ``microkernels`` taken out of ``module`` (now lowered to the LLVM
    dialect) back in place of its declaration, with the declarations it calls that
    ``module`` lacks; keep a copy of each one lowered in ``module``."""
    from mlir import ir

    if not microkernels:
        return
    symbols = top_level_symbols(module)
    for kernel in microkernels:
        present = symbols.get(kernel.name)
        if present is None:  # nothing calls it any more: it was dropped
            continue
        if kernel.lowered is None:
            extracted = _extract(present, symbols)
            if extracted is not None:
                _keep(kernel.key, extracted)
            continue
        lowered = ir.Module.parse(kernel.lowered, module.context)
        for op in list(lowered.body.operations):
            name = ir.StringAttr(op.attributes["sym_name"]).value
            op.detach_from_parent()
            if name == _CANONICAL:
                op.attributes["sym_name"] = ir.StringAttr.get(kernel.name, module.context)
                ir.InsertionPoint(present).insert(op)
                present.erase()
                symbols[kernel.name] = op
            elif name not in symbols:
                module.body.append(op)
                symbols[name] = op
            elif _signature(symbols[name]) != _signature(op):
                raise MLIRError(f"the lowered microkernel @{kernel.name} declares @{name} "
                                f"unlike its module does")


def _extract(function: Any, symbols: dict[str, Any]) -> bytes | None:
    """A module holding a copy of the lowered ``function`` (named ``_CANONICAL``) and of
    the declarations of its module (``symbols``, by name) it calls, as bytecode; ``None``
    if it refers to anything else of its module (its code would then be the module's)."""
    from mlir import ir

    with function.context, ir.Location.unknown():
        alone = ir.Module.create()
        copy = function.operation.clone(ir.InsertionPoint(alone.body))
        copy.attributes["sym_name"] = ir.StringAttr.get(_CANONICAL)
        referred = {ir.FlatSymbolRefAttr(op.attributes[attribute]).value
                    for op in operations(copy) for attribute in _REFERENCES
                    if attribute in op.attributes}
        for name in sorted(referred):
            if name not in symbols:
                continue
            if not is_declaration(symbols[name]):
                return None
            symbols[name].operation.clone(ir.InsertionPoint(alone.body))
        return _bytecode(alone.operation)


def _signature(op: Any) -> str:
    """What must agree between two top-level symbols of one name: a function's type, or
    all of another op."""
    attributes = op.operation.attributes
    return str(attributes["function_type"]) if "function_type" in attributes else str(op)


def _is_microkernel(op: Any) -> bool:
    from mlir import ir

    attributes = op.operation.attributes
    return (op.operation.name == "func.func" and "pymlirjit.in_bounds" in attributes
            and ir.StringAttr(attributes["sym_name"]).value.startswith(_PREFIX)
            and len(op.operation.regions[0].blocks) > 0)


def _bytecode(op: Any) -> bytes:
    """``op`` as MLIR bytecode: a fifth of the time printing it takes, and parsed back in
    a third of the time its text takes (~1 ms for a lowered microkernel)."""
    written = io.BytesIO()
    op.operation.write_bytecode(written)
    return written.getvalue()


def _found(key: Hashable) -> bytes | None:
    with _lock:
        lowered = _lowered.get(key)
        if lowered is not None:
            _lowered.move_to_end(key)
        return lowered


def _keep(key: Hashable, lowered: bytes) -> None:
    with _lock:
        _lowered[key] = lowered
        while len(_lowered) > _KEPT:
            _lowered.popitem(last=False)
