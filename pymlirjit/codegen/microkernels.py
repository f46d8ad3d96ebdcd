"""Matmul microkernels as generated MLIR (``C += A @ B`` on memrefs of f32 or f64), in the
register-block shape that suits the host CPU (:func:`host_shape`).

For each panel of columns (a few AVX-512 vectors wide) and each block of the depth, the
panel's rows of B are first copied into a contiguous buffer (on the heap), zero-padded
in the last, partial panel; then blocks of rows of C stay in vector registers
(loop-carried values, so they stay there whatever aliases) while the rows of B stream
through as vectors and A's elements are broadcast into FMAs.
The copy matters when B's rows are a power of two apart: read in place, a panel's
rows fall into a few sets of the L1 cache and evict each other."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LANES", "SHAPES", "MicrokernelShape", "host_family", "host_shape", "microkernel"]

#: 512-bit vectors: lanes per element type.
LANES = {"f32": 16, "f64": 8}


@dataclass(frozen=True)
class MicrokernelShape:
    """A register block of ``rows`` rows of C by ``vectors`` AVX-512 vectors, over
    ``depth`` steps of the depth at a time (B's panel, ``depth`` rows of ``vectors``
    vectors, copied into a contiguous buffer first)."""

    rows: int
    vectors: int
    depth: int

    def columns(self, element: str) -> int:
        """Columns of a panel for elements of type ``element`` (``f32``, ``f64``)."""
        return self.vectors * LANES[element]


#: Shapes by CPU family. ``zen``: AMD Zen 4 runs AVX-512 on two 256-bit pipes; 8x2
#: (16 accumulators), B packed 512 deep (a 64 KB buffer: against B read in place,
#: 0.74-0.88x the time at 1024^3 and 2048^3, the same at 512^3;
#: benchmarks/results/2026-12-04-amd-epyc-zen4.md).
#: ``intel``: two 512-bit FMA ports of 4 cycles' latency want at least 8 independent
#: accumulators, and more FMAs per load (12x2: 24 accumulators, 14 loads per 24 FMAs).
SHAPES = {"zen": MicrokernelShape(8, 2, 512), "intel": MicrokernelShape(12, 2, 256)}


def host_shape() -> MicrokernelShape:
    """The shape of :data:`SHAPES` for the host's CPU family (:func:`host_family`)."""
    return SHAPES[host_family()]


@functools.cache
def host_family() -> str:
    """``zen`` for AMD's CPUs (LLVM's host CPU name ``znver*``) and CPUs LLVM cannot
    name, ``intel`` for the others."""
    try:
        import llvmlite.binding as llvm

        name = llvm.get_host_cpu_name()
    except (ImportError, RuntimeError):
        return "zen"
    return "zen" if name.startswith("znver") or name == "generic" else "intel"


