"""linalg ops rewritten as calls to generated MLIR functions that the optimizer makes
fast: matmuls as microkernels whose register blocks are loop-carried vectors
(:func:`matmuls_to_microkernels`), batch matmuls and 2-D convolutions as matmuls on
views (:func:`batch_matmuls_to_matmuls`, :func:`convolutions_to_matmuls`).

Each function returns how many ops it replaced; ops it cannot take are left alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..lowering.walk import operations, top_level_symbols
from .microkernelrecipes import declaration
from .microkernels import microkernel
from .microkernelshapes import LANES, MicrokernelShape, host_shape

__all__ = ["CONVOLUTIONS", "batch_matmuls_to_matmuls", "convolutions_to_matmuls",
           "matmuls_to_microkernels", "on_memrefs"]


#: Named convolutions rewritten into matmuls (:func:`convolutions_to_matmuls`).
CONVOLUTIONS = ("linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nchw_fchw")


def on_memrefs(op: Any) -> bool:
    """Whether every operand of ``op`` is a memref (the rewrites run before bufferizing)."""
    from mlir import ir

    return all(isinstance(v.type, ir.MemRefType) for v in op.operands)


# -- matmul microkernels ------------------------------------------------------------------

_DEFAULT_MAPS = {
    "linalg.matmul": "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> "
                     "(d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]",
    "linalg.batch_matmul": "[affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, "
                           "d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> "
                           "(d0, d1, d2)>]"}


def _default_maps(op: Any) -> bool:
    """Whether ``op`` (a matmul or batch matmul) has the indexing maps of its name
    (not transposed or broadcast operands)."""
    return ("indexing_maps" not in op.attributes
            or str(op.attributes["indexing_maps"]) == _DEFAULT_MAPS[op.name])


def matmuls_to_microkernels(module: Any, parallel: bool = False,
                            shape: MicrokernelShape | None = None, threads: int = 0,
                            deferred: bool = False) -> int:
    """Replace each ``linalg.matmul`` on memrefs of f32 or f64 (one type, the default
    indexing maps) whose B and C have a unit innermost stride known statically by a call
    to a :func:`~pymlirjit.codegen.microkernels.microkernel` of ``shape`` (the host's,
    :func:`~pymlirjit.codegen.microkernelshapes.host_shape`, by default; ``parallel``: on
    ``threads`` threads, 0 if unknown); return how many were replaced. ``deferred``: the
    microkernel only declared, naming its recipe
    (:mod:`~pymlirjit.codegen.microkernelrecipes`, whose ``define`` defines it)."""
    from mlir import ir

    chosen = operations(module, lambda op: on_memrefs(op) and _microkernel_fits(op),
                        names={"linalg.matmul"})
    names = set(top_level_symbols(module))
    with module.context:
        for op in chosen:
            element = str(ir.MemRefType(op.operands[0].type).element_type)
            unit = f"memref<?x?x{element}, strided<[?, 1], offset: ?>>"
            types = (f"memref<?x?x{element}, strided<[?, ?], offset: ?>>", unit, unit)
            name = _fresh("__pymlirjit_matmul", names)
            make = declaration if deferred else microkernel
            text = make(name, element, types, parallel, shape or host_shape(), threads)
            _replace_by_call(module, op, name, text, types)
    return len(chosen)


def _microkernel_fits(op: Any) -> bool:
    from mlir import ir

    if not _plain_float_memrefs(op) or not _default_maps(op):
        return False
    types = [ir.MemRefType(v.type) for v in op.operands]
    return (str(types[0].element_type) in LANES
            and all(t.get_strides_and_offset()[0][-1] == 1 for t in types[1:]))


def _replace_by_call(module: Any, op: Any, name: str, text: str,
                     types: Sequence[str]) -> None:
    """Append the function ``text`` (named ``name``, taking ``types``) to ``module`` and
    replace ``op`` by a call to it with ``op``'s operands cast to ``types``."""
    from mlir import ir
    from mlir.dialects import func, memref

    owner = ir.Module.parse(text)  # owns the function until it moves
    function = owner.body.operations[0]
    function.operation.detach_from_parent()
    module.body.append(function)
    with ir.InsertionPoint(op), op.location:
        args = []
        for ty, value in zip(types, op.operands, strict=True):
            wanted = ir.MemRefType.parse(ty)
            args.append(value if value.type == wanted else memref.CastOp(wanted, value).result)
        func.CallOp([], ir.FlatSymbolRefAttr.get(name), args)
    op.erase()


