"""MLIR's print utilities (printF64, vector.print, printMemref*) through sys.stdout."""

from __future__ import annotations

import contextlib
import ctypes
import io
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, callback, jit, mlir_kernel
from pymlirjit.runtime.runnerprint import format_float, format_memref
from tests.threads import run_in_threads

REPO = Path(__file__).resolve().parent.parent.parent

VECTORS = """
func.func @show() {
  %v = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
  vector.print %v : vector<4xf32>
  %i = arith.constant dense<[1, 0]> : vector<2xi1>
  vector.print %i : vector<2xi1>
  %h = arith.constant 1.5 : f16
  vector.print %h : f16
  %n = arith.constant -7 : index
  vector.print %n : index
  vector.print str "text\\n"
  %e = arith.constant dense<[[1.0, 2.5], [3.0, 4.0]]> : vector<2x2xf64>
  vector.print %e : vector<2x2xf64>
  return
}
"""
# An index prints unsigned (printU64), as mlir-runner prints it.
VECTORS_OUT = ("( 1, 2, 3, 4 )\n( 1, 0 )\n1.5\n18446744073709551609\ntext\n"
               "( ( 1, 2.5 ), ( 3, 4 ) )\n")

SCALARS = """
func.func @show(%x: f64, %n: i64) {
  call @printF64(%x) : (f64) -> ()
  call @printComma() : () -> ()
  call @printI64(%n) : (i64) -> ()
  call @printNewline() : () -> ()
  return
}
func.func private @printF64(f64)
func.func private @printI64(i64)
func.func private @printComma()
func.func private @printNewline()
"""

MEMREF = """
func.func @show(%a: memref<?x?xf64, strided<[?, ?], offset: ?>>) {
  %u = memref.cast %a : memref<?x?xf64, strided<[?, ?], offset: ?>> to memref<*xf64>
  call @printMemrefF64(%u) : (memref<*xf64>) -> ()
  return
}
func.func private @printMemrefF64(memref<*xf64>)
"""


def _captured(function: object, *args: object) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        function(*args)  # type: ignore[operator]
    return out.getvalue()


def test_vector_print_under_redirect_stdout(session: Session) -> None:
    module = session.compile(VECTORS)
    assert _captured(module.show) == VECTORS_OUT


def test_print_f64_and_i64_under_redirect_stdout_with_shared_libs(session: Session) -> None:
    module = session.compile(SCALARS, shared_libs=["mlir_c_runner_utils"])
    assert _captured(module.show, 2.5, -3) == "2.5, -3\n"
    assert _captured(module.show, -float("nan"), 2**63 - 1) == "-nan, 9223372036854775807\n"


def test_capsys_sees_kernel_prints(session: Session, capsys: pytest.CaptureFixture[str]) -> None:
    module = session.compile(SCALARS)
    print("python")
    module.show(1e300, 7)
    print("python again")
    assert capsys.readouterr().out == "python\n1e+300, 7\npython again\n"


def test_memref_print_under_redirect_stdout(session: Session) -> None:
    module = session.compile(MEMREF)
    a = (np.arange(12.0) / 3).reshape(3, 4)[:, 1:3]
    text = _captured(module.show, a)
    address = a.__array_interface__["data"][0]
    assert text == (f"Unranked Memref base@ = {hex(address)} rank = 2 offset = 0 "
                    f"sizes = [3, 2] strides = [4, 1] data = \n"
                    f"[[0.333333,   0.666667], \n [1.66667,   2], \n [3,   3.33333]]\n")


def test_prints_from_a_thread_and_a_parallel_loop(session: Session) -> None:
    module = session.compile(SCALARS)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_in_threads(lambda _: module.show(1.0, 2), range(1))
    assert out.getvalue() == "1, 2\n"

    parallel = mlir_kernel(source="""
func.func @each(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %i64 = arith.index_cast %i : index to i64
    %c1000 = arith.constant 1000 : i64
    %x = arith.addi %i64, %c1000 : i64
    func.call @printI64(%x) : (i64) -> ()
    func.call @printNewline() : () -> ()
    scf.reduce
  }
  return
}
func.func private @printI64(i64)
func.func private @printNewline()
""", name="each", session=session, parallel=True)(lambda n: None)
    text = _captured(parallel, 64)
    # Each call is whole (under the GIL); a line may interleave with another's only
    # between its two calls, as with MLIR's own functions ("1019" "1032" "\n" "\n"):
    # every number has four digits, so the numbers are read back in fours.
    digits = text.replace("\n", "")
    numbers = [digits[k:k + 4] for k in range(0, len(digits), 4)]
    assert sorted(numbers) == [str(1000 + i) for i in range(64)]
    assert text.count("\n") == 64


def test_a_failing_stdout_raises_from_the_kernel(session: Session) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    for shared_libs in ([], ["mlir_c_runner_utils"]):  # unwinding and not
        module = session.compile(SCALARS, shared_libs=shared_libs)
        with contextlib.redirect_stdout(Broken()), pytest.raises(OSError, match="disk full") \
                as caught:
            module.show(1.0, 2)
        assert "pymlirjit.printF64" in caught.value.__notes__[0]


