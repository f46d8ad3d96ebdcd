"""What every check of checked mode writes (:mod:`pymlirjit.codegen.checks`): constants,
the message of a failure and the call recording it, an ``scf.if`` around it, and where
an op sits (its function and source location), for the messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..boundary.abi import defined_function_symbol
from ..boundary.failures import FAIL_SYMBOL, SEPARATOR

__all__ = ["CheckWriter", "all_of", "constant_value", "declare_fail", "function_containing"]

#: Bytes spelled as themselves in an MLIR string (others as ``\\XX``: one byte each).
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;()@_-[]")
_INLINE_LOCATION = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')


@dataclass
class CheckWriter:
    """Writes the checks into ``module`` (``inserted``: how many failure calls so far);
    the division checks keep their state here too."""

    module: Any
    filename: str
    source: str
    numpy_errors: bool = False
    inserted: int = 0
    messages: int = 0
    safe_divisors: dict[tuple[Any, ...], tuple[Any, Any]] = field(default_factory=dict)
    raises_fp_flags: bool = False
    checked_divisors: set[tuple[Any, Any]] = field(default_factory=set)

    def constant(self, value: int, type_: Any) -> Any:
        """``value`` as a constant of ``type_`` (an integer, index or float type, or a
        vector of one); a poison value of other types (a zero where a load is skipped)."""
        from mlir import ir
        from mlir.dialects import arith

        vector = isinstance(type_, ir.VectorType)
        element = type_.element_type if vector else type_
        attr = _scalar_attribute(element, value)
        if attr is None or (vector and type_.scalable):
            return ir.Operation.create("ub.poison", results=[type_], attributes={
                "value": ir.Attribute.parse("#ub.poison")}).result
        if vector:
            attr = ir.DenseElementsAttr.get_splat(type_, attr)
        return arith.ConstantOp(type_, attr).result

    def index(self, value: int) -> Any:
        from mlir import ir

        return self.constant(value, ir.IndexType.get())

    def where(self, op: Any) -> str:
        """Where ``op`` sits, for a message: its function and source location."""
        text = str(op.location)
        match = _INLINE_LOCATION.match(text)
        if match is None:
            return self.function_of(op)
        filename = self.filename if match["file"] in ("-", "<source>") else match["file"]
        place = (f"MLIR line {match['line']}" if filename == "<source>"
                 else f"{filename}:{match['line']}")
        return f"{self.function_of(op)} ({place})"

    @staticmethod
    def function_of(op: Any) -> str:
        from mlir import ir

        function = function_containing(op)
        if function is None:
            return "compiled code"
        name: str = ir.StringAttr(function.attributes["sym_name"]).value
        return "@" + name.removeprefix(defined_function_symbol(""))  # the name given

    def message(self, text: str) -> Any:
        """An i64 holding the address of a module constant holding ``text``."""
        from mlir import ir

        self.messages += 1
        name = f"{FAIL_SYMBOL}_message_{self.messages}"
        data = f"{self.source}{SEPARATOR}{text}".encode() + b"\0"
        escaped = "".join(chr(b) if b in _PLAIN else f"\\{b:02X}" for b in data)
        global_ = ir.Operation.parse(
            f'llvm.mlir.global internal constant @{name}("{escaped}") '
            f'{{addr_space = 0 : i32}} : !llvm.array<{len(data)} x i8>')
        self.module.body.append(global_)
        ptr = ir.Type.parse("!llvm.ptr")
        address = ir.Operation.create(
            "llvm.mlir.addressof", results=[ptr],
            attributes={"global_name": ir.FlatSymbolRefAttr.get(name)}).result
        return ir.Operation.create("llvm.ptrtoint", results=[ir.IntegerType.get_signless(64)],
                                   operands=[address]).result

    def fail(self, kind: int, text: str, dim: Any = None, index: Any = None,
             size: Any = None) -> None:
        """Call the failure callback here (an insertion point and location are set)."""
        from mlir import ir
        from mlir.dialects import arith, func

        i64 = ir.IntegerType.get_signless(64)

        args = [self.constant(kind, ir.IntegerType.get_signless(32)), self.message(text),
                *(self.constant(0, i64) if value is None else arith.IndexCastOp(i64, value).result
                  for value in (dim, index, size))]
        func.CallOp([], ir.FlatSymbolRefAttr.get(FAIL_SYMBOL), args)
        self.inserted += 1

    def if_failed(self, failed: Any, then: Callable[[], None]) -> None:
        from mlir import ir
        from mlir.dialects import scf

        branch = scf.IfOp(failed)
        with ir.InsertionPoint(branch.then_block):
            then()
            scf.YieldOp([])

    def any(self, flags: Any) -> Any:
        """An i1: whether any lane of ``flags`` (an i1 or a vector of i1) is set."""
        from mlir import ir
        from mlir.dialects import vector

        type_ = flags.type
        if not isinstance(type_, ir.VectorType):
            return flags
        if type_.rank != 1:
            count = 1
            for dim in type_.shape:
                count *= dim
            flags = vector.ShapeCastOp(ir.VectorType.get([count], type_.element_type),
                                       flags).result
        return vector.ReductionOp(ir.IntegerType.get_signless(1), "or", flags).result


def all_of(conditions: list[Any]) -> Any:
    """The i1 ``and`` of ``conditions`` (None if there are none)."""
    from mlir.dialects import arith

    result = conditions[0] if conditions else None
    for condition in conditions[1:]:
        result = arith.AndIOp(result, condition).result
    return result


def function_containing(op: Any) -> Any:
    """The ``func.func`` holding ``op`` (None if none does)."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return parent


def constant_value(value: Any) -> int | None:
    """The integer ``value`` always holds (a constant, or a splat vector constant)."""
    from mlir import ir

    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.DenseIntElementsAttr) and attr.is_splat:
        return int(ir.IntegerAttr(attr.get_splat_value()).value)
    return None


def _scalar_attribute(type_: Any, value: int) -> Any:
    from mlir import ir

    if isinstance(type_, (ir.IntegerType, ir.IndexType)):
        if -(2**63) <= value < 2**63:
            return ir.IntegerAttr.get(type_, value)
        # The binding takes int64 values only: wider ones (i128's minimum) are parsed.
        return ir.Attribute.parse(f"{value} : {type_}")
    if isinstance(type_, ir.FloatType):
        return ir.FloatAttr.get(type_, float(value))
    return None


def declare_fail(module: Any) -> None:
    """Declare the failure callback the checks call."""
    from mlir import ir

    declaration = ir.Operation.parse(
        f"func.func private @{FAIL_SYMBOL}(i32, i64, i64, i64, i64) "
        f"attributes {{llvm.emit_c_interface}}")
    module.body.append(declaration)