_BATCH_AS_MATMULS = """
func.func private @{name}(%A: {TA}, %B: {TB}, %C: {TC}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %q = memref.dim %A, %c0 : {TA}
  %m = memref.dim %A, %c1 : {TA}
  %k = memref.dim %A, %c2 : {TA}
  %n = memref.dim %B, %c2 : {TB}
  scf.for %b = %c0 to %q step %c1 {{
    %a = memref.subview %A[%b, 0, 0] [1, %m, %k] [1, 1, 1] : {TA} to {VA}
    %w = memref.subview %B[%b, 0, 0] [1, %k, %n] [1, 1, 1] : {TB} to {VB}
    %o = memref.subview %C[%b, 0, 0] [1, %m, %n] [1, 1, 1] : {TC} to {VC}
    linalg.matmul ins(%a, %w : {VA}, {VB}) outs(%o : {VC})
  }}
  return
}}
"""


def batch_matmuls_to_matmuls(module: Any) -> int:
    """Replace each ``linalg.batch_matmul`` on memrefs of one float type (default
    indexing maps) by a call to a function running a ``linalg.matmul`` per matrix of
    the batch, on views (which :func:`matmuls_to_microkernels` then takes); return how
    many were replaced."""
    from mlir import ir

    chosen = operations(module, lambda op: on_memrefs(op) and _plain_float_memrefs(op)
                        and _default_maps(op), names={"linalg.batch_matmul"})
    names = set(top_level_symbols(module))
    with module.context:
        for op in chosen:
            types: dict[str, str] = {}
            for role, value in zip("ABC", op.operands, strict=True):
                given = ir.MemRefType(value.type)
                inner = 1 if given.get_strides_and_offset()[0][-1] == 1 else "?"
                element = given.element_type
                types[f"T{role}"] = (f"memref<?x?x?x{element}, strided<[?, ?, {inner}], "
                                     f"offset: ?>>")
                types[f"V{role}"] = f"memref<?x?x{element}, strided<[?, {inner}], offset: ?>>"
            name = _fresh("__pymlirjit_batch_matmul", names)
            _replace_by_call(module, op, name, _BATCH_AS_MATMULS.format(name=name, **types),
                             [types[f"T{role}"] for role in "ABC"])
    return len(chosen)


# A 2-D convolution is a sum of matmuls: for each image, output row and filter tap
# (kh, kw), the output row's (width x channels) block gains the product of the input
# row's block at that tap and the filter's (channels x channels) block at that tap.
# Each such matmul runs on strided views (no copy) and gets the matmul schedule.
_CONV_AS_MATMULS = """
func.func private @{name}(%I: {TI}, %K: {TK}, %O: {TO}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %sh = arith.constant {sh} : index
  %dh = arith.constant {dh} : index
  %dw = arith.constant {dw} : index
  %n = memref.dim %O, %c0 : {TO}
  %oh = memref.dim %O, {oh} : {TO}
  %ow = memref.dim %O, {ow} : {TO}
  %f = memref.dim %O, {of} : {TO}
  %kh = memref.dim %K, {kh} : {TK}
  %kw = memref.dim %K, {kw} : {TK}
  %c = memref.dim %K, {kc} : {TK}
  scf.for %b = %c0 to %n step %c1 {{
    scf.for %y = %c0 to %oh step %c1 {{
      %o = memref.subview %O{out} : {TO} to {VO}
      scf.for %u = %c0 to %kh step %c1 {{
        %yh = arith.muli %y, %sh : index
        %uh = arith.muli %u, %dh : index
        %ys = arith.addi %yh, %uh : index
        scf.for %v = %c0 to %kw step %c1 {{
          %xs = arith.muli %v, %dw : index
          %i = memref.subview %I{inp} : {TI} to {VI}
          %k = memref.subview %K{ker} : {TK} to {VK}
          linalg.matmul ins({lhs}, {rhs} : {VL}, {VR}) outs(%o : {VO})
        }}
      }}
    }}
  }}
  return
}}
"""

