"""The ``pymlirjit`` command's arguments: the parser of every subcommand, and
:func:`parse_args`, which lets ``run`` take its ARGs before, between or after options
(negative numbers included) and mlir-runner's spellings (``--O3``, LLVM's own options).
What each command does with them is :mod:`pymlirjit.cli.commands`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..codegen.checks import ERROR_MODELS
from ..lowering.llvmoptions import split_runner_options
from .check import add_check_parser

__all__ = ["PROG", "build_parser", "parse_args"]

#: The command's name, as argparse and the error lines print it.
PROG = "pymlirjit"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from .._version import __version__

    parts = [f"pymlirjit {__version__}"]
    for package in ("xtc-mlir-python-bindings", "llvmlite", "numpy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true",
                        help="on error, also print the Python traceback")
    return common


def _add_run_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser(
        "run", parents=[common], help="JIT-compile an MLIR file and call its entry function",
        description="JIT-compile FILE.mlir, call its entry function with ARGs parsed by its "
                    "MLIR signature (numbers and true/false for scalars, .npy files for "
                    "memrefs and tensors) and print the results.")
    run.add_argument("file", metavar="FILE.mlir", help="the MLIR module to run")
    run.add_argument("args", nargs="*", metavar="ARG", help="arguments of the entry function")
    run.add_argument("-e", "--entry", default="main", metavar="NAME",
                     help="the function to call (default: main)")
    run.add_argument("--callbacks", action="append", default=[], metavar="PATH_OR_MODULE",
                     help="a .py file or module whose @callback functions are linked "
                          "(repeatable)")
    run.add_argument("-entry-point-result", "--entry-point-result", dest="entry_result",
                     choices=("void", "i32", "i64", "f32"), metavar="TYPE",
                     help="mlir-runner's check of the entry's result type: void, i32, i64 "
                          "or f32 (printed as mlir-runner prints it)")
    run.add_argument("--shared-libs", "-shared-libs", action="append", default=[], metavar="LIB",
                     help="a shared library to link: a path or an MLIR runtime library name "
                          "such as libmlir_c_runner_utils.so (repeatable, or comma-separated)")
    run.add_argument("--pipeline", metavar="STR",
                     help="the pass pipeline lowering to the LLVM dialect (default: "
                          "pymlirjit's)")
    run.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2,
                     metavar="N", help="LLVM optimization level, 0 to 3 (default: 2; "
                                       "-O0 to -O3 or --O0 to --O3 as in mlir-runner)")
    run.add_argument("--fastmath", action="store_true",
                     help="fast-math flags on float ops (reductions vectorize)")
    run.add_argument("-dump-object-file", "--dump-object-file", action="store_true",
                     help="as mlir-runner: write the JIT-compiled object code to "
                          "-object-filename (default: FILE.mlir.o)")
    run.add_argument("-object-filename", "--object-filename", default="", metavar="FILE.o",
                     help="where -dump-object-file writes")
    run.add_argument("--parallel", action="store_true",
                     help="parallel loops on several threads (PYMLIRJIT_NUM_THREADS caps them)")
    run.add_argument("--boundscheck", action="store_true",
                     help="out-of-bounds memref accesses raise IndexError")
    run.add_argument("--error-model", choices=ERROR_MODELS, default="python",
                     help="integer division by zero: an error (python, the default) or 0 "
                          "(numpy)")
    run.add_argument("-o", "--output", action="append", default=[], metavar="FILE.npy",
                     help="save the array result instead of printing it (repeat for "
                          "several array results)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="print no result (errors still go to stderr)")
    run.add_argument("--time", action="store_true",
                     help="report compile (parse+lower+JIT) and run times on stderr")
    run.add_argument("--cache", action="store_true",
                     help="keep the machine code in the disk cache ($PYMLIRJIT_CACHE_DIR, "
                          "else ~/.cache/pymlirjit): later runs of an unchanged file load "
                          "it instead of compiling")


def _add_lower_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    lower = commands.add_parser(
        "lower", parents=[common], help="print an MLIR file lowered to the LLVM dialect",
        description="Print FILE.mlir after the pass pipeline, in the LLVM dialect "
                    "(the input mlir-runner and mlir-translate expect).")
    lower.add_argument("file", metavar="FILE.mlir", help="the MLIR module to lower")
    lower.add_argument("--pipeline", metavar="STR",
                       help="the pass pipeline (default: pymlirjit's)")
    lower.add_argument("--emit", choices=("mlir", "llvm", "asm"), default="mlir",
                       help="print the LLVM dialect (mlir, the default), the LLVM IR after "
                            "LLVM's optimizations (llvm) or the host's assembly (asm)")
    lower.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2,
                       metavar="N", help="LLVM optimization level for --emit=llvm|asm, 0 to 3 "
                                         "(default: 2)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pymlirjit`` command."""
    parser = argparse.ArgumentParser(  # raw text: argparse would wrap the --version line
        prog=PROG, description="Run MLIR from Python and call Python from MLIR.",
        formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--version", action="version", version=_versions())
    commands = parser.add_subparsers(dest="command", required=True)
    common = _common_options()
    _add_run_parser(commands, common)
    _add_lower_parser(commands, common)
    add_check_parser(commands, common)
    commands.add_parser("demo", parents=[common],
                        help="run the callback round trip (MLIR calling Python)")
    cache = commands.add_parser(
        "cache", parents=[common],
        help="show (or --clear) the disk cache of `run --cache`; --warm the microkernels",
        description="Show the disk cache that `pymlirjit run --cache` and "
                    "mlir_kernel(cache=True) use ($PYMLIRJIT_CACHE_DIR, else "
                    "~/.cache/pymlirjit): its folder, modules and size; then the matmul "
                    "microkernels kept on disk ($PYMLIRJIT_MICROKERNEL_CACHE, else its "
                    "microkernels folder; 0: none kept).")
    action = cache.add_mutually_exclusive_group()
    action.add_argument("--clear", action="store_true",
                        help="delete the cached modules and microkernels (only files the "
                             "caches wrote)")
    action.add_argument("--warm", action="store_true",
                        help="compile this machine's matmul microkernels (f32 and f64, "
                             "opt levels 2 and 3) into their folder now, so that no later "
                             "process compiles them (for an image or an install script)")
    return parser


def _looks_like_number(text: str) -> bool:
    for parse in (complex, lambda s: int(s, 0)):
        try:
            parse(text)
        except ValueError:
            continue
        return True
    return False


def _claim_leftover_arguments(args: argparse.Namespace, leftovers: Sequence[str]) -> list[str]:
    """Append to ``args.args`` the ARGs argparse left over: those after an option or
    after ``--``, and negative numbers such as ``-1e5``. Return the unknown options."""
    unknown: list[str] = []
    after_dashes = False
    for item in leftovers:
        if item == "--" and not after_dashes:
            after_dashes = True
        elif after_dashes or not item.startswith("-") or _looks_like_number(item):
            args.args.append(item)
        else:
            unknown.append(item)
    return unknown


def _runner_spellings(argv: Sequence[str]) -> list[str]:
    """``argv`` with mlir-runner's double-dash ``--O0``..``--O3`` (LLVM's option parser
    takes one dash or two) spelled ``-O0``..``-O3``; ARGs after ``--`` are left alone."""
    spelled: list[str] = []
    for i, item in enumerate(argv):
        if item == "--":
            return spelled + list(argv[i:])
        spelled.append(item[1:] if re.fullmatch(r"--O[0-3]", item) else item)
    return spelled


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``run`` takes its ARGs before, between or after options."""
    parser = build_parser()
    words = _runner_spellings(sys.argv[1:] if argv is None else argv)
    llvm: list[str] = []
    if words[:1] == ["run"]:  # mlir-runner takes LLVM's options (-enable-matrix) as well
        run = next(a.choices["run"] for a in parser._actions
                   if isinstance(a, argparse._SubParsersAction))
        words, llvm = split_runner_options(words, run._option_string_actions)
    args, leftovers = parser.parse_known_args(words)
    if args.command == "run":
        leftovers = _claim_leftover_arguments(args, leftovers)
        args.llvm_options = llvm
    if leftovers:
        parser.error(f"unrecognized arguments: {' '.join(leftovers)}")
    return args