def microkernel(name: str, element: str, types: tuple[str, str, str], parallel: bool,
                shape: MicrokernelShape) -> str:
    """An MLIR function ``@name`` computing ``C += A @ B`` (the module docstring) on
    memrefs of ``types``; one panel body, masked by each panel's own masks (full but in
    the last, partial panel); the rows left after the last whole block are done two at
    a time, then one (:func:`_tail_blocks`). ``parallel`` makes the panels an
    ``scf.parallel`` (:func:`_parallel_panels`)."""
    ta, tb, tc = types
    lanes, rows, vectors = LANES[element], shape.rows, shape.vectors
    vt, mt = f"vector<{lanes}x{element}>", f"vector<{lanes}xi1>"
    bt = f"memref<?x{vectors * lanes}x{element}>"  # min(k, depth) rows
    out = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    out += [f"  %c{r} = arith.constant {r} : index" for r in range(max(rows, vectors))]
    out += [f"  %o{v} = arith.constant {v * lanes} : index" for v in range(vectors)]
    out += [f"  %rows = arith.constant {rows} : index",
            f"  %width = arith.constant {vectors * lanes} : index",
            f"  %depth = arith.constant {shape.depth} : index",
            f"  %zero = arith.constant dense<0.0> : {vt}",
            f"  %m = memref.dim %A, %c0 : {ta}",
            f"  %k = memref.dim %A, %c1 : {ta}",
            f"  %n = memref.dim %B, %c1 : {tb}",
            "  %mq = arith.divui %m, %rows : index",
            "  %mf = arith.muli %mq, %rows : index",
            "  %nc = arith.ceildivui %n, %width : index",
            "  %np = arith.muli %nc, %width : index"]
    out.append("  %rows_b = arith.minui %k, %depth : index")
    if not parallel:  # on the heap: 64 KB of the caller's stack may be more than it has
        out.append(f"  %buf = memref.alloc(%rows_b) {{alignment = 64}} : {bt}")

    def masks(j: str, pad: str) -> None:
        # Lanes of the panel's vector v within B and C: all of them but in the last,
        # partial panel (a count past the lanes makes a full mask).
        out.append(f"{pad}%nr = arith.subi %n, {j} : index")
        for v in range(vectors):
            out.extend([f"{pad}%left{v} = arith.subi %nr, %o{v} : index",
                        f"{pad}%kept{v} = arith.maxsi %left{v}, %c0 : index",
                        f"{pad}%mask{v} = vector.create_mask %kept{v} : {mt}"])

    def block(first: str, count: int, j: str, masked: bool, pad: str) -> None:
        if count > 1:
            out.extend(f"{pad}%i{r} = arith.addi {first}, %c{r} : index" for r in range(1, count))
        index = [first] + [f"%i{r}" for r in range(1, count)]
        out.extend(f"{pad}%j{v} = arith.addi {j}, %o{v} : index" for v in range(1, vectors))
        column = [j] + [f"%j{v}" for v in range(1, vectors)]
        acc = [(r, v) for r in range(count) for v in range(vectors)]
        for r, v in acc:
            out.append(f"{pad}%acc{r}_{v} = " + (
                f"vector.maskedload %C[{index[r]}, {column[v]}], %mask{v}, %zero : {tc}, "
                f"{mt}, {vt} into {vt}" if masked else
                f"vector.load %C[{index[r]}, {column[v]}] : {tc}, {vt}"))
        carried = ", ".join(f"%x{r}_{v} = %acc{r}_{v}" for r, v in acc)
        vts = ", ".join([vt] * len(acc))
        out.append(f"{pad}%res:{len(acc)} = scf.for %p = %c0 to %kc step %c1 "
                   f"iter_args({carried}) -> ({vts}) {{")
        out.append(f"{pad}  %q = arith.addi %k0, %p : index")
        out.extend(f"{pad}  %b{v} = vector.load %buf[%p, %o{v}] : {bt}, {vt}"
                   for v in range(vectors))
        for r in range(count):
            out.extend([f"{pad}  %a{r} = memref.load %A[{index[r]}, %q] : {ta}",
                        f"{pad}  %s{r} = vector.broadcast %a{r} : {element} to {vt}"])
            out.extend(f"{pad}  %y{r}_{v} = vector.fma %s{r}, %b{v}, %x{r}_{v} : {vt}"
                       for v in range(vectors))
        out.append(f"{pad}  scf.yield {', '.join(f'%y{r}_{v}' for r, v in acc)} : {vts}")
        out.append(f"{pad}}}{_NO_UNROLL}")
        for number, (r, v) in enumerate(acc):
            out.append(
                f"{pad}vector.maskedstore %C[{index[r]}, {column[v]}], %mask{v}, "
                f"%res#{number} : {tc}, {mt}, {vt}" if masked else
                f"{pad}vector.store %res#{number}, %C[{index[r]}, {column[v]}] : {tc}, {vt}")

    def pack(j: str, masked: bool, pad: str) -> None:
        out.append(f"{pad}scf.for %p = %c0 to %kc step %c1 {{")
        out.append(f"{pad}  %q = arith.addi %k0, %p : index")
        for v in range(vectors):
            at = j if v == 0 else f"%pj{v}"
            if v:
                out.append(f"{pad}  %pj{v} = arith.addi {j}, %o{v} : index")
            out.append(f"{pad}  %pb{v} = " + (
                f"vector.maskedload %B[%q, {at}], %mask{v}, %zero : {tb}, {mt}, {vt} "
                f"into {vt}" if masked else f"vector.load %B[%q, {at}] : {tb}, {vt}"))
            out.append(f"{pad}  vector.store %pb{v}, %buf[%p, %o{v}] : {bt}, {vt}")
        out.append(f"{pad}}}")

    def panel(j: str, masked: bool, pad: str) -> None:
        masks(j, pad)
        out.append(f"{pad}scf.for %k0 = %c0 to %k step %depth {{")
        out.append(f"{pad}  %kend = arith.addi %k0, %depth : index")
        out.append(f"{pad}  %k1 = arith.minui %kend, %k : index")
        out.append(f"{pad}  %kc = arith.subi %k1, %k0 : index")
        pack(j, masked, pad + "  ")
        out.append(f"{pad}  scf.for %i = %c0 to %mf step %rows {{")
        block("%i", rows, j, masked, pad + "    ")
        out.append(f"{pad}  }}")
        if rows > 2:  # the rows left after the whole blocks: two at a time, then one
            out.extend([f"{pad}  %rest = arith.subi %m, %mf : index",
                        f"{pad}  %pairs = arith.divui %rest, %c2 : index",
                        f"{pad}  %paired = arith.muli %pairs, %c2 : index",
                        f"{pad}  %mp = arith.addi %mf, %paired : index",
                        f"{pad}  scf.for %t = %mf to %mp step %c2 {{"])
            block("%t", 2, j, masked, pad + "    ")
            out.append(f"{pad}  }}")
        if rows > 1:
            last = "%mp" if rows > 2 else "%mf"
            out.append(f"{pad}  %odd = arith.cmpi ult, {last}, %m : index")
            out.append(f"{pad}  scf.if %odd {{")
            block(last, 1, j, masked, pad + "    ")
            out.append(f"{pad}  }}")
        out.append(f"{pad}}}")

    if parallel:
        _parallel_panels(out, panel, bt)
    else:
        out.append("  scf.for %j = %c0 to %np step %width {")
        panel("%j", True, "    ")
        out.append("  }")
        out.append(f"  memref.dealloc %buf : {bt}")
    out += ["  return", "}"]
    return "\n".join(out)


