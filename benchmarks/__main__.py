"""``python -m benchmarks [--quick] [--repeat N] [--only a,c] [--cpu-time]``: run the
benchmark cases and print, per case, a table of medians (ns per call), ratios to the
baseline measured in the same run, and the design targets met or missed."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Sequence

# numpy's BLAS runs on one thread, so the serial kernels (case f) compare like with like
# (OPENBLAS_NUM_THREADS=2 python -m benchmarks to change it). OpenBLAS reads this once,
# when numpy is first imported, so it is set before the cases import numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ._timing import Config, Target, format_case, machine_info

#: Case letter -> module implementing ``run(config) -> CaseResult``.
CASES: dict[str, str] = {
    "a": "scalar_callback",
    "b": "memref_callback",
    "c": "scalar_kernel",
    "d": "memref_kernel",
    "e": "compile_time",
    "f": "kernels",
    "g": "call_shapes",
    "h": "ufuncs",
    "i": "sparse",
    "m": "checked_code",
}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and few repeats: a smoke test, not a measurement")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repeats per measurement (default 7, or 3 with --quick)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time case f's serial kernels in thread CPU time (on a busy "
                             "machine: time spent descheduled is not counted)")
    parser.add_argument("--only", default=",".join(CASES),
                        help="comma-separated case letters to run (default: all)")
    args = parser.parse_args(argv)
    args.only = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in args.only if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected cases; 0 if every case ran (targets missed are reported, not
    failures), 1 if one crashed."""
    args = _parse(argv)
    repeat = args.repeat if args.repeat is not None else (3 if args.quick else 7)
    config = Config(quick=args.quick, repeat=repeat, cpu_time=args.cpu_time)
    print(machine_info())
    print(f"mode:      {'quick (smoke test; numbers are not meaningful)' if args.quick else 'full'}"
          f", {repeat} repeats, medians; ratios are to a baseline measured in this run"
          + ("; case f's serial rows in thread CPU time" if args.cpu_time else ""))
    print()
    failed = []
    summary: list[tuple[str, Target]] = []
    started = time.perf_counter()
    for letter in args.only:
        try:
            module = importlib.import_module(f".{CASES[letter]}", __package__)
            result = module.run(config)
        except Exception:
            failed.append(letter)
            print(f"{letter}. FAILED")
            traceback.print_exc()
            print()
            continue
        print(format_case(result))
        print(flush=True)
        summary += [(letter, target) for target in result.targets]
    print("targets (design.md):")
    for letter, target in summary:
        status = {True: "MET", False: "MISSED", None: "info"}[target.met]
        detail = f" ({target.detail})" if target.detail else ""
        print(f"  {letter}: {target.text}: {status}{detail}")
    print(f"total time {time.perf_counter() - started:.1f} s")
    if failed:
        print(f"cases that crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