def test_a_raising_callback_in_the_same_call_still_raises(session: Session) -> None:
    @callback(session=session)
    def check(x: float) -> None:
        if x < 0:
            raise ValueError("negative")

    module = session.compile("""
func.func @show(%x: f64) {
  call @printF64(%x) : (f64) -> ()
  call @printNewline() : () -> ()
  call @check(%x) : (f64) -> ()
  call @printF64(%x) : (f64) -> ()
  return
}
func.func private @printF64(f64)
func.func private @printNewline()
func.func private @check(f64)
""")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(ValueError, match="negative"):
        module.show(-2.0)
    assert out.getvalue() == "-2\n"  # the print after the failing callback is skipped
    assert _captured(module.show, 3.0) == "3\n3"


def test_a_user_callback_named_like_a_print_function_wins(session: Session) -> None:
    seen: list[float] = []

    @callback(session=session)
    def printF64(x: float) -> None:
        seen.append(x)

    module = session.compile(SCALARS)
    assert _captured(module.show, 4.0, 5) == ", 5\n"
    assert seen == [4.0]


_TRUTH = """
import ctypes, struct, sys
import numpy as np
from pymlirjit.lowering.pipeline import runtime_library
c = ctypes.CDLL(runtime_library("mlir_c_runner_utils"))
c.printF64.argtypes = [ctypes.c_double]
c.printF32.argtypes = [ctypes.c_float]
for text in sys.argv[1:]:  # the bits, for nan's sign
    value = struct.unpack("<d", bytes.fromhex(text))[0]
    c.printF64(value); c.printComma()
    with np.errstate(over="ignore"):
        c.printF32(float(np.float32(value)))
    c.printNewline()
ctypes.CDLL(None).fflush(None)
"""


def test_floats_format_as_mlirs_own_functions() -> None:
    rng = np.random.default_rng(1)
    values = [1.0, float("nan"), -float("nan"), float("inf"), -float("inf"), -0.0, 0.0,
              1e300, 0.1, 123456789.0, 1e-7, 2.5e-310, 1e5, 1e6, 999999.5, 0.0001,
              0.00001, *rng.standard_normal(40) * 10.0 ** rng.integers(-30, 30, 40)]
    bits = [struct.pack("<d", v).hex() for v in values]
    truth = subprocess.run([sys.executable, "-c", _TRUTH, *bits],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout
    with np.errstate(over="ignore"):
        ours = "".join(f"{format_float(v)}, {format_float(float(np.float32(v)))}\n"
                       for v in values)
    assert ours == truth


def test_memrefs_format_as_mlirs_own_printer() -> None:
    cases = [("F64", np.array(2.5)), ("F64", np.arange(4.0)),
             ("F32", (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 3)),
             ("I64", np.arange(3).reshape(3, 1)), ("I32", np.arange(3, dtype=np.int32)[None]),
             ("C64", np.array([1 + 2j, 3.5 - 1j])), ("F64", np.array([np.nan, -np.inf]))]
    script = ["import ctypes, numpy as np",
              "from pymlirjit.lowering.pipeline import runtime_library",
              "r = ctypes.CDLL(runtime_library('mlir_runner_utils'))"]
    expected = []
    for element, array in cases:
        words = [0, array.ctypes.data, 0, *array.shape,
                 *(s // array.itemsize for s in array.strides)]
        descriptor = (ctypes.c_int64 * len(words))(*words)
        expected.append(format_memref(element, array.ndim, ctypes.addressof(descriptor)))
        script.append(f"a = np.frombuffer(bytes.fromhex({array.tobytes().hex()!r}), "
                      f"{str(array.dtype)!r}).reshape({array.shape!r})")
        script.append(f"d = (ctypes.c_int64 * {len(words)})(0, a.ctypes.data, "
                      f"*{words[2:]!r})")
        script.append(f"u = (ctypes.c_int64 * 2)({array.ndim}, ctypes.addressof(d))")
        script.append(f"r._mlir_ciface_printMemref{element}(u)")
    truth = subprocess.run([sys.executable, "-c", "\n".join(script)], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    address = re.compile(r"base@ = (0x[0-9a-f]+|0) ")  # the arrays' differ
    assert address.sub("base@ = ? ", "".join(expected)) == address.sub("base@ = ? ", truth)


_PIPED = textwrap.dedent("""
    import contextlib, io, sys
    from pymlirjit import Session
    session = Session(cache_dir=sys.argv[1])
    scalars = session.compile({scalars!r}, cache=True)
    vectors = session.compile({vectors!r}, cache=True)
    print("python 1")
    scalars.show(1.5, 2)
    print("python 2")
    vectors.show()
    print("python 3")
    for i in range(3):
        scalars.show(float(i), i)
        print("python", i)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        vectors.show()
    assert out.getvalue() == {expected!r}, out.getvalue()
    print("disk hits", session.cache_info().disk_hits)
""")


def test_piped_output_keeps_the_order_of_python_and_kernel_prints(tmp_path: Path) -> None:
    # Run twice: the second process loads both modules from the disk cache.
    code = _PIPED.format(scalars=SCALARS, vectors=VECTORS, expected=VECTORS_OUT)
    for hits in (0, 2):
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO,
                             capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
        assert run.stdout == ("python 1\n1.5, 2\npython 2\n" + VECTORS_OUT + "python 3\n"
                              + "".join(f"{i}, {i}\npython {i}\n" for i in range(3))
                              + f"disk hits {hits}\n")


def test_jit_print_and_kernel_print_share_stdout(session: Session) -> None:
    module = session.compile(SCALARS)

    @jit(session=session)
    def both(x: float) -> float:
        print("jit", x)
        return x

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        both(1.0)
        module.show(2.0, 3)
        both(4.0)
    assert out.getvalue() == "jit 1.0\n2, 3\njit 4.0\n"