#: On the depth loops (made LLVM's by :func:`pymlirjit.codegen.optimize.attach_loop_annotations`):
#: LLVM unrolled them 2-8 times, 86 FMAs to compile where the blocks have 22, for no
#: speed (0.98-1.04x the time without, docs/performance.md).
_NO_UNROLL = (" {llvm.loop_annotation = #llvm.loop_annotation<unroll = <disable = true>, "
              "vectorize = <disable = true>>}")


def _tail_blocks(rows: int) -> list[int]:
    """Row counts of the blocks of the rows left after the whole ones (fewer than
    ``rows``): blocks of two rows, as many as fit (4 independent accumulators of 2
    vectors: near the FMA units' peak on AMD, half of it on Intel), then one row. Blocks
    of 2^t rows, largest first, did a little better on Intel but made a 12x2 kernel
    twice the code (a compile of one matmul was 3.5x the naive lowering's)."""
    return [size for size in (2, 1) if size < rows]


def _parallel_panels(out: list[str], panel: Callable[[str, bool, str], None],
                     buffer_type: str) -> None:
    """The panels, the masked last one too, as one ``scf.parallel`` (which
    ``parallel.split_for_threads`` shares out among the threads in chunks), each
    with its own buffer for B, on the heap (on the stack, each panel a thread runs
    would add one: their loop is outlined into a function of the whole chunk). The
    caller used to do the masked panel after the loop, as the serial order does, which
    left the threads unequal shares: 509^3 f32 on 2 cores ran at 1.75x serial, now
    2.02x (512^3, no masked panel: 1.96x either way;
    benchmarks/results/2026-12-03-parallel.md)."""
    out += ["  scf.parallel (%j) = (%c0) to (%np) step (%width) {",
            f"    %buf = memref.alloc(%rows_b) {{alignment = 64}} : {buffer_type}"]
    panel("%j", True, "    ")
    out.append(f"    memref.dealloc %buf : {buffer_type}")
    out += ["    scf.reduce",
            "  }"]
