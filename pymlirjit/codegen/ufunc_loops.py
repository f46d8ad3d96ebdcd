"""numpy's inner loops, written in MLIR beside the function they call (see :mod:`.ufunc`).

A loop has numpy's C signature, ``void loop(char **args, npy_intp const *dimensions,
npy_intp const *steps, void *data)``, as a ``func.func`` over ``!llvm.ptr``: pointer
arithmetic in the LLVM dialect, an ``scf.for`` over the elements, a ``func.call`` of the
user's function that LLVM inlines. Element ``k`` of operand ``j`` is at byte
``args[j] + k * steps[j]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..boundary.signature import Signature
from ..boundary.types import MemRefType, ScalarType

__all__ = ["Operand", "gufunc_loop", "ufunc_loop"]


@dataclass(frozen=True)
class Operand:
    """One argument of the ufunc: its element type, its role (``input``, ``output``
    written through a memref parameter, or ``result`` of the function), and for a
    memref parameter its type and core dimension names."""

    scalar: ScalarType
    role: str
    memref: MemRefType | None = None
    dims: list[str] = field(default_factory=list)

    @property
    def itemsize(self) -> int:
        return int(self.scalar.dtype.itemsize)


def _load(t: ScalarType, ptr: str, out: str) -> list[str]:
    """Read a ``t`` at ``ptr`` into ``%out``, as numpy stores it."""
    if t.crossing == "pair":
        part = "f32" if t.bits == 64 else "f64"
        return [f"%{out}_re = llvm.load {ptr} : !llvm.ptr -> {part}",
                f"%{out}_p = llvm.getelementptr inbounds {ptr}[1] : (!llvm.ptr) -> !llvm.ptr, "
                f"{part}",
                f"%{out}_im = llvm.load %{out}_p : !llvm.ptr -> {part}",
                f"%{out} = complex.create %{out}_re, %{out}_im : {t.mlir}"]
    if t.crossing == "widened":  # numpy's bool is a byte
        return [f"%{out}_b = llvm.load {ptr} : !llvm.ptr -> i8",
                f"%{out}_z = arith.constant 0 : i8",
                f"%{out} = arith.cmpi ne, %{out}_b, %{out}_z : i8"]
    if t.crossing == "bits":
        return [f"%{out}_b = llvm.load {ptr} : !llvm.ptr -> i{t.bits}",
                f"%{out} = arith.bitcast %{out}_b : i{t.bits} to {t.mlir}"]
    if t.mlir == "index":
        return [f"%{out}_b = llvm.load {ptr} : !llvm.ptr -> i64",
                f"%{out} = arith.index_cast %{out}_b : i64 to index"]
    return [f"%{out} = llvm.load {ptr} : !llvm.ptr -> {t.mlir}"]


def _store(t: ScalarType, value: str, ptr: str, tag: str) -> list[str]:
    """Write the ``t`` ``value`` at ``ptr``, as numpy stores it."""
    if t.crossing == "pair":
        part = "f32" if t.bits == 64 else "f64"
        return [f"%{tag}_re = complex.re {value} : {t.mlir}",
                f"%{tag}_im = complex.im {value} : {t.mlir}",
                f"llvm.store %{tag}_re, {ptr} : {part}, !llvm.ptr",
                f"%{tag}_p = llvm.getelementptr inbounds {ptr}[1] : (!llvm.ptr) -> !llvm.ptr, "
                f"{part}",
                f"llvm.store %{tag}_im, %{tag}_p : {part}, !llvm.ptr"]
    if t.crossing == "widened":
        return [f"%{tag}_b = arith.extui {value} : i1 to i8",
                f"llvm.store %{tag}_b, {ptr} : i8, !llvm.ptr"]
    if t.crossing == "bits":
        return [f"%{tag}_b = arith.bitcast {value} : {t.mlir} to i{t.bits}",
                f"llvm.store %{tag}_b, {ptr} : i{t.bits}, !llvm.ptr"]
    if t.mlir == "index":
        return [f"%{tag}_b = arith.index_cast {value} : index to i64",
                f"llvm.store %{tag}_b, {ptr} : i64, !llvm.ptr"]
    return [f"llvm.store {value}, {ptr} : {t.mlir}, !llvm.ptr"]


def _header(loop: str) -> list[str]:
    return [f"func.func @{loop}(%args: !llvm.ptr, %dims: !llvm.ptr, %steps: !llvm.ptr, "
            f"%data: !llvm.ptr) {{",
            "%n64 = llvm.load %dims : !llvm.ptr -> i64",
            "%n = arith.index_cast %n64 : i64 to index",
            "%c0 = arith.constant 0 : index",
            "%c1 = arith.constant 1 : index"]


def _read(array: str, index: int, out: str, t: str) -> list[str]:
    """``%out = array[index]`` for an array of ``t`` (``!llvm.ptr`` or ``i64``)."""
    return [f"%{out}_at = llvm.getelementptr inbounds %{array}[{index}] : (!llvm.ptr) -> "
            f"!llvm.ptr, {t}",
            f"%{out} = llvm.load %{out}_at : !llvm.ptr -> {t}"]


def _call(function: str, signature: Signature, args: list[str], tag: str) -> list[str]:
    params = ", ".join(t.mlir for t in signature.param_types)
    results = ", ".join(t.mlir for t in signature.results)
    head = f"%{tag}:{len(signature.results)} = " if signature.results else ""
    return [f"{head}func.call @{function}({', '.join(args)}) : ({params}) -> ({results})"]


def ufunc_loop(loop: str, function: str, signature: Signature,
               operands: list[Operand]) -> str:
    """The loop of an elementwise ufunc: the inputs are the function's parameters, the
    outputs its results. Contiguous operands (every step its itemsize) take a path of
    their own, where the strides are constants: LLVM vectorizes it."""
    lines = _header(loop)
    lines.append("%all0 = arith.constant true")
    for k, o in enumerate(operands):
        lines += _read("args", k, f"p{k}", "!llvm.ptr") + _read("steps", k, f"s{k}", "i64")
        lines += [f"%z{k} = arith.constant {o.itemsize} : i64",
                  f"%e{k} = arith.cmpi eq, %s{k}, %z{k} : i64",
                  f"%all{k + 1} = arith.andi %all{k}, %e{k} : i1"]
    lines.append(f"scf.if %all{len(operands)} {{")
    lines += _elementwise(function, signature, operands, "f", "z")
    lines.append("} else {")
    lines += _elementwise(function, signature, operands, "g", "s")
    lines += ["}", "return", "}"]
    return "\n".join(lines) + "\n"


def _elementwise(function: str, signature: Signature, operands: list[Operand], tag: str,
                 stride: str) -> list[str]:
    lines = [f"scf.for %{tag}i = %c0 to %n step %c1 {{",
             f"%{tag}j = arith.index_cast %{tag}i : index to i64"]
    args, out = [], 0
    for k, o in enumerate(operands):
        lines += [f"%{tag}o{k} = arith.muli %{tag}j, %{stride}{k} overflow<nsw> : i64",
                  f"%{tag}q{k} = llvm.getelementptr inbounds %p{k}[%{tag}o{k}] : "
                  f"(!llvm.ptr, i64) -> !llvm.ptr, i8"]
        if o.role == "input":
            lines += _load(o.scalar, f"%{tag}q{k}", f"{tag}x{k}")
            args.append(f"%{tag}x{k}")
    lines += _call(function, signature, args, f"{tag}r")
    for k, o in enumerate(operands):
        if o.role == "result":
            lines += _store(o.scalar, f"%{tag}r#{out}", f"%{tag}q{k}", f"{tag}w{k}")
            out += 1
    lines.append("}")
    return lines


def gufunc_loop(loop: str, function: str, signature: Signature, operands: list[Operand],
                layout: tuple[list[list[str]], list[list[str]]]) -> str:
    """The loop of a generalized ufunc: ``dimensions`` holds the outer count then the
    size of each core dimension (in order of first appearance in ``layout``); ``steps``
    the outer step of each operand, then the core strides of each, in bytes. Each memref
    parameter receives a descriptor over its operand's core dimensions. An operand that
    does not fit its memref type (strides, static sizes) makes the loop set a
    ``ValueError`` (``data``: see :func:`pymlirjit.ufunc._error_block`) and stop."""
    names = list(dict.fromkeys(d for o in operands for d in o.dims))
    lines = _header(loop)
    for j, name in enumerate(names):
        lines += _read("dims", j + 1, f"d_{name}", "i64")
    core = len(operands)
    lines.append("%ok0 = arith.constant true")
    for k, o in enumerate(operands):
        lines += _read("args", k, f"p{k}", "!llvm.ptr") + _read("steps", k, f"s{k}", "i64")
        if o.memref is None:
            lines.append(f"%ok{k + 1} = arith.andi %ok{k}, %ok0 : i1")
            continue
        lines += [f"%z{k} = arith.constant {o.itemsize} : i64",
                  f"%zero{k} = arith.constant 0 : i64",
                  f"%good{k}_0 = arith.constant true"]
        lines += _free_strides(o, k)
        checks = 0
        for r, name in enumerate(o.dims):
            lines += _read("steps", core, f"cs{k}_{r}", "i64")
            core += 1
            lines += [f"%rem{k}_{r} = arith.remsi %cs{k}_{r}, %z{k} : i64",
                      f"%al{k}_{r}a = arith.cmpi eq, %rem{k}_{r}, %zero{k} : i64",
                      f"%al{k}_{r} = arith.ori %al{k}_{r}a, %free{k}_{r} : i1",
                      f"%es{k}_{r} = arith.divsi %cs{k}_{r}, %z{k} : i64"]
            lines += _and(f"good{k}", checks, f"%al{k}_{r}")
            checks += 1
            size = o.memref.shape[r]
            if size is not None:
                lines += [f"%sz{k}_{r} = arith.constant {size} : i64",
                          f"%sq{k}_{r} = arith.cmpi eq, %d_{name}, %sz{k}_{r} : i64"]
                lines += _and(f"good{k}", checks, f"%sq{k}_{r}")
                checks += 1
        lines += _layout_checks(o, k, checks)
        lines.append(f"%ok{k + 1} = arith.andi %ok{k}, %good{k}_last : i1")
    lines.append(f"scf.if %ok{len(operands)} {{")
    lines.append("scf.for %i = %c0 to %n step %c1 {")
    lines.append("%j = arith.index_cast %i : index to i64")
    args, out = [], 0
    for k, o in enumerate(operands):
        lines += [f"%o{k} = arith.muli %j, %s{k} overflow<nsw> : i64",
                  f"%q{k} = llvm.getelementptr inbounds %p{k}[%o{k}] : "
                  f"(!llvm.ptr, i64) -> !llvm.ptr, i8"]
        if o.memref is not None:
            lines += _descriptor(o, k)
            args.append(f"%m{k}")
        elif o.role == "input":
            lines += _load(o.scalar, f"%q{k}", f"x{k}")
            args.append(f"%x{k}")
    lines += _call(function, signature, args, "r")
    for k, o in enumerate(operands):
        if o.role == "result":
            lines += _store(o.scalar, f"%r#{out}", f"%q{k}", f"w{k}")
            out += 1
    lines += ["}", "} else {"]
    # Report the first operand that does not fit: the messages are set last to first.
    for k in reversed(range(len(operands))):
        if operands[k].memref is not None:
            lines += [f"%bad{k} = arith.xori %good{k}_last, %ok0 : i1", f"scf.if %bad{k} {{"]
            lines += _raise(k)
            lines.append("}")
    lines += ["}", "return", "}"]
    return "\n".join(lines) + "\n"


def _and(name: str, index: int, condition: str) -> list[str]:
    return [f"%{name}_{index + 1} = arith.andi %{name}_{index}, {condition} : i1"]


def _free_strides(o: Operand, k: int) -> list[str]:
    """``%free{k}_{r}``: whether the stride of core dimension ``r`` of operand ``k``
    carries no information (the dimension has 0 or 1 elements, or the operand none):
    such a stride is never checked."""
    assert o.memref is not None
    lines = [f"%empty{k}_0 = arith.constant false", f"%unit{k} = arith.constant 1 : i64"]
    for r, name in enumerate(o.dims):
        lines += [f"%nil{k}_{r} = arith.cmpi eq, %d_{name}, %zero{k} : i64",
                  f"%empty{k}_{r + 1} = arith.ori %empty{k}_{r}, %nil{k}_{r} : i1"]
    for r, name in enumerate(o.dims):
        lines += [f"%tiny{k}_{r} = arith.cmpi sle, %d_{name}, %unit{k} : i64",
                  f"%free{k}_{r} = arith.ori %tiny{k}_{r}, %empty{k}_{len(o.dims)} : i1"]
    return lines


def _layout_checks(o: Operand, k: int, checks: int) -> list[str]:
    """The element strides a memref parameter's layout requires: contiguous for the
    identity layout, the declared ones for a strided layout with static strides."""
    assert o.memref is not None
    lines = []
    rank = o.memref.rank
    if o.memref.strides is None:
        expected = [f"%one{k}"]
        lines.append(f"%one{k} = arith.constant 1 : i64")
        # Row-major: each stride is the product of the sizes after it (a dimension of
        # size 1 may have any stride).
        for r in reversed(range(rank)):
            lines += [f"%ct{k}_{r} = arith.cmpi eq, %es{k}_{r}, {expected[-1]} : i64",
                      f"%y{k}_{r} = arith.ori %ct{k}_{r}, %free{k}_{r} : i1",
                      f"%next{k}_{r} = arith.muli {expected[-1]}, %d_{o.dims[r]} : i64"]
            expected.append(f"%next{k}_{r}")
            lines += _and(f"good{k}", checks, f"%y{k}_{r}")
            checks += 1
    else:
        for r, stride in enumerate(o.memref.strides):
            if stride is not None:
                lines += [f"%st{k}_{r} = arith.constant {stride} : i64",
                          f"%ct{k}_{r}a = arith.cmpi eq, %es{k}_{r}, %st{k}_{r} : i64",
                          f"%ct{k}_{r} = arith.ori %ct{k}_{r}a, %free{k}_{r} : i1"]
                lines += _and(f"good{k}", checks, f"%ct{k}_{r}")
                checks += 1
    lines.append(f"%good{k}_last = arith.andi %good{k}_{checks}, %good{k}_0 : i1")
    return lines


def _descriptor(o: Operand, k: int) -> list[str]:
    """``%m{k}``: the memref over operand ``k``'s core dimensions at ``%q{k}``."""
    assert o.memref is not None
    rank = o.memref.rank
    arrays = f", !llvm.array<{rank} x i64>, !llvm.array<{rank} x i64>" if rank else ""
    struct = f"!llvm.struct<(ptr, ptr, i64{arrays})>"
    lines = [f"%v{k}_0 = llvm.mlir.undef : {struct}",
             f"%v{k}_1 = llvm.insertvalue %q{k}, %v{k}_0[0] : {struct}",
             f"%v{k}_2 = llvm.insertvalue %q{k}, %v{k}_1[1] : {struct}",
             f"%v{k}_3 = llvm.insertvalue %zero{k}, %v{k}_2[2] : {struct}"]
    last = 3
    for r, name in enumerate(o.dims):
        stride = f"%es{k}_{r}"
        declared = o.memref.strides[r] if o.memref.strides is not None else None
        if declared is not None:  # a free dimension's stride is what the layout says
            lines += [f"%ds{k}_{r} = arith.select %free{k}_{r}, %st{k}_{r}, %es{k}_{r} : i64"]
            stride = f"%ds{k}_{r}"
        lines += [f"%v{k}_{last + 1} = llvm.insertvalue %d_{name}, %v{k}_{last}[3, {r}] : "
                  f"{struct}",
                  f"%v{k}_{last + 2} = llvm.insertvalue {stride}, %v{k}_{last + 1}[4, {r}] : "
                  f"{struct}"]
        last += 2
    lines.append(f"%m{k} = builtin.unrealized_conversion_cast %v{k}_{last} : {struct} to "
                 f"{o.memref.mlir}")
    return lines


def _raise(k: int) -> list[str]:
    """Set ``ValueError(message k)`` with the GIL taken back: ``data`` holds
    PyGILState_Ensure, PyErr_SetString, PyGILState_Release, the type, the messages."""
    return (_read("data", 0, f"ensure{k}", "!llvm.ptr") + _read("data", 1, f"set{k}", "!llvm.ptr")
            + _read("data", 2, f"release{k}", "!llvm.ptr") + _read("data", 3, f"type{k}",
                                                                   "!llvm.ptr")
            + _read("data", 4 + k, f"text{k}", "!llvm.ptr")
            + [f"%gil{k} = llvm.call %ensure{k}() : !llvm.ptr, () -> i32",
               f"llvm.call %set{k}(%type{k}, %text{k}) : !llvm.ptr, (!llvm.ptr, !llvm.ptr) -> ()",
               f"llvm.call %release{k}(%gil{k}) : !llvm.ptr, (i32) -> ()"])
