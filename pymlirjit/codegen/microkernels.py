"""Matmul microkernels as generated MLIR (``C += A @ B`` on memrefs of f32 or f64), in the
register-block shape that suits the host CPU
(:func:`~pymlirjit.codegen.microkernelshapes.host_shape`).

For each panel of columns (a few vectors wide: AVX-512's, or AVX2's on hosts without
AVX-512) and each block of the depth, the
panel's rows of B are first copied into a contiguous buffer (on the heap), zero-padded
in the last, partial panel; then blocks of rows of C stay in vector registers
(loop-carried values, so they stay there whatever aliases) while the rows of B stream
through as vectors and A's elements are broadcast into FMAs.
The copy matters when B's rows are a power of two apart: read in place, a panel's
rows fall into a few sets of the L1 cache and evict each other.

With ``block_rows`` (the AVX2 shapes), the depth blocks and blocks of A's rows are loops
around the panels instead (GotoBLAS's order): each block of A, copied contiguous
(``pack_a``), stays in L2 while every panel of B goes by; ``parallel`` then shares out
the row blocks. With ``rows_first`` too (serial calls), each depth block packs B's panels
once (``column_block`` columns at a time), and each block of rows of C goes through
every panel, along C's rows, before the next block; with ``a_in_place_below``, Bs of
fewer panels than that leave A unpacked, the blocks loading its rows in place."""

from __future__ import annotations

from collections.abc import Callable

from .checks_bounds import IN_BOUNDS
from .microkernelshapes import MicrokernelShape

__all__ = ["microkernel"]


def microkernel(name: str, element: str, types: tuple[str, str, str], parallel: bool,
                shape: MicrokernelShape, threads: int = 0) -> str:
    """An MLIR function ``@name`` computing ``C += A @ B`` (the module docstring) on
    memrefs of ``types``; one panel body, masked by each panel's own masks (full but in
    the last, partial panel); the rows left after the last whole block are done two at
    a time, then one (:func:`_tail_blocks`; or ``shape.tail_rows`` at a time, clamped).
    ``parallel`` makes the panels an
    ``scf.parallel`` (:func:`_parallel_panels`), on ``threads`` threads (0: unknown).
    With ``shape.narrow``, serial calls whose B has fewer than ``shape.narrow_below``
    panels, or whose C has fewer rows than two blocks, run ``shape.narrow``'s code."""
    ta, tb, tc = types
    lanes, rows, vectors = shape.lanes(element), shape.rows, shape.vectors
    vt = f"vector<{lanes}x{element}>"
    # In bounds by construction (the checks leave it alone): shapes that do not agree (a
    # failed shape check where the call runs on after it) leave C as it is.
    out = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) "
           f"attributes {{{IN_BOUNDS}}} {{"]
    out += [f"  %c{r} = arith.constant {r} : index" for r in range(max(rows, vectors))]
    out += [f"  %o{v} = arith.constant {v * lanes} : index" for v in range(vectors)]
    out += [f"  %rows = arith.constant {rows} : index",
            f"  %width = arith.constant {vectors * lanes} : index",
            f"  %zero = arith.constant dense<0.0> : {vt}",
            f"  %m = memref.dim %A, %c0 : {ta}",
            f"  %k = memref.dim %A, %c1 : {ta}",
            f"  %n = memref.dim %B, %c1 : {tb}",
            f"  %kb = memref.dim %B, %c0 : {tb}",
            f"  %mc = memref.dim %C, %c0 : {tc}",
            f"  %nc_ = memref.dim %C, %c1 : {tc}",
            "  %agree_k = arith.cmpi eq, %kb, %k : index",
            "  %agree_m = arith.cmpi eq, %mc, %m : index",
            "  %agree_n = arith.cmpi eq, %nc_, %n : index",
            "  %agree_km = arith.andi %agree_k, %agree_m : i1",
            "  %agree = arith.andi %agree_km, %agree_n : i1",
            "  scf.if %agree {",
            "  %mq = arith.divui %m, %rows : index",
            "  %mf = arith.muli %mq, %rows : index",
            "  %nc = arith.ceildivui %n, %width : index",
            "  %np = arith.muli %nc, %width : index"]
    narrow = shape.narrow
    if narrow is None or parallel:
        _body(out, element, types, parallel, shape, threads)
    else:
        out += [f"  %fewest = arith.constant {shape.narrow_below} : index",
                "  %few_panels = arith.cmpi ult, %nc, %fewest : index",
                f"  %fewest_rows = arith.constant {2 * rows} : index",
                "  %few_rows = arith.cmpi ult, %m, %fewest_rows : index",
                "  %narrow = arith.ori %few_panels, %few_rows : i1",
                "  scf.if %narrow {"]
        _body(out, element, types, parallel, narrow)
        out.append("  } else {")
        _body(out, element, types, parallel, shape)
        out.append("  }")
    out += ["  }", "  return", "}"]
    return "\n".join(out)


