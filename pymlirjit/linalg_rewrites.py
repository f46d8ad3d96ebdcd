"""linalg ops rewritten as calls to generated MLIR functions that the optimizer makes
fast: matmuls as microkernels whose register blocks are loop-carried vectors
(:func:`matmuls_to_microkernels`), batch matmuls and 2-D convolutions as matmuls on
views (:func:`batch_matmuls_to_matmuls`, :func:`convolutions_to_matmuls`).

Each function returns how many ops it replaced; ops it cannot take are left alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CONVOLUTIONS", "batch_matmuls_to_matmuls", "convolutions_to_matmuls",
           "matmuls_to_microkernels", "on_memrefs"]


#: Named convolutions rewritten into matmuls (:func:`convolutions_to_matmuls`).
CONVOLUTIONS = ("linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nchw_fchw")


def on_memrefs(op: Any) -> bool:
    """Whether every operand of ``op`` is a memref (the rewrites run before bufferizing)."""
    from mlir import ir

    return all(isinstance(v.type, ir.MemRefType) for v in op.operands)


# -- matmul microkernels ------------------------------------------------------------------

#: Rows of C and depth of A/B per block of the microkernel; its columns are
#: :data:`_LANES` wide: 8 rows of 32 f32 are 16 AVX-512 accumulators.
_MICRO_ROWS, _MICRO_DEPTH = 8, 256
#: Columns per block: two AVX-512 vectors of the element type.
_LANES = {"f32": 32, "f64": 16}
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


def _microkernel(name: str, element: str, types: tuple[str, str, str],
                 parallel: bool) -> str:
    """An MLIR function computing ``C += A @ B``: for each panel of :data:`_LANES`
    columns and each block of :data:`_MICRO_DEPTH` of the depth, blocks of
    :data:`_MICRO_ROWS` rows of C stay in vector registers (loop-carried values, so
    they stay there whatever aliases) while rows of B stream through as vectors and A's
    elements are broadcast into FMAs; the last partial panel is masked, the last rows
    are done one at a time. ``parallel`` makes the panels an ``scf.parallel``
    (:func:`_parallel_panels`)."""
    ta, tb, tc = types
    lanes, rows = _LANES[element], _MICRO_ROWS
    vt, mt = f"vector<{lanes}x{element}>", f"vector<{lanes}xi1>"
    out = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    out += [f"  %c{r} = arith.constant {r} : index" for r in range(rows)]
    out += [f"  %rows = arith.constant {rows} : index",
            f"  %lanes = arith.constant {lanes} : index",
            f"  %depth = arith.constant {_MICRO_DEPTH} : index",
            f"  %zero = arith.constant dense<0.0> : {vt}",
            f"  %m = memref.dim %A, %c0 : {ta}",
            f"  %k = memref.dim %A, %c1 : {ta}",
            f"  %n = memref.dim %B, %c1 : {tb}",
            "  %mq = arith.divui %m, %rows : index",
            "  %mf = arith.muli %mq, %rows : index",
            "  %nq = arith.divui %n, %lanes : index",
            "  %nf = arith.muli %nq, %lanes : index",
            "  %nr = arith.subi %n, %nf : index",
            f"  %mask = vector.create_mask %nr : {mt}",
            "  %partial = arith.cmpi ult, %nf, %n : index"]

    def block(first: str, count: int, j: str, masked: bool, pad: str) -> None:
        if count > 1:
            out.extend(f"{pad}%i{r} = arith.addi {first}, %c{r} : index" for r in range(1, count))
        index = [first] + [f"%i{r}" for r in range(1, count)]

        def load(memref: str, row: str, ty: str) -> str:
            if masked:
                return (f"vector.maskedload {memref}[{row}, {j}], %mask, %zero : {ty}, {mt}, "
                        f"{vt} into {vt}")
            return f"vector.load {memref}[{row}, {j}] : {ty}, {vt}"

        out.extend(f"{pad}%acc{r} = {load('%C', index[r], tc)}" for r in range(count))
        carried = ", ".join(f"%x{r} = %acc{r}" for r in range(count))
        vts = ", ".join([vt] * count)
        out.append(f"{pad}%res:{count} = scf.for %p = %k0 to %k1 step %c1 "
                   f"iter_args({carried}) -> ({vts}) {{")
        out.append(f"{pad}  %b = {load('%B', '%p', tb)}")
        for r in range(count):
            out.extend([f"{pad}  %a{r} = memref.load %A[{index[r]}, %p] : {ta}",
                        f"{pad}  %s{r} = vector.broadcast %a{r} : {element} to {vt}",
                        f"{pad}  %y{r} = vector.fma %s{r}, %b, %x{r} : {vt}"])
        out.append(f"{pad}  scf.yield {', '.join(f'%y{r}' for r in range(count))} : {vts}")
        out.append(f"{pad}}}")
        for r in range(count):
            out.append(f"{pad}vector.maskedstore %C[{index[r]}, {j}], %mask, %res#{r} : {tc}, "
                       f"{mt}, {vt}" if masked else
                       f"{pad}vector.store %res#{r}, %C[{index[r]}, {j}] : {tc}, {vt}")

    def panel(j: str, masked: bool, pad: str) -> None:
        out.append(f"{pad}scf.for %k0 = %c0 to %k step %depth {{")
        out.append(f"{pad}  %kend = arith.addi %k0, %depth : index")
        out.append(f"{pad}  %k1 = arith.minui %kend, %k : index")
        out.append(f"{pad}  scf.for %i = %c0 to %mf step %rows {{")
        block("%i", rows, j, masked, pad + "    ")
        out.append(f"{pad}  }}")
        out.append(f"{pad}  scf.for %i = %mf to %m step %c1 {{")
        block("%i", 1, j, masked, pad + "    ")
        out.append(f"{pad}  }}")
        out.append(f"{pad}}}")

    if parallel:
        _parallel_panels(out, panel)
    else:
        out.append("  scf.for %j = %c0 to %nf step %lanes {")
        panel("%j", False, "    ")
        out.append("  }")
        out.append("  scf.if %partial {")
        panel("%nf", True, "    ")
        out.append("  }")
    out += ["  return", "}"]
    return "\n".join(out)


def _parallel_panels(out: list[str], panel: Callable[[str, bool, str], None]) -> None:
    """The panels, the masked last one too, as one ``scf.parallel`` (which
    ``optimize.split_for_threads`` splits into one contiguous chunk per thread). The
    caller used to do the masked panel after the loop, as the serial order does, which
    left the threads unequal shares: 509^3 f32 on 2 cores ran at 1.75x serial, now
    2.02x (512^3, no masked panel: 1.96x either way; docs/performance.md)."""
    out += ["  %nc = arith.ceildivui %n, %lanes : index",
            "  %np = arith.muli %nc, %lanes : index",
            "  scf.parallel (%j) = (%c0) to (%np) step (%lanes) {",
            "    %whole = arith.cmpi ult, %j, %nf : index",
            "    scf.if %whole {"]
    panel("%j", False, "      ")
    out += ["    } else {"]
    panel("%nf", True, "      ")
    out += ["    }",
            "    scf.reduce",
            "  }"]


def matmuls_to_microkernels(module: Any, parallel: bool = False) -> int:
    """Replace each ``linalg.matmul`` on memrefs of f32 or f64 (one type, the default
    indexing maps) whose B and C have a unit innermost stride known statically by a call
    to a :func:`_microkernel`; return how many were replaced."""
    from mlir import ir

    chosen: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "linalg.matmul" and on_memrefs(op) and _microkernel_fits(op):
            chosen.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
    with module.context:
        for op in chosen:
            element = str(ir.MemRefType(op.operands[0].type).element_type)
            unit = f"memref<?x?x{element}, strided<[?, 1], offset: ?>>"
            types = (f"memref<?x?x{element}, strided<[?, ?], offset: ?>>", unit, unit)
            name = _fresh("__pymlirjit_matmul", names)
            _replace_by_call(module, op, name, _microkernel(name, element, types, parallel),
                             types)
    return len(chosen)


def _microkernel_fits(op: Any) -> bool:
    from mlir import ir

    if not _plain_float_memrefs(op) or not _default_maps(op):
        return False
    types = [ir.MemRefType(v.type) for v in op.operands]
    return (str(types[0].element_type) in _LANES
            and all(t.get_strides_and_offset()[0][-1] == 1 for t in types[1:]))


def _symbols(module: Any) -> set[str]:
    from mlir import ir

    return {ir.StringAttr(op.attributes["sym_name"]).value
            for op in module.body.operations if "sym_name" in op.attributes}


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

    chosen: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "linalg.batch_matmul" and on_memrefs(op) and \
                _plain_float_memrefs(op) and _default_maps(op):
            chosen.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
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

    convs: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name in CONVOLUTIONS and on_memrefs(op) and _plain_float_memrefs(op):
            convs.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
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
