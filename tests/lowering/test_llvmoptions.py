"""LLVM's own options (``-enable-matrix``...) as mlir-runner takes them, and the matrix
lowering a module with LLVM's matrix intrinsics gets without asking. Anything that sets
an option runs in a subprocess: LLVM's options are process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pymlirjit.cli.arguments import parse_args
from pymlirjit.lowering import llvmoptions

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_split_takes_unknown_single_dash_long_options_only() -> None:
    argv = ["run", "f.mlir", "-e", "main", "-enable-matrix", "-O0", "-1", "-inf",
            "-matrix-default-layout=column-major", "-shared-libs=a.so", "--pipeline", "p",
            "--", "-not-an-option"]
    rest, options = llvmoptions.split_runner_options(argv, ["-e", "-shared-libs", "--pipeline"])
    assert options == ["-enable-matrix", "-matrix-default-layout=column-major"]
    assert rest == ["run", "f.mlir", "-e", "main", "-O0", "-1", "-inf", "-shared-libs=a.so",
                    "--pipeline", "p", "--", "-not-an-option"]


def test_cli_does_not_read_an_llvm_option_as_dash_e() -> None:
    # argparse alone reads -enable-matrix as "-e nable-matrix": the entry would change.
    args = parse_args(["run", "f.mlir", "-e", "entry", "-enable-matrix", "-O0"])
    assert (args.entry, args.llvm_options, args.opt_level) == ("entry", ["-enable-matrix"], 0)
    assert parse_args(["run", "f.mlir", "-1"]).llvm_options == []


@pytest.mark.parametrize(("option", "message"), [
    ("-no-such-llvm-option", "unknown LLVM option '-no-such-llvm-option'"),
    ("-enable-matrix=maybe", "'maybe' is invalid value"),
    ("-matrix-default-layout=diagonal", "Cannot find option named 'diagonal'"),
    ("-help", "prints and ends the process"),
    ("-mattr=+avx2", "mlir-runner's choice of the JIT's target"),
])
def test_a_bad_option_raises_and_sets_nothing(option: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        llvmoptions.set_llvm_options([option])
    assert option.lstrip("-").split("=")[0] not in llvmoptions.llvm_options_set()


def test_options_are_set_once_and_a_conflict_raises() -> None:
    done = _python("""
        from pymlirjit.lowering import llvmoptions
        llvmoptions.set_llvm_options(["-enable-matrix", "-matrix-default-layout=row-major"])
        llvmoptions.set_llvm_options(["-enable-matrix"])  # the same again: nothing to do
        try:
            llvmoptions.set_llvm_options(["-matrix-default-layout=column-major"])
        except ValueError as exc:
            print(exc)
        print(sorted(llvmoptions.llvm_options_set()))
    """)
    assert done.returncode == 0, done.stderr
    assert "already set to '-matrix-default-layout=row-major'" in done.stdout
    assert "['enable-matrix', 'matrix-default-layout']" in done.stdout


def test_matrix_intrinsics_compile_without_the_option() -> None:
    # Without matrix lowering LLVM's code generator ends the process on these.
    done = _python('''
        import numpy as np
        from pymlirjit import mlir_kernel
        from pymlirjit.lowering import llvmoptions

        @mlir_kernel(source="""
        func.func @flip(%m: memref<6xf64>) {
          %c0 = arith.constant 0 : index
          %v = vector.load %m[%c0] : memref<6xf64>, vector<6xf64>
          %t = llvm.intr.matrix.transpose %v { rows = 3 : i32, columns = 2 : i32 }
            : vector<6xf64> into vector<6xf64>
          vector.store %t, %m[%c0] : memref<6xf64>, vector<6xf64>
          return
        }""")
        def flip(m): ...

        m = np.arange(6.0)
        flip(m)
        print(m.tolist(), llvmoptions.llvm_options_set())
    ''')
    assert done.returncode == 0, done.stderr
    assert "[0.0, 3.0, 1.0, 4.0, 2.0, 5.0] {'enable-matrix': '-enable-matrix'}" in done.stdout
