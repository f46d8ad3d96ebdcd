"""The register-block shapes of the matmul microkernels
(:mod:`pymlirjit.codegen.microkernels`): what each shape is (:class:`MicrokernelShape`),
the shape of each CPU family (:data:`SHAPES`, with what each choice was measured
against) and the host's (:func:`host_shape`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["LANES", "SHAPES", "MicrokernelShape", "host_family", "host_shape", "shape_for"]

#: 512-bit vectors: lanes per element type.
LANES = {"f32": 16, "f64": 8}
_BYTES = {"f32": 4, "f64": 8}


@dataclass(frozen=True)
class MicrokernelShape:
    """A register block of ``rows`` rows of C by ``vectors`` vectors of ``bits`` bits
    (512: AVX-512, 256: AVX2), over ``depth`` steps of the depth at a time (B's panel,
    ``depth`` rows of ``vectors`` vectors, copied into a contiguous buffer first). One
    that no microkernel can be generated in is a ``ValueError`` when made."""

    rows: int
    vectors: int
    depth: int
    bits: int = 512
    #: Rows of A per block (0: all of them), a loop around the panels: see microkernel.
    block_rows: int = 0
    #: With ``block_rows``: whether each block of A is first copied into a contiguous
    #: buffer, each whole block of ``rows`` rows one after the other, row-interleaved.
    pack_a: bool = False
    #: Whether each whole block of C prefetches the rows of the next one (whose loads
    #: then find them in cache: C is read once per panel and depth block).
    prefetch_c: bool = False
    #: Whether a whole panel's blocks store C unmasked (the last, partial panel masked):
    #: AVX2's masked stores (``vmaskmovps``/``vmaskmovpd`` to memory) are slow on AMD.
    unmasked_stores: bool = False
    #: With ``pack_a``: whether the rows after a row block's last whole block of ``rows``
    #: go through one more such block whose rows past the end repeat the block's last
    #: row (computed and stored again, the same values), instead of blocks of two rows
    #: and one: less code, and no slower blocks.
    clamped_rows: bool = False
    #: With ``pack_a`` (serial): each depth block packs all of B's panels once, and
    #: each block of ``rows`` rows of C then goes along its row through every panel
    #: (C's memory in order), instead of each panel going down its rows.
    rows_first: bool = False
    #: With ``rows_first``: B's panels are packed this many columns at a time (0: all of
    #: them), which bounds the buffer (depth by these columns).
    column_block: int = 0
    #: The depth of f64 matmuls' blocks, if not ``depth`` (0): half of it keeps the
    #: packed blocks of f32's bytes.
    f64_depth: int = 0
    #: With ``rows_first``: serial calls whose B has fewer than this many panels (0:
    #: none), and whose A's rows are contiguous, read A in place instead of packing it
    #: first: each block of A's rows goes through few panels, and packing it cost more
    #: than it saved.
    a_in_place_below: int = 0
    #: With ``rows_first``: parallel calls too, each thread's row block packing B's
    #: panels for itself (else they go panel by panel).
    parallel_rows_first: bool = False
    #: Serial calls whose B has fewer than ``narrow_below`` panels, or whose C has fewer
    #: than two blocks of ``rows`` rows, run this shape's code instead (of the same
    #: rows, vectors and bits): there, packing A costs more than it saves, or a clamped
    #: block of ``rows`` rows computes rows again.
    narrow: MicrokernelShape | None = None
    narrow_below: int = 0
    #: Without ``block_rows``: whether a last panel of at most one vector's columns
    #: goes through blocks of one vector (else all ``vectors``, the others' lanes
    #: masked off: FMAs for nothing).
    one_vector_last_panel: bool = False
    #: Without ``clamped_rows``: the rows after the last whole block of ``rows`` go
    #: through blocks of this many rows, the last one clamped (its rows past C's end
    #: repeat C's last row), instead of blocks of two rows and one (0).
    tail_rows: int = 0

    def __post_init__(self) -> None:
        if self.rows_first and not (self.block_rows and self.pack_a and self.clamped_rows):
            raise ValueError("rows_first needs clamped_rows")
        if self.a_in_place_below and not self.rows_first:
            raise ValueError("a_in_place_below needs rows_first")
        if self.tail_rows and not 1 < self.tail_rows < self.rows:
            raise ValueError("tail_rows is more than 1 and fewer than rows")
        narrow = self.narrow
        if narrow is not None and ((narrow.rows, narrow.vectors, narrow.bits)
                                   != (self.rows, self.vectors, self.bits)):
            raise ValueError("a narrow shape has the rows, vectors and bits of its shape's")

    def depth_of(self, element: str) -> int:
        """Steps of the depth per block for elements of type ``element``."""
        return self.f64_depth if element == "f64" and self.f64_depth else self.depth

    def lanes(self, element: str) -> int:
        """Lanes of a vector of elements of type ``element`` (``f32``, ``f64``)."""
        return self.bits // (8 * _BYTES[element])

    def columns(self, element: str) -> int:
        """Columns of a panel for elements of type ``element`` (``f32``, ``f64``)."""
        return self.vectors * self.lanes(element)

    def registers(self) -> int:
        """Vector registers the block's loop needs: its accumulators, a row of B's
        vectors and a broadcast element of A."""
        return self.rows * self.vectors + self.vectors + 1


#: Shapes by CPU family. ``zen``: AMD Zen 4 runs AVX-512 on two 256-bit pipes; 8x2
#: (16 accumulators), B packed 512 deep (a 64 KB buffer: against B read in place,
#: 0.74-0.88x the time at 1024^3 and 2048^3, the same at 512^3;
#: benchmarks/results/2026-12-04-amd-epyc-zen4.md).
#: ``intel``: two 512-bit FMA ports of 4 cycles' latency want at least 8 independent
#: accumulators, and more FMAs per load (12x2: 24 accumulators, 14 loads per 24 FMAs).
#: Since 2026-12-07 (third session) it goes rows first, as the AVX2 shapes do: A packed
#: in blocks of 192 rows, B's panels 1024 columns at a time, 256 deep in f32 and 128 in
#: f64 (1 MB of B either way, half an L2 of 2 MB); parallel calls too, in as many row
#: blocks as give the threads equal shares (at least 4). 512^3 to 2048^3 went from
#: 0.98-1.32x numpy's time to 0.92-1.03x (f32) and from 1.08-1.49x to 0.86-1.06x (f64),
#: depths of 64 from 1.11-1.30x to 0.66-0.85x, and 1024^3 with parallel=True from 1.5-1.7x
#: as fast as serial calls to 1.75-1.87x. Bs of fewer than 16 panels (512 f32 columns,
#: 256 f64) and Cs of fewer than 24 rows keep the old code, B packed panel by panel, A
#: read in place: packing A cost them 10-35% (64^3, 100 x 2000 x 100 f32;
#: benchmarks/results/2026-12-07-intel-rows-first.md). Their last panel, if one vector
#: wide or less, goes through blocks of one vector: f32 1000 x 1000 x 100 took 0.93x the
#: time, 1000 x 1000 x 40 0.80x (the first compile of a process 1.17x). Their last rows
#: (after the whole blocks of 12) go through clamped blocks of 4 rows, where blocks of 2
#: and 1 took 1.03-1.21x the time on 16-23 x 2000 x 2000 and 1.07x on 3 x 500 x 500, for
#: the same code size (benchmarks/results/2026-12-07-microkernels-alone.md).
#: ``avx2``: CPUs without AVX-512 (16 ymm registers: the 512-bit shapes' 16-24
#: accumulators, each two ymm registers, spilled; 1.6-1.9x numpy's time on a Zen 2):
#: 6x2 ymm (12 accumulators, 2 B vectors, 1 broadcast), A in blocks of 192 rows by 256
#: (packed: 384 KB of f64, within a Zen 2's 512 KB L2) that stay in cache while every
#: panel of B goes by; 1.03-1.19x numpy where 8x2 was 1.6-1.9x, against 6x2 B-panels-only
#: 0.82-0.87x the time at 1024^3 and 2048^3 (benchmarks/results/2026-12-05-avx2-matmul.md).
#: ``zen3``: the same, B packed 512 deep: a Zen 3 (two full-width 256-bit FMA pipes,
#: where a Zen 2 splits each ymm FMA in two) then loads and stores each block of C half
#: as often; 0.84-0.99x the time of ``avx2``'s shape from 512^3 to 2048^3. Blocks of 288
#: or 384 rows of A were as fast serially, but split 1024 rows unevenly between two
#: threads. Each block of C prefetches the next: f32 matmuls took 0.84-0.97x the time
#: without (batch matmuls of 128^3 matrices, whose C comes from L3, and depths of 64
#: gain most), f64 0.85-0.88x on those and -4%..+5% elsewhere, within noise
#: (benchmarks/results/2026-12-06-zen3-matmul.md). Both AVX2 shapes store whole panels'
#: C unmasked: on a Zen 3, depths of 64 took 0.78-0.85x the time, batches of 128^3
#: matrices 0.87-0.90x, square sizes 0.95-1.04x (unmasked loads gained nothing more).
#: And a row block's last rows go through one more 6-row block, clamped, not blocks of
#: 2 and 1: a matmul module compiles in 0.85x the time, at the same speed or better
#: (benchmarks/results/2026-12-06-masked-stores.md).
#: Serially, both AVX2 shapes pack B's panels once per depth block, 1024 columns at a
#: time, and walk C along its rows, a block of 6 rows through every panel, where each
#: panel went down all of a row block's rows, C's rows a row's length apart: on a Zen 3,
#: depths of 64 took 0.75-0.85x the time (f32 1.18-1.25x numpy's to 0.89-0.96x), 2048^3
#: 0.85-0.89x, other square sizes 0.89-0.98x
#: (benchmarks/results/2026-12-07-microkernels-linked.md).
#: And serially, both read A in place, not packed, when B has fewer than 16 panels (f32:
#: 256 columns, f64 128) and A's rows are contiguous (not a transposed A): on a Zen 3,
#: f32 1000 x 1000 x 40 went from 1.29-1.41x numpy's time to 0.97-0.99x, 1000 x 1000 x
#: 100 from 1.11-1.19x to 0.93-0.98x, 64 x 2048 x 64 from 1.04-1.14x to 0.93-0.96x,
#: batches of 32 matrices of 48^3 to 128^3 took 0.78-1.00x the time; Intel's narrow code
#: for these Bs (blocks of one vector, tail blocks of 4 rows) was about as fast, but a
#: machine's first matmul module compiled in 2.6x the naive lowering's time where
#: reading A in place took 1.54-1.90x (1.14-1.51x before)
#: (benchmarks/results/2026-12-07-zen3-a-in-place.md). ``avx2``'s was measured only on
#: that Zen 3, with the same gains (f32 1.10-1.39x numpy to 0.93-1.05x, f64 0.92-1.10x
#: to 0.83-1.04x). ``zen3``'s parallel calls go rows first too, each thread's row block
#: packing B's panels for itself: 1000^3 to 2048^3 took 0.90-1.00x the time (1.74-1.93x
#: serial at 1024^3 and 2048^3, where panel by panel was 1.64-1.81x).
SHAPES = {"zen": MicrokernelShape(8, 2, 512),
          "intel": MicrokernelShape(12, 2, 256, block_rows=192, pack_a=True, clamped_rows=True,
                                    rows_first=True, parallel_rows_first=True,
                                    column_block=1024, f64_depth=128,
                                    narrow=MicrokernelShape(12, 2, 256,
                                                            one_vector_last_panel=True,
                                                            tail_rows=4),
                                    narrow_below=16),
          "avx2": MicrokernelShape(6, 2, 256, bits=256, block_rows=192, pack_a=True,
                                   unmasked_stores=True, clamped_rows=True, rows_first=True,
                                   column_block=1024, a_in_place_below=16),
          "zen3": MicrokernelShape(6, 2, 512, bits=256, block_rows=192, pack_a=True,
                                   prefetch_c=True, unmasked_stores=True, clamped_rows=True,
                                   rows_first=True, parallel_rows_first=True,
                                   column_block=1024, a_in_place_below=16)}


def host_shape() -> MicrokernelShape:
    """The shape of :data:`SHAPES` for the host's CPU (:func:`host_family`)."""
    return SHAPES[host_family()]


@functools.cache
def host_family() -> str:
    """The key of :data:`SHAPES` for the host's CPU (:func:`shape_for`, given LLVM's
    name and features of the host CPU); ``avx2`` if LLVM cannot tell them."""
    try:
        import llvmlite.binding as llvm

        name = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
    except Exception:  # any failure: the shape that suits every x86-64 CPU with AVX2
        return "avx2"
    return shape_for(name, features)


def shape_for(cpu_name: str, features: str) -> str:
    """The key of :data:`SHAPES` for a CPU of LLVM's name ``cpu_name`` and features
    ``features`` (LLVM's ``+avx2,-avx512f,...``): without ``+avx512f``, ``zen3`` for a
    Zen 3 (``znver3``) and ``avx2`` for the others; else ``zen`` for AMD's CPUs
    (``znver*``) and CPUs LLVM cannot name, ``intel`` for the others."""
    if "+avx512f" not in features.split(","):
        return "zen3" if cpu_name == "znver3" else "avx2"
    return "zen" if cpu_name.startswith("znver") or cpu_name == "generic" else "intel"
