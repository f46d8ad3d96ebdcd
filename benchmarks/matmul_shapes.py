"""``python -m benchmarks.matmul_shapes``: the ``opt_level=3`` ``linalg.matmul`` (and
``linalg.batch_matmul``) microkernel in several register-block shapes
(:data:`pymlirjit.codegen.microkernelshapes.SHAPES` and candidates), against numpy, in one
process: each round times every shape and numpy once, in turn (interleaved, so that load
from other processes falls on all of them alike); medians of the rounds.

Run it against one OpenBLAS thread::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.matmul_shapes [--sizes 512,1024]
        [--shapes 8x2x512@512,6x2x256@256/192a,6x2x256@256/192a:p] [--rounds 7]
        [--batch 32] [--rect --sizes 1000x300x2000]

A shape is ``ROWSxVECTORSxDEPTH@BITS`` (:class:`MicrokernelShape`), then ``/BLOCK_ROWS``
(and ``a`` if A is packed, ``c`` if C's next block is prefetched, ``u`` if whole panels'
C is stored unmasked, ``t`` if a row block's last rows go through one clamped block, ``r``
if C is walked along its rows through all of B's panels, ``R`` if parallel calls are too,
``h`` if a last panel of one vector goes through blocks of one vector) if A goes in
blocks, then ``%COLUMNS`` (B packed that many columns at a time), ``^DEPTH`` (f64's
depth), ``+TAIL`` (the last rows in clamped blocks of that many rows), ``&PANELS`` (A
read in place, not packed, for Bs of fewer panels),
``~NARROW*PANELS`` (the shape of Bs of fewer panels), then ``:p`` for
``parallel=True``; ``host`` is the host's own shape (:func:`host_shape`), as the default
options use it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen import microkernelshapes
from pymlirjit.codegen.microkernelshapes import MicrokernelShape, host_family, host_shape

MATMUL = """
func.func @mm(%a: memref<?x?xT>, %b: memref<?x?xT>, %c: memref<?x?xT>) {
  linalg.matmul ins(%a, %b : memref<?x?xT>, memref<?x?xT>) outs(%c : memref<?x?xT>)
  return
}
"""

BATCH = """
func.func @mm(%a: memref<?x?x?xT>, %b: memref<?x?x?xT>, %c: memref<?x?x?xT>) {
  linalg.batch_matmul ins(%a, %b : memref<?x?x?xT>, memref<?x?x?xT>)
                      outs(%c : memref<?x?x?xT>)
  return
}
"""

DTYPES = {"f32": np.float32, "f64": np.float64}


def parse_shape(text: str) -> MicrokernelShape:
    """``ROWSxVECTORSxDEPTH@BITS/BLOCK_ROWS[flags][%COLUMNS][^F64_DEPTH][+TAIL][&PANELS][~NARROW*PANELS]``
    (``6x2x256@256/96a``; the flags and the rest: the module's docstring) as a shape."""
    text, _, narrow = text.partition("~")
    if narrow:  # SHAPE~NARROW*PANELS
        narrow, _, below = narrow.partition("*")
        return dataclasses.replace(parse_shape(text), narrow=parse_shape(narrow),
                                   narrow_below=int(below))
    text, _, in_place = text.partition("&")
    text, _, tail_rows = text.partition("+")
    text, _, f64_depth = text.partition("^")
    text, _, column_block = text.partition("%")
    text, _, block_rows = text.partition("/")
    flags = block_rows.lstrip("0123456789")
    block_rows = block_rows[:len(block_rows) - len(flags)]
    block, _, bits = text.partition("@")
    rows, vectors, depth = (int(part) for part in block.split("x"))
    return MicrokernelShape(rows, vectors, depth, int(bits or 512), int(block_rows or 0),
                            pack_a="a" in flags, prefetch_c="c" in flags,
                            unmasked_stores="u" in flags, clamped_rows="t" in flags,
                            rows_first="r" in flags, parallel_rows_first="R" in flags,
                            one_vector_last_panel="h" in flags,
                            column_block=int(column_block or 0),
                            f64_depth=int(f64_depth or 0), tail_rows=int(tail_rows or 0),
                            a_in_place_below=int(in_place or 0))


def kernel(shape: MicrokernelShape, element: str, batch: bool,
           parallel: bool) -> Callable[..., Any]:
    """The matmul (or batch matmul) compiled with the microkernel of ``shape`` (made the
    host's entry of ``SHAPES`` while it compiles; a fresh session: no cache)."""
    key = host_family()
    saved = microkernelshapes.SHAPES[key]
    microkernelshapes.SHAPES[key] = shape
    try:
        source = (BATCH if batch else MATMUL).replace("T", element)
        mm = mlir_kernel(source=source, name="mm", opt_level=3, parallel=parallel,
                         session=Session())(lambda a, b, c: None)
        dims = (2, 3, 3) if batch else (3, 3)
        mm(*(np.zeros(dims, DTYPES[element]) for _ in range(3)))
    finally:
        microkernelshapes.SHAPES[key] = saved
    assert "__pymlirjit_matmul" in mm.lowered_mlir, "no microkernel"  # not the schedule
    return mm


def measure(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each of ``calls``, timed in turn in each round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    """Print a markdown table: per size and type, each shape's median and its ratio
    to numpy's."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="64,512,1000,1023,1024,2048")
    parser.add_argument("--dtypes", default="f32,f64")
    parser.add_argument("--shapes", default="8x2x512@512,6x2x256@256")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=0,
                        help="batch_matmul of this many matrices (0: matmul)")
    parser.add_argument("--rect", action="store_true",
                        help="sizes are MxKxN triples separated by commas")
    args = parser.parse_args()
    names = args.shapes.split(",")
    shapes = [host_shape() if text.removesuffix(":p") == "host"
              else parse_shape(text.removesuffix(":p")) for text in names]
    print(f"host entry {host_family()}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, load {os.getloadavg()}")
    print("| case | " + " | ".join(f"{n} ms (x numpy)" for n in names) + " | numpy ms |")
    print("|---" * (len(names) + 2) + "|")
    rng = np.random.default_rng(0)
    for element in args.dtypes.split(","):
        kernels = [kernel(shape, element, args.batch > 0, name.endswith(":p"))
                   for shape, name in zip(shapes, names, strict=True)]
        for size in args.sizes.split(","):
            m, k, n = ((int(p) for p in size.split("x")) if args.rect
                       else (int(size),) * 3)
            lead = (args.batch,) if args.batch else ()
            a = rng.uniform(-1, 1, (*lead, m, k)).astype(DTYPES[element])
            b = rng.uniform(-1, 1, (*lead, k, n)).astype(DTYPES[element])
            cs = [np.zeros((*lead, m, n), DTYPES[element]) for _ in range(len(kernels) + 1)]
            calls: dict[str, Callable[[], Any]] = {
                name: partial(f, a, b, c) for name, f, c in zip(names, kernels, cs, strict=False)}
            calls["numpy"] = partial(np.matmul, a, b, out=cs[-1])
            rounds = max(3, min(args.rounds, int(args.rounds * 512 ** 3 / (m * n * k))))
            medians = measure(calls, rounds)
            for name, c in zip(names, cs, strict=False):
                runs = rounds + 1
                np.testing.assert_allclose(c / runs, cs[-1], rtol=1e-3, atol=1e-3 * k,
                                           err_msg=name)
            ref = medians["numpy"]
            label = ("batch " if args.batch else "") + f"{element} {size}"
            cells = [f"{medians[n] * 1e3:.2f} ({medians[n] / ref:.2f})" for n in names]
            print(f"| {label} | " + " | ".join(cells) + f" | {ref * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