#: Per layout: the dimension indices, the views of each tap's matmul, and how far apart
#: the innermost elements of each view are in units of its operand's innermost stride
#: (None: a stride the layout leaves unknown).
_CONV_LAYOUTS: dict[str, dict[str, Any]] = {
    # O[n, oh, :, :] (ow x f) += I[n, ys, xs::sw, :] (ow x c) @ K[u, v, :, :] (c x f)
    "linalg.conv_2d_nhwc_hwcf": dict(
        oh="%c1", ow="%c2", of="%c3", kh="%c0", kw="%c1", kc="%c2",
        out="[%b, %y, 0, 0] [1, 1, %ow, %f] [1, 1, 1, 1]",
        inp="[%b, %ys, %xs, 0] [1, 1, %ow, %c] [1, 1, {sw}, 1]",
        ker="[%u, %v, 0, 0] [1, 1, %c, %f] [1, 1, 1, 1]", lhs="%i", rhs="%k",
        steps=dict(I=1, K=1, O=1)),
    # O[n, :, oh, :] (f x ow) += K[:, :, u, v] (f x c) @ I[n, :, ys, xs::sw] (c x ow)
    "linalg.conv_2d_nchw_fchw": dict(
        oh="%c2", ow="%c3", of="%c1", kh="%c2", kw="%c3", kc="%c1",
        out="[%b, 0, %y, 0] [1, %f, 1, %ow] [1, 1, 1, 1]",
        inp="[%b, 0, %ys, %xs] [1, %c, 1, %ow] [1, 1, 1, {sw}]",
        ker="[0, 0, %u, %v] [%f, %c, 1, 1] [1, 1, 1, 1]", lhs="%k", rhs="%i",
        steps=dict(I="sw", K=None, O=1)),
}


def convolutions_to_matmuls(module: Any) -> int:
    """Replace each 2-D convolution of :data:`CONVOLUTIONS` on memrefs of one float
    type by a call to a function computing it as ``linalg.matmul`` s on views (see
    ``_CONV_AS_MATMULS``); return how many were replaced."""
    from mlir import ir

    convs = operations(module, lambda op: on_memrefs(op) and _plain_float_memrefs(op),
                       names=CONVOLUTIONS)
    names = set(top_level_symbols(module))
    with module.context:
        for op in convs:
            name = _fresh("__pymlirjit_conv", names)
            sh, sw = _pair(op, "strides")
            dh, dw = _pair(op, "dilations")
            layout = dict(_CONV_LAYOUTS[op.name])
            layout["inp"] = layout["inp"].format(sw=sw)
            types: dict[str, str] = {}
            for role, value in zip("IKO", op.operands, strict=True):
                given = ir.MemRefType(value.type)
                # A unit innermost stride known statically keeps the vector loads whole.
                unit = given.get_strides_and_offset()[0][-1] == 1
                step = layout["steps"][role]
                inner = "?" if not unit or step is None else sw if step == "sw" else step
                element = given.element_type
                types[f"T{role}"] = (f"memref<?x?x?x?x{element}, strided<[?, ?, ?, "
                                     f"{1 if unit else '?'}], offset: ?>>")
                types[f"V{role}"] = f"memref<?x?x{element}, strided<[?, {inner}], offset: ?>>"
            types["VL"], types["VR"] = (types["VI"], types["VK"]) if layout["lhs"] == "%i" \
                else (types["VK"], types["VI"])
            del layout["steps"]
            text = _CONV_AS_MATMULS.format(name=name, sh=sh, dh=dh, dw=dw, **layout, **types)
            _replace_by_call(module, op, name, text, [types[f"T{role}"] for role in "IKO"])
    return len(convs)


def _plain_float_memrefs(op: Any) -> bool:
    """Whether ``op``'s operands are memrefs of one float type in the default memory space."""
    from mlir import ir

    types = [ir.MemRefType(v.type) for v in op.operands]
    return (len(types) == 3 and all(t.memory_space is None for t in types)
            and len({str(t.element_type) for t in types}) == 1
            and str(types[0].element_type) in ("f16", "bf16", "f32", "f64"))


def _pair(op: Any, name: str) -> tuple[int, int]:
    from mlir import ir

    if name not in op.attributes:
        return 1, 1
    first, second = ir.DenseIntElementsAttr(op.attributes[name])
    return int(first), int(second)


def _fresh(prefix: str, taken: set[str]) -> str:
    index = 0
    while f"{prefix}_{index}" in taken:
        index += 1
    taken.add(f"{prefix}_{index}")
    return f"{prefix}_{index}"
