"""Checked mode: runtime failures in compiled code become Python exceptions, never crashes.

:func:`insert_checks` rewrites a module in the middle of lowering (after bufferization,
before ``convert-scf-to-cf``, where memref accesses and ``scf.if`` both exist):

- integer division and remainder (``arith.divsi``, ``remui``, ``ceildivsi``, ...; scalars
  and vectors) get a divisor that cannot trap (``1`` where it is ``0``, and for signed ops
  where the dividend is the minimum and the divisor ``-1``, whose quotient then wraps as
  in C compilers' ``-fwrapv``) and, where it was ``0``, record a ``ZeroDivisionError``
  (with ``error_model="numpy"``, numba's other model and numpy's own: the result is ``0``
  where the divisor is, and the CPU's divide-by-zero or overflow flag is raised, which
  numpy reports after a ufunc loop as ``np.errstate`` says; no Python is called);
- ``cf.assert`` records an ``AssertionError`` with its message instead of aborting;
- with ``boundscheck``, ``memref.load``/``store`` and ``vector.load``/``store`` outside
  their view record an ``IndexError`` and are skipped (a load yields zero), as are the
  accesses after an invalid ``memref.subview`` in the same function. A module with a
  ``cf.assert`` (MLIR's runtime verification makes them too) gets these checks as well: a
  call that cannot unwind (see :func:`pymlirjit.runtime.module.call_policy`) runs on after a failed
  assert, and must not then touch memory outside its arrays.

Recording a failure is a call to the built-in callback :data:`FAIL_SYMBOL`, which raises
the exception (:func:`pymlirjit.boundary.failures.raise_failure`): the call machinery of callbacks
then ends the kernel call (at once where it unwinds, else at its end with later failures
ignored) and raises it. Messages are constants in the compiled code (name, source location), so a
module loaded from the disk cache in another process raises the same ones.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..boundary.abi import defined_function_symbol
from ..boundary.failures import ASSERTION, FAIL_SYMBOL, INDEX, SEPARATOR, ZERO_DIVISION

__all__ = ["ERROR_MODELS", "insert_checks"]

#: ``<fenv.h>``'s FE_DIVBYZERO and FE_OVERFLOW, by machine (glibc's values).
_FP_FLAGS = {"x86_64": (0x04, 0x08), "AMD64": (0x04, 0x08), "aarch64": (0x02, 0x04),
             "arm64": (0x02, 0x04)}
#: The error models (numba's names): raise ZeroDivisionError, or behave as numpy does.
ERROR_MODELS = ("python", "numpy")

#: Integer divisions and remainders, and whether they are signed.
_DIVISIONS = {"arith.divsi": True, "arith.remsi": True, "arith.ceildivsi": True,
              "arith.floordivsi": True, "arith.divui": False, "arith.remui": False,
              "arith.ceildivui": False}
#: Accesses checked with ``boundscheck``: memref operand and first index operand.
_ACCESSES = {"memref.load": (0, 1), "memref.store": (1, 2), "vector.load": (0, 1),
             "vector.store": (1, 2)}

#: Bytes spelled as themselves in an MLIR string (others as ``\\XX``: one byte each).
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;()@_-[]")
_INLINE_LOCATION = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')


@dataclass
class _Rewriter:
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

        function = _function(op)
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

    def division(self, op: Any, signed: bool) -> None:
        from mlir import ir
        from mlir.dialects import arith

        dividend, divisor = op.operands[0], op.operands[1]
        type_ = divisor.type
        element = type_.element_type if isinstance(type_, ir.VectorType) else type_
        if (isinstance(type_, ir.VectorType) and type_.scalable) or not isinstance(
                element, (ir.IntegerType, ir.IndexType)):
            return  # a scalable vector or a tensor (a pipeline without bufferization)
        width = 64 if isinstance(element, ir.IndexType) else ir.IntegerType(element).width
        known = _constant(divisor)
        if known is not None and known != 0 and not (signed and known in (-1, (1 << width) - 1)):
            return  # cannot trap (x / 2, the common case): nothing to check
        block = op.operation.block
        # A quotient and a remainder of the same operands (x / y, x % y) share their
        # safe divisor, so that LLVM still computes both with one division; only the
        # first division by a value in a block records the failure (the first one wins).
        key = (block, dividend, divisor, signed)
        known_safe = self.safe_divisors.get(key)
        if known_safe is not None:
            op.operands[1], zero = known_safe
            self.zero_where_zero(op, zero)
            return
        with ir.InsertionPoint(op), op.location:
            zero = arith.CmpIOp(arith.CmpIPredicate.eq, divisor, self.constant(0, type_)).result
            bad, overflow = zero, None
            if signed and width > 1:
                minimum = self.constant(-(1 << (width - 1)), type_)
                overflow = arith.AndIOp(
                    arith.CmpIOp(arith.CmpIPredicate.eq, dividend, minimum).result,
                    arith.CmpIOp(arith.CmpIPredicate.eq, divisor,
                                 self.constant(-1, type_)).result).result
                bad = arith.OrIOp(zero, overflow).result
            safe = arith.SelectOp(bad, self.constant(1, type_), divisor).result
            op.operands[1] = safe
            self.safe_divisors[key] = (safe, zero)
            self.zero_where_zero(op, zero)
            if (block, divisor) in self.checked_divisors:
                return
            self.checked_divisors.add((block, divisor))
            if self.numpy_errors:
                divide_by_zero, overflowed = _FP_FLAGS.get(platform.machine(), (0, 0))
                self.if_failed(self.any(zero), lambda: self.raise_fp_flag(divide_by_zero))
                if overflow is not None:
                    self.if_failed(self.any(overflow),
                                   lambda: self.raise_fp_flag(overflowed))
                return
            self.if_failed(self.any(zero),
                           lambda: self.fail(ZERO_DIVISION, f"integer division or modulo "
                                             f"by zero in {self.where(op)}"))

    def zero_where_zero(self, op: Any, zero: Any) -> None:
        """With numpy's error model: ``op``'s result is 0 where the divisor was 0."""
        from mlir import ir
        from mlir.dialects import arith

        if not self.numpy_errors:
            return
        result = op.result
        with ir.InsertionPoint.after(op), op.location:
            fixed = arith.SelectOp(zero, self.constant(0, result.type), result)
        result.replace_all_uses_except(fixed.result, fixed.operation)

    def raise_fp_flag(self, flag: int) -> None:
        """Raise the CPU's floating-point exception ``flag`` (``feraiseexcept``), which
        numpy reads after a ufunc loop; nothing where the machine's flags are unknown."""
        from mlir import ir
        from mlir.dialects import func

        if flag:
            i32 = ir.IntegerType.get_signless(32)
            func.CallOp([i32], ir.FlatSymbolRefAttr.get("feraiseexcept"),
                        [self.constant(flag, i32)])
            self.raises_fp_flags = True

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

    def assertion(self, op: Any) -> None:
        from mlir import ir
        from mlir.dialects import arith

        text = ir.StringAttr(op.attributes["msg"]).value
        verification = text.startswith("ERROR: Runtime op verification failed")
        with ir.InsertionPoint(op), op.location:
            failed = arith.XOrIOp(op.operands[0],
                                  self.constant(1, ir.IntegerType.get_signless(1))).result
            where = self.where(op)
            if verification:  # MLIR's: "ERROR: ...\n<op>\n^ <reason>\nLocation: ..."
                reason = next((line[2:] for line in text.splitlines()
                               if line.startswith("^ ")), "invalid operation")
                message = f"runtime op verification failed in {where}: {reason}"
            else:
                message = f"{text}, in {where}" if text else f"assertion failed in {where}"
            self.if_failed(failed, lambda: self.fail(
                INDEX if verification else ASSERTION, message))
        op.erase()


    def dim(self, memref_value: Any, d: int) -> Any:
        from mlir import ir
        from mlir.dialects import memref

        size = ir.MemRefType(memref_value.type).shape[d]
        if size != ir.ShapedType.get_dynamic_size():
            return self.index(size)
        return memref.DimOp(memref_value, self.index(d)).result

    def flag(self, function: Any) -> Any:
        """A per-call i8 flag of ``function``, set once a view it made was invalid."""
        from mlir import ir
        from mlir.dialects import memref

        block = function.regions[0].blocks[0]
        i8 = ir.IntegerType.get_signless(8)
        first = block.operations[0]
        with ir.InsertionPoint(first), function.location:
            flag = memref.AllocaOp(ir.MemRefType.get([], i8), [], []).result
            memref.StoreOp(self.constant(0, i8), flag, [])
        return flag

    def not_flagged(self, flag: Any) -> Any:
        from mlir import ir
        from mlir.dialects import arith, memref

        i8 = ir.IntegerType.get_signless(8)
        return arith.CmpIOp(arith.CmpIPredicate.eq, memref.LoadOp(flag, []).result,
                            self.constant(0, i8)).result

    def subview(self, op: Any, flag: Any) -> None:
        """Check each dimension of ``op``'s view lies in its source (where not empty)."""
        from mlir import ir
        from mlir.dialects import arith, memref

        source = op.operands[0]
        dynamic = ir.ShapedType.get_dynamic_size()  # MLIR 22: one sentinel for all
        attributes = op.attributes
        operands = iter(op.operands[1:])

        def mixed(name: str) -> list[Any]:
            return [next(operands) if value == dynamic else self.index(value)
                    for value in ir.DenseI64ArrayAttr(attributes[name])]

        with ir.InsertionPoint(op), op.location:
            offsets, sizes, strides = (mixed("static_offsets"), mixed("static_sizes"),
                                       mixed("static_strides"))
            checks = []
            for d, (offset, size, stride) in enumerate(zip(offsets, sizes, strides)):
                extent = self.dim(source, d)
                last = arith.AddIOp(offset, arith.MulIOp(
                    arith.SubIOp(size, self.index(1)).result, stride).result).result
                inside = arith.AndIOp(
                    arith.CmpIOp(arith.CmpIPredicate.ult, offset, extent).result,
                    arith.CmpIOp(arith.CmpIPredicate.ult, last, extent).result).result
                empty = arith.CmpIOp(arith.CmpIPredicate.eq, size, self.index(0)).result
                checks.append((d, arith.OrIOp(empty, inside).result, last, extent))
            ok = _all_of([check[1] for check in checks])
            if ok is None:
                return
            where = self.where(op)
            bad = arith.XOrIOp(ok, self.constant(1, ir.IntegerType.get_signless(1))).result

            def then() -> None:
                self.fail_at(checks, f"invalid memref.subview in {where}: {{detail}}")
                if flag is not None:
                    memref.StoreOp(self.constant(1, ir.IntegerType.get_signless(8)), flag, [])

            self.if_failed(bad, then)

    def fail_at(self, checks: list[tuple[int, Any, Any, Any]], text: str) -> None:
        """Record an IndexError naming the first dimension whose check failed."""
        from mlir.dialects import arith

        d, _, index, extent = checks[-1]
        dim = self.index(d)
        for d_, ok, index_, extent_ in reversed(checks[:-1]):
            dim = arith.SelectOp(ok, dim, self.index(d_)).result
            index = arith.SelectOp(ok, index, index_).result
            extent = arith.SelectOp(ok, extent, extent_).result
        self.fail(INDEX, text, dim, index, extent)

    def access(self, op: Any, flag: Any) -> None:
        """Run ``op`` (a load or store) only where its indices lie in its memref (and no
        view of its function was invalid); else record an IndexError (a load yields 0)."""
        from mlir import ir
        from mlir.dialects import arith, scf

        memref_at, first = _ACCESSES[op.name]
        source = op.operands[memref_at]
        memref_type = ir.MemRefType(source.type)
        indices = list(op.operands[first:first + memref_type.rank])
        # vector.load/store of a memref of scalars: the trailing dims hold whole vectors.
        lanes: list[int] = []
        if op.name.startswith("vector.") and not isinstance(memref_type.element_type,
                                                              ir.VectorType):
            value = op.results[0] if op.name == "vector.load" else op.operands[0]
            lanes = list(ir.VectorType(value.type).shape)
        with ir.InsertionPoint(op), op.location:
            checks = []
            for d, index in enumerate(indices):
                extent = self.dim(source, d)
                inside = arith.CmpIOp(arith.CmpIPredicate.ult, index, extent).result
                lane = d - (len(indices) - len(lanes))
                if lane >= 0 and lanes[lane] > 1:  # index + lanes <= extent
                    room = arith.SubIOp(extent, index).result
                    inside = arith.AndIOp(inside, arith.CmpIOp(
                        arith.CmpIPredicate.uge, room, self.index(lanes[lane])).result).result
                checks.append((d, inside, index, extent))
            ok = _all_of([check[1] for check in checks])
            if flag is not None:
                clear = self.not_flagged(flag)
                ok = clear if ok is None else arith.AndIOp(ok, clear).result
            if ok is None:
                return
            text = f"{op.name} in {self.where(op)}: {{detail}}"
            results = [r.type for r in op.results]
            branch = scf.IfOp(ok, results, has_else=True)
            for old, new in zip(op.results, branch.results):
                old.replace_all_uses_with(new)
            with ir.InsertionPoint(branch.then_block):
                done = scf.YieldOp(list(op.results))
            op.move_before(done)
            with ir.InsertionPoint(branch.else_block):
                if checks:
                    self.fail_at(checks, text)
                scf.YieldOp([self.constant(0, t) for t in results])


