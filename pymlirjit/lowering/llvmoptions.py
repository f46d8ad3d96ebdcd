"""LLVM's own command-line options (``-enable-matrix``, ``-matrix-default-layout=...``),
set in the LLVM that MLIR's JIT uses, as mlir-runner takes them.

LLVM keeps these options process-wide and parses them with ``LLVMParseCommandLineOptions``,
which ignores an unknown option, reports a bad value on stderr only, and ends the process
on ``-help`` and the like. So each set of options is first tried in a child process
(which also lists the options LLVM knows): a mistake raises ``ValueError`` here instead.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence

from ..boundary import ffi

__all__ = ["enable_matrix_lowering", "llvm_options_set", "set_llvm_options", "split_runner_options"]

#: Option name -> the argument that set it, for the options set in this process.
_set: dict[str, str] = {}
_lock = threading.Lock()

# Parses the options (a bad value is reported on stderr), then lists every option LLVM
# knows on stdout (and exits, as -help-list-hidden does).
_CHILD = """if True:
    import ctypes, sys
    parse = ctypes.CDLL(sys.argv[1]).LLVMParseCommandLineOptions
    for words in (sys.argv[2:], sys.argv[2:3] + ["-help-list-hidden"]):
        words = [w.encode() for w in words]
        parse(len(words), (ctypes.c_char_p * len(words))(*words), None)
        sys.stderr.flush()
"""
_LISTED = re.compile(r"^\s+--?([\w.-]+)", re.MULTILINE)
#: Options that print something and end the process.
_EXITING = re.compile(r"help|print-options|print-all-options|version")


def _name(option: str) -> str:
    return option.lstrip("-").split("=", 1)[0]


def _parse_here(options: Sequence[str]) -> None:
    words = [b"pymlirjit", *(o.encode() for o in options)]
    parse = ffi.llvm_parse_command_line_options()
    parse(len(words), (ctypes.c_char_p * len(words))(*words), None)


def set_llvm_options(options: Iterable[str]) -> None:
    """Set LLVM command-line ``options`` (each spelled as on mlir-runner's command line,
    such as ``-enable-matrix`` or ``-matrix-default-layout=column-major``) for the code
    JIT-compiled from now on in this process.

    Raises ``ValueError`` naming the option when LLVM does not know it, or when it was
    already set here to something else (LLVM's options are set once per process). An
    option already set the same way is skipped.
    """
    with _lock:
        new: list[str] = []
        for option in options:
            if not option.startswith("-") or not _name(option):
                raise ValueError(f"LLVM option {option!r}: expected -NAME or -NAME=VALUE")
            earlier = _set.get(_name(option))
            if earlier is None and option not in new:
                new.append(option)
            elif earlier is not None and earlier.lstrip("-") != option.lstrip("-"):
                raise ValueError(f"LLVM option {option!r}: already set to {earlier!r} in this "
                                 f"process (LLVM's options are set once per process)")
        if not new:
            return
        targets = [o for o in new if _name(o) in ("mattr", "march", "mcpu")]
        if targets:
            raise ValueError(f"{targets[0]!r} is mlir-runner's choice of the JIT's target, not "
                             f"an LLVM option: pymlirjit compiles for this CPU with all its "
                             f"features; drop the option")
        exiting = [o for o in new if _EXITING.match(_name(o))]
        if exiting:
            raise ValueError(f"LLVM option {exiting[0]!r} prints and ends the process: "
                             f"not accepted here")
        tried = subprocess.run([sys.executable, "-c", _CHILD, ffi.mlir_capi_path(),
                                "pymlirjit", *new], capture_output=True, text=True,
                               check=False)
        known = set(_LISTED.findall(tried.stdout))
        unknown = [o for o in new if _name(o) not in known]
        if unknown or not known:
            raise ValueError(f"unknown LLVM option {unknown[0] if unknown else new[0]!r} "
                             f"(mlir-runner takes LLVM's options; this LLVM has no such one)")
        if tried.stderr.strip():
            first = tried.stderr.strip().splitlines()[0].removeprefix("pymlirjit: ")
            raise ValueError(f"LLVM rejects the options {' '.join(new)}: {first}")
        _parse_here(new)
        _set.update((_name(option), option) for option in new)


def llvm_options_set() -> dict[str, str]:
    """The LLVM options set in this process, by name."""
    with _lock:
        return dict(_set)


def enable_matrix_lowering() -> None:
    """Have LLVM lower its matrix intrinsics (``llvm.intr.matrix.*``), as mlir-runner's
    ``-enable-matrix`` does: without it LLVM's code generator ends the process on them.
    Lowering them changes nothing for code without them."""
    with _lock:
        if "enable-matrix" not in _set:
            _parse_here(["-enable-matrix"])
            _set["enable-matrix"] = "-enable-matrix"


_SINGLE_DASH_LONG = re.compile(r"-[A-Za-z][\w-]+(=.*)?", re.DOTALL)
_NUMBER = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE)


def split_runner_options(argv: Sequence[str], known: Iterable[str],
                         ) -> tuple[list[str], list[str]]:
    """(``argv`` without LLVM's options, LLVM's options): as mlir-runner's command line
    takes LLVM's options beside its own, every single-dash long option (``-NAME`` or
    ``-NAME=VALUE``, not a negative number) whose name is not in ``known`` is LLVM's.
    Nothing after ``--`` is looked at."""
    known = set(known)
    rest: list[str] = []
    options: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":
            return rest + list(argv[i:]), options
        name = word.split("=", 1)[0]
        if (_SINGLE_DASH_LONG.fullmatch(word) and not _NUMBER.match(word)
                and name not in known and not re.fullmatch(r"-O\d", name)):
            options.append(word)
        else:
            rest.append(word)
    return rest, options