def _body(out: list[str], element: str, types: tuple[str, str, str], parallel: bool,
          shape: MicrokernelShape, threads: int = 0) -> None:
    """Append to ``out`` the loops of :func:`microkernel` in ``shape``, given the values
    its header defines (the sizes, the whole rows ``%mf``, the panels ``%nc``...)."""
    ta, tb, tc = types
    lanes, rows, vectors = shape.lanes(element), shape.rows, shape.vectors
    vt, mt = f"vector<{lanes}x{element}>", f"vector<{lanes}xi1>"
    bt = f"memref<?x{vectors * lanes}x{element}>"  # min(k, depth) rows
    depth = shape.depth_of(element)
    out.append(f"  %depth = arith.constant {depth} : index")
    out.append("  %rows_b = arith.minui %k, %depth : index")
    # Parallel calls keep the panels' order unless parallel_rows_first (Intel, Zen 3):
    # with each row block packing all of B's panels for itself, 1024^3 and 2048^3 took
    # 0.82-0.93x the time on an Intel Xeon; on a Zen 3 1.03-1.11x (depths of 64
    # 0.72-0.76x) while B's panels were packed all at once, 0.90-1.00x with B's columns
    # packed 1024 at a time (1000^3 to 2048^3; 512^3 the same).
    rows_first = shape.rows_first and (not parallel or shape.parallel_rows_first)
    if rows_first:  # a depth block's panels of B: panel g's row p at g * kc + p
        panels = "%nc"
        if shape.column_block:
            panels = "%nbpanels"
            out += [f"  %nbp = arith.constant {shape.column_block // (vectors * lanes)} : index",
                    "  %nbpanels = arith.minui %nc, %nbp : index"]
        out.append(f"  %brows = arith.muli %rows_b, {panels} : index")
        if not parallel:
            out.append(f"  %buf = memref.alloc(%brows) {{alignment = 64}} : {bt}")
    elif not parallel:  # on the heap: 64 KB of the caller's stack may be more than it has
        out.append(f"  %buf = memref.alloc(%rows_b) {{alignment = 64}} : {bt}")
    at = f"memref<?x{rows}x{element}>"  # A's packed block (pack_a)
    packed = bool(shape.block_rows and shape.pack_a)
    clamped = packed and shape.clamped_rows
    a_in_place = bool(shape.a_in_place_below) and rows_first and not parallel
    if a_in_place:
        # Only A whose rows are contiguous: a transposed A, read in place panel after
        # panel, took 1.1-1.2x the time of packing it (Zen 3, 7 panels).
        out += [f"  %in_place_below = arith.constant {shape.a_in_place_below} : index",
                "  %fewer_panels = arith.cmpi ult, %nc, %in_place_below : index",
                "  %a_base, %a_offset, %a_sizes:2, %a_strides:2 = "
                f"memref.extract_strided_metadata %A : {ta} -> memref<{element}>, index, "
                "index, index, index, index",
                "  %a_rows = arith.cmpi eq, %a_strides#1, %c1 : index",
                "  %few_panels = arith.andi %fewer_panels, %a_rows : i1"]
    if packed and not parallel:
        # Room for min(m, block_rows) rows' blocks of min(k, depth) steps, not more:
        # small matmuls then allocate (and touch) little; none where A is read in place.
        out += [f"  %amax = arith.constant {shape.block_rows} : index",
                "  %am = arith.minui %m, %amax : index",
                "  %ablocks = arith.ceildivui %am, %rows : index"]
        out += (["  %apacked = arith.muli %ablocks, %rows_b : index",
                 "  %arows = arith.select %few_panels, %c0, %apacked : index"] if a_in_place
                else ["  %arows = arith.muli %ablocks, %rows_b : index"])
        out.append(f"  %abuf = memref.alloc(%arows) {{alignment = 64}} : {at}")

    def masks(j: str, pad: str) -> None:
        # Lanes of the panel's vector v within B and C: all of them but in the last,
        # partial panel (a count past the lanes makes a full mask).
        out.append(f"{pad}%nr = arith.subi %n, {j} : index")
        for v in range(vectors):
            out.extend([f"{pad}%left{v} = arith.subi %nr, %o{v} : index",
                        f"{pad}%kept{v} = arith.maxsi %left{v}, %c0 : index",
                        f"{pad}%mask{v} = vector.create_mask %kept{v} : {mt}"])
        if shape.unmasked_stores:
            out.append(f"{pad}%whole = arith.cmpi uge, %nr, %width : index")

    def block(first: str, count: int, j: str, masked: bool, pad: str,
              used: int = vectors, clamp: str | None = None, a_in_place: bool = False) -> None:
        # A block of count rows of C by the panel's first `used` vectors; rows past
        # `clamp` (clamped shapes: the row block's last row) repeat that row.
        from_buffer = packed and count == rows and not a_in_place  # A from its packed block
        if from_buffer:
            out.extend([f"{pad}%ad = arith.subi {first}, %i0 : index",
                        f"{pad}%aq = arith.divui %ad, %rows : index",
                        f"{pad}%abase = arith.muli %aq, %kc : index"])
        last_row = clamp or ("%ilast" if clamped else None)
        if count > 1 and last_row:
            for r in range(1, count):
                out.extend([f"{pad}%u{r} = arith.addi {first}, %c{r} : index",
                            f"{pad}%i{r} = arith.minui %u{r}, {last_row} : index"])
        elif count > 1:
            out.extend(f"{pad}%i{r} = arith.addi {first}, %c{r} : index" for r in range(1, count))
        index = [first] + [f"%i{r}" for r in range(1, count)]
        out.extend(f"{pad}%j{v} = arith.addi {j}, %o{v} : index" for v in range(1, used))
        column = [j] + [f"%j{v}" for v in range(1, used)]
        acc = [(r, v) for r in range(count) for v in range(used)]
        if shape.prefetch_c and count == rows:
            # Each cache line of the next block's rows (64 bytes: a 512-bit vector, two
            # 256-bit ones), clamped to C's last row and column.
            lines = [v for v in range(used) if v * shape.bits % 512 == 0]
            out.extend([f"{pad}%pnext = arith.addi {first}, %rows : index",
                        f"{pad}%plast = arith.subi %m, %c1 : index",
                        f"{pad}%pend = arith.subi %n, %c1 : index"])
            out.extend(f"{pad}%pj{v} = arith.minui {column[v]}, %pend : index"
                       for v in lines if v)
            for r in range(rows):  # clamped: the rows after the last one are not C's
                out.extend([f"{pad}%pr{r} = arith.addi %pnext, %c{r} : index",
                            f"{pad}%pc{r} = arith.minui %pr{r}, %plast : index"])
                out.extend(f"{pad}memref.prefetch %C[%pc{r}, {f'%pj{v}' if v else j}], write, "
                           f"locality<3>, data : {tc}" for v in lines)
        for r, v in acc:
            out.append(f"{pad}%acc{r}_{v} = " + (
                f"vector.maskedload %C[{index[r]}, {column[v]}], %mask{v}, %zero : {tc}, "
                f"{mt}, {vt} into {vt}" if masked else
                f"vector.load %C[{index[r]}, {column[v]}] : {tc}, {vt}"))
        carried = ", ".join(f"%x{r}_{v} = %acc{r}_{v}" for r, v in acc)
        vts = ", ".join([vt] * len(acc))
        out.append(f"{pad}%res:{len(acc)} = scf.for %p = %c0 to %kc step %c1 "
                   f"iter_args({carried}) -> ({vts}) {{")
        out.append(f"{pad}  %q = arith.addi %k0, %p : index" if not from_buffer else
                   f"{pad}  %q = arith.addi %abase, %p : index")
        if rows_first:
            out.append(f"{pad}  %bp = arith.addi %bbase, %p : index")
        out.extend(f"{pad}  %b{v} = vector.load %buf[{'%bp' if rows_first else '%p'}, %o{v}] "
                   f": {bt}, {vt}" for v in range(used))
        for r in range(count):
            out.extend([f"{pad}  %a{r} = " + (f"memref.load %abuf[%q, %c{r}] : {at}"
                                              if from_buffer else
                                              f"memref.load %A[{index[r]}, %q] : {ta}"),
                        f"{pad}  %s{r} = vector.broadcast %a{r} : {element} to {vt}"])
            out.extend(f"{pad}  %y{r}_{v} = vector.fma %s{r}, %b{v}, %x{r}_{v} : {vt}"
                       for v in range(used))
        out.append(f"{pad}  scf.yield {', '.join(f'%y{r}_{v}' for r, v in acc)} : {vts}")
        out.append(f"{pad}}}{_NO_UNROLL}")

        def store_c(prefix: str, masked: bool) -> None:
            for number, (r, v) in enumerate(acc):
                out.append(
                    f"{prefix}vector.maskedstore %C[{index[r]}, {column[v]}], %mask{v}, "
                    f"%res#{number} : {tc}, {mt}, {vt}" if masked else
                    f"{prefix}vector.store %res#{number}, %C[{index[r]}, {column[v]}] : "
                    f"{tc}, {vt}")

        if masked and shape.unmasked_stores:  # whole panels unmasked, the last one masked
            out.append(f"{pad}scf.if %whole {{")
            store_c(pad + "  ", False)
            out.append(f"{pad}}} else {{")
            store_c(pad + "  ", True)
            out.append(f"{pad}}}")
        else:
            store_c(pad, masked)

    def pack(j: str, masked: bool, pad: str) -> None:
        out.append(f"{pad}scf.for %p = %c0 to %kc step %c1 {{")
        out.append(f"{pad}  %q = arith.addi %k0, %p : index")
        if rows_first:
            out.append(f"{pad}  %pp = arith.addi %bbase, %p : index")
        for v in range(vectors):
            at = j if v == 0 else f"%pj{v}"
            if v:
                out.append(f"{pad}  %pj{v} = arith.addi {j}, %o{v} : index")
            out.append(f"{pad}  %pb{v} = " + (
                f"vector.maskedload %B[%q, {at}], %mask{v}, %zero : {tb}, {mt}, {vt} "
                f"into {vt}" if masked else f"vector.load %B[%q, {at}] : {tb}, {vt}"))
            out.append(f"{pad}  vector.store %pb{v}, %buf[{'%pp' if rows_first else '%p'}, "
                       f"%o{v}] : {bt}, {vt}")
        # Not unrolled either: 10% of Intel's microkernel code, for no speed (Intel Xeon,
        # 64^3 to 512^3 within noise).
        out.append(f"{pad}}}" + _NO_UNROLL)

    def rows_of(j: str, masked: bool, pad: str, first: str, whole: str, end: str,
                used: int = vectors) -> None:
        # Rows first..end of C (whole: where the whole blocks end) for B's packed panel
        # (its first `used` vectors).
        out.append(f"{pad}scf.for %i = {first} to {whole} step %rows {{")
        block("%i", rows, j, masked, pad + "  ", used)
        out.append(f"{pad}}}" + (_NO_UNROLL if shape.block_rows else ""))
        if clamped:  # the loop above ran to the row block's end
            return
        if shape.tail_rows:  # blocks of tail_rows rows, the last one clamped
            out.extend([f"{pad}%tail = arith.constant {shape.tail_rows} : index",
                        f"{pad}%tlast = arith.subi {end}, %c1 : index",
                        f"{pad}scf.for %t = {whole} to {end} step %tail {{"])
            block("%t", shape.tail_rows, j, masked, pad + "  ", used, clamp="%tlast")
            out.append(f"{pad}}}")
            return
        sizes = _tail_blocks(rows)
        if 2 in sizes:  # the rows left after the whole blocks: two at a time, then one
            out.extend([f"{pad}%rest = arith.subi {end}, {whole} : index",
                        f"{pad}%pairs = arith.divui %rest, %c2 : index",
                        f"{pad}%paired = arith.muli %pairs, %c2 : index",
                        f"{pad}%mp = arith.addi {whole}, %paired : index",
                        f"{pad}scf.for %t = {whole} to %mp step %c2 {{"])
            block("%t", 2, j, masked, pad + "  ", used)
            out.append(f"{pad}}}")
        if 1 in sizes:
            last = "%mp" if 2 in sizes else whole
            out.append(f"{pad}%odd = arith.cmpi ult, {last}, {end} : index")
            out.append(f"{pad}scf.if %odd {{")
            block(last, 1, j, masked, pad + "  ", used)
            out.append(f"{pad}}}")

    def depth_block(pad: str) -> None:
        out.append(f"{pad}scf.for %k0 = %c0 to %k step %depth {{")
        out.append(f"{pad}  %kend = arith.addi %k0, %depth : index")
        out.append(f"{pad}  %k1 = arith.minui %kend, %k : index")
        out.append(f"{pad}  %kc = arith.subi %k1, %k0 : index")

    def panel(j: str, masked: bool, pad: str) -> None:
        masks(j, pad)
        if shape.block_rows:  # the depth and row blocks are loops around the panels'
            pack(j, masked, pad)
            rows_of(j, masked, pad, "%i0", "%iz" if clamped else "%mfb", "%iz")
            return
        depth_block(pad)
        pack(j, masked, pad + "  ")
        if shape.one_vector_last_panel and vectors > 1:
            # A last panel of one vector's columns or fewer: blocks of one vector.
            out.extend([f"{pad}  %one_vector = arith.cmpi ule, %nr, %o1 : index",
                        f"{pad}  scf.if %one_vector {{"])
            rows_of(j, masked, pad + "    ", "%c0", "%mf", "%m", used=1)
            out.append(f"{pad}  }} else {{")
            rows_of(j, masked, pad + "    ", "%c0", "%mf", "%m")
            out.append(f"{pad}  }}")
        else:
            rows_of(j, masked, pad + "  ", "%c0", "%mf", "%m")
        out.append(f"{pad}}}")

    def pack_a(pad: str) -> None:
        # Row r of block g at step p: %abuf[g * kc + p, r] (whole blocks, and with
        # clamped_rows the last one, its rows past the row block's end its last row's).
        out.extend([f"{pad}scf.for %ia = %i0 to {'%iz' if clamped else '%mfb'} step %rows {{",
                    f"{pad}  %pd = arith.subi %ia, %i0 : index",
                    f"{pad}  %pq = arith.divui %pd, %rows : index",
                    f"{pad}  %pbase = arith.muli %pq, %kc : index"])
        for r in range(rows):
            if clamped:
                out.extend([f"{pad}  %pu{r} = arith.addi %ia, %c{r} : index",
                            f"{pad}  %pi{r} = arith.minui %pu{r}, %ilast : index"])
            else:
                out.append(f"{pad}  %pi{r} = arith.addi %ia, %c{r} : index")
        out.extend([f"{pad}  scf.for %p = %c0 to %kc step %c1 {{",
                    f"{pad}    %q = arith.addi %k0, %p : index",
                    f"{pad}    %pr = arith.addi %pbase, %p : index"])
        for r in range(rows):
            out.extend([f"{pad}    %pa{r} = memref.load %A[%pi{r}, %q] : {ta}",
                        f"{pad}    memref.store %pa{r}, %abuf[%pr, %c{r}] : {at}"])
        # Not vectorized: LLVM made each row's steps scattered stores (1.6x the
        # microkernel's instructions, 0.8x the compile), for no speed (within noise).
        out.extend([f"{pad}  }}" + _NO_UNROLL, f"{pad}}}"])

    def row_block(pad: str) -> None:
        out.extend([f"{pad}%iend = arith.addi %i0, %blockrows : index",
                    f"{pad}%iz = arith.minui %iend, %m : index",
                    f"{pad}%span = arith.subi %iz, %i0 : index",
                    f"{pad}%spanq = arith.divui %span, %rows : index",
                    f"{pad}%spanf = arith.muli %spanq, %rows : index",
                    f"{pad}%mfb = arith.addi %i0, %spanf : index"])
        if clamped:
            out.append(f"{pad}%ilast = arith.subi %iz, %c1 : index")

    def serial_panels(pad: str) -> None:
        out.append(f"{pad}scf.for %j = %c0 to %np step %width {{")
        panel("%j", True, pad + "  ")
        out.append(f"{pad}}}")

    def rows_first_blocks(pad: str, all_row_blocks: bool = True) -> None:
        # In a depth block: B's panels packed (a block of columns at a time), then each
        # block of rows of C (or, not all_row_blocks, the row block of %i0 only) through
        # every panel, each row block of A packed first.
        first, last = "%c0", "%np"
        if shape.column_block:
            out.extend([f"{pad}%cbw = arith.constant {shape.column_block} : index",
                        f"{pad}scf.for %jb = %c0 to %np step %cbw {{",
                        f"{pad}  %jbend = arith.addi %jb, %cbw : index",
                        f"{pad}  %jz = arith.minui %jbend, %np : index"])
            first, last, pad = "%jb", "%jz", pad + "  "

        def panel_base(j: str, pad: str) -> None:
            # %bbase: the first row of panel j's packed rows in %buf
            out.extend([f"{pad}%jd = arith.subi {j}, {first} : index",
                        f"{pad}%jg = arith.divui %jd, %width : index",
                        f"{pad}%bbase = arith.muli %jg, %kc : index"])

        out.append(f"{pad}scf.for %jp = {first} to {last} step %width {{")
        panel_base("%jp", pad + "  ")
        masks("%jp", pad + "  ")
        pack("%jp", True, pad + "  ")
        out.append(f"{pad}}}")
        inner = pad
        if all_row_blocks:
            out.extend([f"{pad}%blockrows = arith.constant {shape.block_rows} : index",
                        f"{pad}scf.for %i0 = %c0 to %m step %blockrows {{"])
            inner = pad + "  "
            row_block(inner)

        def blocks(pad: str, a_in_place: bool) -> None:
            out.extend([f"{pad}scf.for %i = %i0 to %iz step %rows {{",
                        f"{pad}  scf.for %j = {first} to {last} step %width {{"])
            panel_base("%j", pad + "    ")
            masks("%j", pad + "    ")
            block("%i", rows, "%j", True, pad + "    ", a_in_place=a_in_place)
            out.extend([f"{pad}  }}", f"{pad}}}" + _NO_UNROLL])

        if a_in_place:
            out.append(f"{inner}scf.if %few_panels {{")
            blocks(inner + "  ", a_in_place=True)
            out.append(f"{inner}}} else {{")
            pack_a(inner + "  ")
            blocks(inner + "  ", a_in_place=False)
            out.append(f"{inner}}}")
        else:
            pack_a(inner)
            blocks(inner, a_in_place=False)
        if all_row_blocks:
            out.append(f"{pad}}}")
        if shape.column_block:
            out.append(f"{pad[:-2]}}}")

    if shape.block_rows and parallel:
        # The row blocks are the parallel loop's iterations (one parallel loop per
        # call), each thread with its own buffers, its block of A through every depth
        # block and every panel; a multiple of 4 blocks of equal size (of at most
        # block_rows rows, a multiple of rows), so that 2 or 4 threads get equal shares.
        # Rows first, where each block packs all of B's panels for itself, as few blocks
        # as give the threads equal shares, at least 4: on 2 threads, against 8 or more,
        # 0.84-0.90x the time at 1024^3 and 2048^3, 1.04-1.07x at 512^3 (Intel Xeon, two
        # runs).
        if rows_first:
            shares = threads * -(-4 // threads) if threads > 0 else 4
            out.append(f"  %shares = arith.constant {shares} : index")
        else:
            out += ["  %four = arith.constant 4 : index",
                    f"  %blockmax = arith.constant {shape.block_rows} : index",
                    "  %nb0 = arith.ceildivui %m, %blockmax : index",
                    "  %nb1 = arith.ceildivui %nb0, %four : index",
                    "  %nb2 = arith.muli %nb1, %four : index",
                    "  %nb = arith.maxui %nb2, %four : index"]
        out += [f"  %per = arith.ceildivui %m, {'%shares' if rows_first else '%nb'} : index",
                "  %perq = arith.ceildivui %per, %rows : index",
                "  %per6 = arith.muli %perq, %rows : index",
                "  %blockrows = arith.maxui %per6, %rows : index",
                "  scf.parallel (%i0) = (%c0) to (%m) step (%blockrows) {",
                f"    %buf = memref.alloc({'%brows' if rows_first else '%rows_b'}) "
                f"{{alignment = 64}} : {bt}"]
        if packed:  # room for a block's rows (a multiple of rows)
            out += ["    %ablocks = arith.divui %blockrows, %rows : index",
                    "    %arows = arith.muli %ablocks, %rows_b : index",
                    f"    %abuf = memref.alloc(%arows) {{alignment = 64}} : {at}"]
        row_block("    ")
        depth_block("    ")
        if rows_first:  # each row block packs B's panels for itself
            rows_first_blocks("      ", all_row_blocks=False)
        else:
            if packed:
                pack_a("      ")
            serial_panels("      ")
        out += ["    }", f"    memref.dealloc %buf : {bt}"]
        if packed:
            out.append(f"    memref.dealloc %abuf : {at}")
        out += ["    scf.reduce", "  }"]
    elif rows_first:
        depth_block("  ")
        rows_first_blocks("    ")
        out += ["  }", f"  memref.dealloc %buf : {bt}", f"  memref.dealloc %abuf : {at}"]
    elif shape.block_rows:
        # Blocks of A (block_rows by depth, in L2) stay in cache while every panel of B
        # goes by: with the panels outermost, all of A went through L2 for each panel.
        depth_block("  ")
        out += [f"    %blockrows = arith.constant {shape.block_rows} : index",
                "    scf.for %i0 = %c0 to %m step %blockrows {"]
        row_block("      ")
        if packed:
            pack_a("      ")
        serial_panels("      ")
        out += ["    }", "  }", f"  memref.dealloc %buf : {bt}"]
        if packed:
            out.append(f"  memref.dealloc %abuf : {at}")
    elif parallel:
        _parallel_panels(out, panel, bt)
    else:
        serial_panels("  ")
        out.append(f"  memref.dealloc %buf : {bt}")


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