def _all_of(conditions: list[Any]) -> Any:
    """The i1 ``and`` of ``conditions`` (None if there are none)."""
    from mlir.dialects import arith

    result = conditions[0] if conditions else None
    for condition in conditions[1:]:
        result = arith.AndIOp(result, condition).result
    return result


def _function(op: Any) -> Any:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return parent


def _constant(value: Any) -> int | None:
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
        return ir.IntegerAttr.get(type_, value)
    if isinstance(type_, ir.FloatType):
        return ir.FloatAttr.get(type_, float(value))
    return None


def insert_checks(module: Any, *, boundscheck: bool, filename: str = "<source>",
                  source: str = "", error_model: str = "python") -> int:
    """Add the checks of checked mode to ``module`` (see the module's docstring), which
    must still hold ``scf`` and ``memref`` ops; returns how many failure calls it added
    (0: the module needs no failure callback, and none is declared). ``source`` is the
    :func:`~pymlirjit.boundary.failures.source_id` of the module's text (for
    :func:`~pymlirjit.boundary.failures.register_source`); ``error_model`` one of
    :data:`ERROR_MODELS`."""
    from mlir import ir

    rewriter = _Rewriter(module, filename, source, numpy_errors=error_model == "numpy")
    divisions: list[tuple[Any, bool]] = []
    assertions: list[Any] = []
    accesses: list[Any] = []
    views: list[Any] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name in _DIVISIONS:
            divisions.append((op, _DIVISIONS[name]))
        elif name == "cf.assert":
            assertions.append(op)
        elif name in _ACCESSES:
            accesses.append(op)
        elif name == "memref.subview":
            views.append(op)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown():
        module.operation.walk(visit)
        for op, signed in divisions:
            rewriter.division(op, signed)
        for op in assertions:
            rewriter.assertion(op)
        if not (boundscheck or assertions):
            accesses, views = [], []
        flags: dict[str, Any] = {}  # function -> its flag, where it makes views
        for op in views:
            function = _function(op)
            name = rewriter.function_of(op)
            if function is not None and name not in flags:
                flags[name] = rewriter.flag(function)
            rewriter.subview(op, flags.get(name))
        for op in accesses:
            rewriter.access(op, flags.get(rewriter.function_of(op)))
        if rewriter.inserted:
            _declare_fail(module)
        if rewriter.raises_fp_flags and "feraiseexcept" not in ir.SymbolTable(module.operation):
            module.body.append(ir.Operation.parse(
                "func.func private @feraiseexcept(i32) -> i32"))
    return rewriter.inserted


def _declare_fail(module: Any) -> None:
    from mlir import ir

    declaration = ir.Operation.parse(
        f"func.func private @{FAIL_SYMBOL}(i32, i64, i64, i64, i64) "
        f"attributes {{llvm.emit_c_interface}}")
    module.body.append(declaration)
