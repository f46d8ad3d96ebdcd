"""Checked mode (pymlirjit.codegen.checks): division by zero, cf.assert and boundscheck raise.

Before checked mode each of these killed the interpreter (SIGFPE, SIGSEGV, abort) or read
garbage, so every test that makes compiled code fail runs in a subprocess: a regression
fails that test instead of the whole run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.boundary.failures import FAIL_SYMBOL
from pymlirjit.codegen.checks import insert_checks
from pymlirjit.lowering.pipeline import DEFAULT_PIPELINE, new_context, parse_module
from pymlirjit.runtime.prepare import CompileOptions

ROOT = Path(__file__).resolve().parents[2]


def run_isolated(code: str, cwd: Path | None = None, **values: object) -> list[list[str]]:
    """Run ``code`` in a fresh interpreter, with ``values`` as its globals (by repr); it
    reports with ``say(...)`` (one JSON list per line) and must exit cleanly."""
    prelude = textwrap.dedent("""
        import json, sys
        import numpy as np
        from pymlirjit import Session, mlir_kernel

        def say(*values):
            print(json.dumps([str(v) for v in values]), flush=True)

        def outcome(function, *args):
            try:
                return ["ok", function(*args)]
            except Exception as error:
                return [type(error).__name__, str(error)]
    """)
    prelude += "".join(f"{name} = {value!r}\n" for name, value in values.items())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stderr == "", result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


DIVISIONS = """
func.func @divsi(%a: i64, %b: i64) -> i64 {
  %r = arith.divsi %a, %b : i64
  return %r : i64
}
func.func @divui(%a: i32, %b: i32) -> i32 {
  %r = arith.divui %a, %b : i32
  return %r : i32
}
func.func @remsi(%a: i16, %b: i16) -> i16 {
  %r = arith.remsi %a, %b : i16
  return %r : i16
}
func.func @remui(%a: i8, %b: i8) -> i8 {
  %r = arith.remui %a, %b : i8
  return %r : i8
}
func.func @ceildivsi(%a: i64, %b: i64) -> i64 {
  %r = arith.ceildivsi %a, %b : i64
  return %r : i64
}
func.func @floordivsi(%a: index, %b: index) -> index {
  %r = arith.floordivsi %a, %b : index
  return %r : index
}
func.func @ceildivui(%a: i64, %b: i64) -> i64 {
  %r = arith.ceildivui %a, %b : i64
  return %r : i64
}
"""
OPS = ["divsi", "divui", "remsi", "remui", "ceildivsi", "floordivsi", "ceildivui"]


def test_every_integer_division_by_zero_raises_and_the_session_stays_usable() -> None:
    rows = run_isolated(f"""
        m = Session().compile(DIVISIONS)
        for name in {OPS!r}:
            say(name, *outcome(m[name], 7, 0), *outcome(m[name], 7, 2))
    """, DIVISIONS=DIVISIONS)
    expected = {"divsi": 3, "divui": 3, "remsi": 1, "remui": 1, "ceildivsi": 4,
                "floordivsi": 3, "ceildivui": 4}
    assert [row[0] for row in rows] == OPS
    for name, kind, message, ok, value in rows:
        assert kind == "ZeroDivisionError", (name, kind, message)
        assert message == f"integer division or modulo by zero in @{name} (MLIR line " \
                          f"{3 + 4 * OPS.index(name)})"
        assert (ok, int(value)) == ("ok", expected[name])


def test_signed_minimum_divided_by_minus_one_wraps_instead_of_trapping() -> None:
    rows = run_isolated("""
        m = Session().compile(DIVISIONS)
        for name in ("divsi", "ceildivsi"):
            say(name, *outcome(m[name], -2**63, -1))
        say("remsi", *outcome(m.remsi, -2**15, -1))
        say("floordivsi", *outcome(m.floordivsi, -2**63, -1))
    """, DIVISIONS=DIVISIONS)
    assert rows == [["divsi", "ok", str(-2**63)], ["ceildivsi", "ok", str(-2**63)],
                    ["remsi", "ok", "0"], ["floordivsi", "ok", str(-2**63)]]


VECTOR_DIVISION = """
func.func @vdiv(%a: memref<8xi32>, %b: memref<8xi32>, %out: memref<8xi32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %a0 = vector.load %a[%c0] : memref<8xi32>, vector<4xi32>
  %b0 = vector.load %b[%c0] : memref<8xi32>, vector<4xi32>
  %a2 = vector.shape_cast %a0 : vector<4xi32> to vector<2x2xi32>
  %b2 = vector.shape_cast %b0 : vector<4xi32> to vector<2x2xi32>
  %q2 = arith.divsi %a2, %b2 : vector<2x2xi32>
  %q0 = vector.shape_cast %q2 : vector<2x2xi32> to vector<4xi32>
  vector.store %q0, %out[%c0] : memref<8xi32>, vector<4xi32>
  %a1 = vector.load %a[%c4] : memref<8xi32>, vector<4xi32>
  %b1 = vector.load %b[%c4] : memref<8xi32>, vector<4xi32>
  %q1 = arith.remui %a1, %b1 : vector<4xi32>
  vector.store %q1, %out[%c4] : memref<8xi32>, vector<4xi32>
  return
}
"""


def test_vector_division_by_zero_raises_if_any_lane_divides_by_zero() -> None:
    rows = run_isolated("""
        m = Session().compile(VECTOR_DIVISION)
        a = np.arange(10, 18, dtype=np.int32)
        out = np.zeros(8, np.int32)
        for lane in (None, 1, 6):
            b = np.full(8, 3, np.int32)
            if lane is not None:
                b[lane] = 0
            say(lane, *outcome(m.vdiv, a, b, out))
        say(out.tolist())
    """, VECTOR_DIVISION=VECTOR_DIVISION)
    assert rows[0] == ["None", "ok", "None"]
    assert rows[1][1:] == ["ZeroDivisionError",
                           "integer division or modulo by zero in @vdiv (MLIR line 9)"]
    assert rows[2][1:] == ["ZeroDivisionError",
                           "integer division or modulo by zero in @vdiv (MLIR line 14)"]
    assert rows[3] == [str([x // 3 for x in range(10, 14)] + [x % 3 for x in range(14, 18)])]


LOOP = """
func.func @quotients(%a: memref<?xi64>, %b: memref<?xi64>, %n: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> i64 {
    %x = memref.load %a[%i] : memref<?xi64>
    %y = memref.load %b[%i] : memref<?xi64>
    %q = arith.divsi %x, %y : i64
    %m = arith.remsi %x, %y : i64
    %s = arith.addi %acc, %q : i64
    %t = arith.addi %s, %m : i64
    scf.yield %t : i64
  }
  return %r : i64
}
"""


@pytest.mark.parametrize("shared_libs", [(), ("mlir_c_runner_utils",)],
                         ids=["unwinding", "running-on"])
def test_the_first_failure_of_a_loop_wins_whether_the_call_unwinds_or_runs_on(
        shared_libs: tuple[str, ...]) -> None:
    # With a shared library the call is not unwound: the kernel runs on after a failure
    # (later divisions by zero, out-of-bounds loads) and the first failure is raised.
    rows = run_isolated(f"""
        m = Session(boundscheck=True, shared_libs={shared_libs!r}).compile(LOOP)
        a = np.arange(1, 7)
        say(*outcome(m.quotients, a, np.array([1, 1, 0, 2, 0, 1]), 9))
        say(*outcome(m.quotients, a, np.ones(6, np.int64), 9))
        b = np.array([1, 2, 3, 4, 5, 6])
        say(*outcome(m.quotients, a, b, 6), int(sum(a // b + a % b)))
    """, LOOP=LOOP)
    assert rows[0] == ["ZeroDivisionError",
                       "integer division or modulo by zero in @quotients (MLIR line 9)"]
    assert rows[1] == ["IndexError", "memref.load in @quotients (MLIR line 7): index 6 is "
                                     "out of bounds for dimension 0 of size 6"]
    assert rows[2][0] == "ok" and rows[2][1] == rows[2][2]


def test_division_beside_user_callbacks_and_in_generic_kernels() -> None:
    rows = run_isolated("""
        from pymlirjit import callback, i64

        session = Session()

        @callback(session=session)
        def check(x: i64) -> i64:
            if x < 0:
                raise ValueError(f"negative: {x}")
            return x

        m = session.compile('''
        func.func @f(%a: i64, %b: i64) -> i64 {
          %c = call @check(%a) : (i64) -> i64
          %q = arith.remsi %c, %b : i64
          return %q : i64
        }
        func.func private @check(i64) -> i64
        ''')
        for args in [(7, 4), (7, 0), (-1, 0), (-1, 2)]:
            say(*outcome(m.f, *args))

        @mlir_kernel(session=session, source='''
        func.func @g(%a: !T, %b: !T) -> !T {
          %q = arith.floordivsi %a, %b : !T
          return %q : !T
        }''')
        def g(a, b): ...

        for args in [(7, -2), (np.int32(7), np.int32(0)), (np.int16(-7), np.int16(2))]:
            say(*outcome(g, *args))
    """)
    # @g's source is a literal in the Python text: from 3.13 linecache holds ``-c`` code,
    # so its line is located there ("<string>:N") rather than in the MLIR text.
    g_line = rows[5][1].rpartition(" (")[2]
    assert g_line == "MLIR line 3)" or re.fullmatch(r"<string>:\d+\)", g_line), rows[5]
    assert rows == [["ok", "3"],
                    ["ZeroDivisionError", "integer division or modulo by zero in @f (MLIR "
                                          "line 4)"],
                    ["ValueError", "negative: -1"], ["ValueError", "negative: -1"],
                    ["ok", "-4"],
                    ["ZeroDivisionError", "integer division or modulo by zero in @g ("
                                          + g_line],
                    ["ok", "-4"]]


def test_tensor_division_raises_through_bufferization() -> None:
    rows = run_isolated("""
        m = Session().compile('''
        func.func @t(%a: tensor<4xi32>, %b: tensor<4xi32>) -> tensor<4xi32> {
          %r = arith.divui %a, %b : tensor<4xi32>
          return %r : tensor<4xi32>
        }''')
        a = np.arange(4, 8, dtype=np.int32)
        say(*outcome(lambda *x: m.t(*x).tolist(), a, np.full(4, 2, np.int32)))
        say(*outcome(m.t, a, np.array([1, 2, 0, 1], np.int32)))
    """)
    assert rows == [["ok", "[2, 2, 3, 3]"],
                    ["ZeroDivisionError", "integer division or modulo by zero in @t (MLIR "
                                          "line 3)"]]


def test_a_division_that_cannot_trap_is_left_alone(session: Session) -> None:
    module = session.compile("""
    func.func @half(%a: i64) -> i64 {
      %c2 = arith.constant 2 : i64
      %r = arith.divsi %a, %c2 : i64
      return %r : i64
    }""")
    # No check, no failure callback: the kernel keeps its plain native entry.
    assert FAIL_SYMBOL not in module.lowered_mlir
    assert module.callbacks == {}
    assert module.half(-9) == -4
    checked = session.compile("""
    func.func @by(%a: i64, %b: i64) -> i64 {
      %r = arith.divsi %a, %b : i64
      return %r : i64
    }""")
    assert FAIL_SYMBOL in checked.lowered_mlir
    assert checked.by(-9, 2) == -4


def test_a_quotient_and_remainder_share_one_check(session: Session) -> None:
    module = session.compile(LOOP)
    # One failure call for the two divisions by %y (the first failure wins anyway).
    assert module.lowered_mlir.count(f"@_mlir_ciface_{FAIL_SYMBOL}(") == 2  # call + decl


def test_insert_checks_counts_its_failure_calls_and_leaves_tensors_alone() -> None:
    scalar = parse_module(DIVISIONS, new_context())
    assert insert_checks(scalar, boundscheck=False) == len(OPS)
    assert str(scalar).count(f"func.func private @{FAIL_SYMBOL}(") == 1
    # Before bufferization (a pipeline that never bufferizes): nothing to check yet.
    tensors = parse_module("""
    func.func @t(%a: tensor<4xi32>, %b: tensor<4xi32>) -> tensor<4xi32> {
      %r = arith.divui %a, %b : tensor<4xi32>
      return %r : tensor<4xi32>
    }""", new_context())
    assert insert_checks(tensors, boundscheck=True) == 0
    assert FAIL_SYMBOL not in str(tensors)


def test_a_pipeline_without_scf_lowering_is_run_as_written(session: Session) -> None:
    pipeline = ["convert-arith-to-llvm", "convert-func-to-llvm", "reconcile-unrealized-casts"]
    module = session.compile("""
    func.func @by(%a: i64, %b: i64) -> i64 {
      %r = arith.divsi %a, %b : i64
      return %r : i64
    }""", pipeline=pipeline)
    assert FAIL_SYMBOL not in module.lowered_mlir
    assert module.by(9, 2) == 4


ASSERTS = """
func.func @below(%x: i64, %limit: i64) -> i64 {
  %ok = arith.cmpi slt, %x, %limit : i64
  cf.assert %ok, "x must be below the limit"
  return %x : i64
}
func.func @holds(%ok: i1) {
  cf.assert %ok, "« ça » \\"tient\\" \\\\ ✓"
  return
}
"""


def test_a_failing_cf_assert_raises_assertion_error_with_its_message() -> None:
    rows = run_isolated("""
        m = Session().compile(ASSERTS)
        say(*outcome(m.below, 5, 3))
        say(*outcome(m.below, 1, 3))
        say(*outcome(m.holds, False))
    """, ASSERTS=ASSERTS)
    assert rows == [["AssertionError", "x must be below the limit, in @below (MLIR line 4)"],
                    ["ok", "1"],
                    ["AssertionError", '« ça » "tient" \\ ✓, in @holds (MLIR line 8)']]


def test_runtime_verification_failures_raise_index_error() -> None:
    rows = run_isolated(f"""
        m = Session(pipeline=["generate-runtime-verification", *{list(DEFAULT_PIPELINE)!r}]
                    ).compile('''
        func.func @first(%a: memref<?xf32>) -> f32 {{
          %b = memref.cast %a : memref<?xf32> to memref<4xf32>
          %c0 = arith.constant 0 : index
          %r = memref.load %b[%c0] : memref<4xf32>
          return %r : f32
        }}''')
        say(*outcome(m.first, np.ones(4, np.float32)))
        say(*outcome(m.first, np.ones(3, np.float32)))
    """)
    assert rows == [["ok", "1.0"],
                    ["IndexError", "runtime op verification failed in @first (MLIR line "
                                   "3): size mismatch of dim 0"]]


def test_runtime_verification_in_a_call_that_cannot_unwind_never_reads_out_of_bounds() -> None:
    # With a shared library the call runs on after a failed check (it cannot unwind):
    # the load the check guarded must not run, or index 2**40 would crash the process.
    rows = run_isolated(f"""
        m = Session(shared_libs=["mlir_c_runner_utils"],
                    pipeline=["generate-runtime-verification", *{list(DEFAULT_PIPELINE)!r}]
                    ).compile('''
        func.func @get(%a: memref<?xf64>, %i: index) -> f64 {{
          %x = memref.load %a[%i] : memref<?xf64>
          return %x : f64
        }}''')
        say(*outcome(m.get, np.arange(4.0), 2**40))
        say(*outcome(m.get, np.arange(4.0), 3))
    """)
    assert rows == [["IndexError", "runtime op verification failed in @get (MLIR line 3): "
                                   "out-of-bounds access"], ["ok", "3.0"]]


BOUNDS = """
func.func @load(%a: memref<?xf64>, %i: index) -> f64 {
  %r = memref.load %a[%i] : memref<?xf64>
  return %r : f64
}
func.func @store(%a: memref<4x?xf64>, %i: index, %j: index, %v: f64) {
  memref.store %v, %a[%i, %j] : memref<4x?xf64>
  return
}
func.func @fill(%a: memref<?xf64>, %n: index, %v: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %a[%i] : memref<?xf64>
  }
  return
}
func.func @window(%a: memref<?xf64>, %offset: index, %v: f64) {
  %w = memref.subview %a[%offset][4][1]
      : memref<?xf64> to memref<4xf64, strided<[1], offset: ?>>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    memref.store %v, %w[%i] : memref<4xf64, strided<[1], offset: ?>>
  }
  return
}
func.func @sum4(%a: memref<?xf32>, %i: index) -> f32 {
  %v = vector.load %a[%i] : memref<?xf32>, vector<4xf32>
  %s = vector.reduction <add>, %v : vector<4xf32> into f32
  return %s : f32
}
"""


@pytest.mark.parametrize("shared_libs", [(), ("mlir_c_runner_utils",)],
                         ids=["unwinding", "running-on"])
def test_boundscheck_raises_index_error_and_skips_the_access(
        shared_libs: tuple[str, ...]) -> None:
    rows = run_isolated(f"""
        m = Session(boundscheck=True, shared_libs={shared_libs!r}).compile(BOUNDS)
        a = np.arange(5.0)
        say(*outcome(m.load, a, 4))
        say(*outcome(m.load, a, 5))
        say(*outcome(m.load, a, -1))
        grid = np.zeros((4, 3))
        say(*outcome(m.store, grid, 3, 2, 1.0))
        say(*outcome(m.store, grid, 1, 3, 1.0))
        say(*outcome(m.store, grid, 4, 0, 1.0))
        say(grid.sum())
        # Views of a larger array: nothing past the view may change.
        big = np.zeros(10)
        say(*outcome(m.fill, big[:4], 8, 1.0))
        say(big.tolist())
        big = np.zeros(10)
        say(*outcome(m.window, big[:5], 1, 2.0))
        say(*outcome(m.window, big[:5], 3, 3.0))
        say(big.tolist())
        f = np.arange(8, dtype=np.float32)
        say(*outcome(m.sum4, f, 4))
        say(*outcome(m.sum4, f, 5))
    """, BOUNDS=BOUNDS)
    assert rows[0] == ["ok", "4.0"]
    assert rows[1] == ["IndexError", "memref.load in @load (MLIR line 3): index 5 is out of "
                                     "bounds for dimension 0 of size 5"]
    assert rows[2] == ["IndexError", "memref.load in @load (MLIR line 3): index -1 is out of "
                                     "bounds for dimension 0 of size 5"]
    assert rows[3] == ["ok", "None"]
    assert rows[4] == ["IndexError", "memref.store in @store (MLIR line 7): index 3 is out "
                                     "of bounds for dimension 1 of size 3"]
    assert rows[5] == ["IndexError", "memref.store in @store (MLIR line 7): index 4 is out "
                                     "of bounds for dimension 0 of size 4"]
    assert rows[6] == ["1.0"]
    assert rows[7] == ["IndexError", "memref.store in @fill (MLIR line 14): index 4 is out "
                                     "of bounds for dimension 0 of size 4"]
    assert rows[8] == [str([1.0] * 4 + [0.0] * 6)]
    assert rows[9] == ["ok", "None"]
    assert rows[10] == ["IndexError", "invalid memref.subview in @window (MLIR line 19): "
                                      "index 6 is out of bounds for dimension 0 of size 5"]
    # The invalid view was never written through, whether the call unwound or ran on.
    assert rows[11] == [str([0.0] + [2.0] * 4 + [0.0] * 5)]
    assert rows[12] == ["ok", "22.0"]
    assert rows[13] == ["IndexError", "vector.load in @sum4 (MLIR line 30): index 5 is out "
                                      "of bounds for dimension 0 of size 8"]


def test_boundscheck_is_off_by_default_and_plumbed_like_fastmath(session: Session) -> None:
    assert FAIL_SYMBOL not in session.compile(BOUNDS).lowered_mlir
    checked = session.compile(BOUNDS, boundscheck=True)
    assert FAIL_SYMBOL in checked.lowered_mlir
    assert checked.load(np.arange(3.0), 2) == 2.0
    assert Session(boundscheck=True).options.boundscheck
    assert "+boundscheck" in CompileOptions.make(boundscheck=True).pipeline_key
    assert CompileOptions.make().replace(boundscheck=True).boundscheck
    with pytest.raises(TypeError, match="boundscheck must be True or False"):
        CompileOptions.make(boundscheck="yes")  # type: ignore[arg-type]

    @mlir_kernel(session=session, boundscheck=True, source=BOUNDS)
    def load(a, i): ...

    assert load(np.arange(3.0), 1) == 1.0
    assert FAIL_SYMBOL in load.compile().module.lowered_mlir


def test_messages_name_the_python_line_of_an_inline_kernel(tmp_path: Path) -> None:
    script = tmp_path / "kernels.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        from pymlirjit import mlir_kernel


        @mlir_kernel(boundscheck=True, source="""
        func.func @at(%a: memref<?xf64>, %i: index) -> f64 {
          %r = memref.load %a[%i] : memref<?xf64>
          return %r : f64
        }
        """)
        def at(a, i): ...


        @mlir_kernel(source="""
        func.func @div(%a: i64, %b: i64) -> i64 {
          %r = arith.divsi %a, %b : i64
          return %r : i64
        }
        """)
        def div(a, b): ...
    '''))
    rows = run_isolated("""
        import kernels
        say(*outcome(kernels.at, np.zeros(3), 3))
        say(*outcome(kernels.div, 1, 0))
    """, cwd=tmp_path)
    assert rows == [["IndexError", "memref.load in @at (kernels.py:8): index 3 is out of "
                                   "bounds for dimension 0 of size 3"],
                    ["ZeroDivisionError", "integer division or modulo by zero in @div "
                                          "(kernels.py:17)"]]


def test_a_checked_module_from_the_disk_cache_raises_the_same(tmp_path: Path) -> None:
    code = f"""
        session = Session(cache_dir={str(tmp_path)!r}, boundscheck=True)
        m = session.compile(LOOP)
        a = np.arange(1, 7)
        say(session.cache_info().disk_hits)
        say(*outcome(m.quotients, a, np.array([1, 1, 0, 2, 0, 1]), 6))
        say(*outcome(m.quotients, a, np.ones(6, np.int64), 7))
        say(*outcome(m.quotients, a, np.ones(6, np.int64), 6))
    """
    first, second = run_isolated(code, LOOP=LOOP), run_isolated(code, LOOP=LOOP)
    assert first[0] == ["0"] and second[0] == ["1"]
    assert first[1:] == second[1:]
    assert second[1][0] == "ZeroDivisionError" and second[2][0] == "IndexError"
    assert second[3] == ["ok", "21"]


def test_cli_run_boundscheck(tmp_path: Path) -> None:
    source = tmp_path / "at.mlir"
    source.write_text("func.func @main(%a: memref<?xf32>, %i: index) -> f32 {\n"
                      "  %r = memref.load %a[%i] : memref<?xf32>\n"
                      "  return %r : f32\n}\n")
    np.save(tmp_path / "a.npy", np.arange(3, dtype=np.float32))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pymlirjit", "run", str(source),
                               str(tmp_path / "a.npy"), *args], capture_output=True,
                              text=True, timeout=300, env=env)

    ok = run("2", "--boundscheck")
    assert (ok.returncode, ok.stdout) == (0, "2.0\n"), ok.stderr
    failed = run("3", "--boundscheck")
    assert failed.returncode == 1
    assert failed.stderr == (f"pymlirjit: error: IndexError: memref.load in @main "
                             f"({source}:2): index 3 is out of bounds for dimension 0 of "
                             f"size 3\n")


@pytest.mark.parametrize("shared_libs", [(), ("mlir_c_runner_utils",)],
                         ids=["unwinding", "running-on"])
def test_failing_calls_leak_nothing(shared_libs: tuple[str, ...]) -> None:
    rows = run_isolated("""
        import gc
        from tests.conftest import rss_bytes

        m = Session(boundscheck=True, shared_libs=shared_libs).compile('''
        func.func @f(%a: memref<?xi64>, %i: index, %b: i64) -> i64 {
          %x = memref.load %a[%i] : memref<?xi64>
          %q = arith.divsi %x, %b : i64
          return %q : i64
        }''')
        a = np.ones(10, np.int64)

        def fail(times):
            for _ in range(times):
                for args, error in (((a, 0, 0), ZeroDivisionError), ((a, 10, 1), IndexError)):
                    try:
                        m.f(*args)
                    except error:
                        pass
            gc.collect()

        fail(2000)
        before = rss_bytes()
        fail(20000)
        say(rss_bytes() - before, m.f(a, 9, 1))
    """, cwd=ROOT, shared_libs=shared_libs)
    grown, value = rows[0]
    assert int(grown) < 2 << 20, f"{int(grown) >> 10} KiB more after 40,000 failing calls"
    assert value == "1"


PARALLEL_DIVIDE = """
func.func @divide(%a: memref<?xi64>, %d: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xi64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %x = memref.load %a[%i] : memref<?xi64>
    %q = arith.divsi %x, %d : i64
    memref.store %q, %a[%i] : memref<?xi64>
  }
  return
}"""


def test_a_failing_parallel_loop_names_the_kernel_and_fails_one_call_only() -> None:
    # Every task fails, on the calling thread and on the runtime's: the call raises
    # once, naming the kernel (not the function its loop was outlined to), and the
    # next call does not raise what the other tasks recorded.
    rows = run_isolated("""
        import os
        os.environ["PYMLIRJIT_NUM_THREADS"] = "2"
        @mlir_kernel(source=SOURCE, parallel=True)
        def divide(a: np.ndarray, d: int) -> None: ...
        a = np.arange(10_000, dtype=np.int64)
        for d in (2, 0, 3, 0, 5):
            say(d, *outcome(divide, a, d))
        say("first", a[:4].tolist())
    """, SOURCE=PARALLEL_DIVIDE)
    assert [row[1] for row in rows[:5]] == ["ok", "ZeroDivisionError", "ok",
                                            "ZeroDivisionError", "ok"]
    assert rows[1][2] == "integer division or modulo by zero in @divide (MLIR line 8)"
    assert rows[5] == ["first", str([0, 0, 0, 0])]


def test_numpy_error_model_gives_zero_and_raises_the_cpu_flag_not_an_exception() -> None:
    # numpy's integer division by zero: 0, and the FE_DIVBYZERO flag (INT_MIN // -1: the
    # minimum, and FE_OVERFLOW), read here as numpy reads it after a ufunc loop.
    rows = run_isolated("""
        import ctypes
        libm = ctypes.CDLL("libm.so.6")
        m = Session(error_model="numpy").compile(DIVISIONS)
        for name, a, b in [("divsi", 7, 0), ("remsi", 7, 0), ("divui", 7, 0),
                           ("floordivsi", 7, 2), ("divsi", -2**63, -1)]:
            m[name](1, 1)  # its native entry built (code generation may raise FE_INEXACT)
            libm.feclearexcept(0x3D)
            say(name, *outcome(m[name], a, b), libm.fetestexcept(0x3D))
    """, DIVISIONS=DIVISIONS)
    assert rows == [["divsi", "ok", "0", "4"], ["remsi", "ok", "0", "4"],
                    ["divui", "ok", "0", "4"], ["floordivsi", "ok", "3", "0"],
                    ["divsi", "ok", str(-2**63), "8"]]


def test_the_failure_callback_alone_does_not_keep_the_gil(tmp_path: Path) -> None:
    # Only user callbacks make a module keep the GIL; a checked division releases it when
    # other threads run, and still raises (also loaded from the disk cache).
    rows = run_isolated("""
        import threading, time
        stop = []
        def spin():
            while not stop:
                time.sleep(0.0001)
        for attempt in range(2):
            @mlir_kernel(source=SOURCE, cache=True, session=Session(cache_dir=CACHE))
            def ratio(a: int, b: int) -> int: ...
            worker = threading.Thread(target=spin)
            worker.start()
            outcomes = {str(outcome(ratio, 1, 0)) for _ in range(300)}
            say(ratio.compile().release_gil, *outcomes, ratio(7, 2))
            stop.append(1)
            worker.join()
            stop.clear()
    """, SOURCE=DIVISIONS.split("func.func @divui")[0].replace("@divsi", "@ratio"),
        CACHE=str(tmp_path))
    message = "integer division or modulo by zero in @ratio (MLIR line 3)"
    assert rows == [["None", str(["ZeroDivisionError", message]), "3"]] * 2


ALLOCATING = """
memref.global "private" constant @numbers : memref<3xf64> = dense<[1.0, 2.0, 3.0]>
func.func @one(%n: index, %b: i64) -> memref<?xf64> {
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %x = arith.sitofp %q : i64 to f64
  %m = memref.alloc(%n) : memref<?xf64>
  %c0 = arith.constant 0 : index
  memref.store %x, %m[%c0] : memref<?xf64>
  return %m : memref<?xf64>
}
func.func @filled(%n: index, %b: i64) -> tensor<?xf64> {
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %x = arith.sitofp %q : i64 to f64
  %e = tensor.empty(%n) : tensor<?xf64>
  %t = linalg.fill ins(%x : f64) outs(%e : tensor<?xf64>) -> tensor<?xf64>
  return %t : tensor<?xf64>
}
func.func @several(%n: index, %b: i64, %a: memref<?xf64>)
    -> (memref<?xf64>, i64, memref<?xf64>, memref<?xf64>, memref<3xf64>, memref<?xf64>) {
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %m = memref.alloc(%n) : memref<?xf64>
  %k = memref.alloc(%n) : memref<?xf64>
  %g = memref.get_global @numbers : memref<3xf64>
  return %m, %q, %a, %k, %g, %m
      : memref<?xf64>, i64, memref<?xf64>, memref<?xf64>, memref<3xf64>, memref<?xf64>
}"""


# Runs in the subprocess: how much more memory ``times`` failing calls of ``call`` leave
# allocated (after 500 that warm up); each call must raise ZeroDivisionError.
_GROWN = """
import gc
from tests.conftest import rss_bytes

def grown(call, times=5000):
    def fail(count):
        for _ in range(count):
            try:
                call()
            except ZeroDivisionError:
                pass
            else:
                raise AssertionError("the call did not fail")
        gc.collect()
    fail(500)
    before = rss_bytes()
    fail(times)
    return rss_bytes() - before
"""


@pytest.mark.parametrize("shared_libs", [(), ("mlir_c_runner_utils",)],
                         ids=["unwinding", "running-on"])
def test_a_failing_call_frees_the_arrays_it_would_have_returned(
        shared_libs: tuple[str, ...]) -> None:
    # Running on, the call allocates its results after the failed division and returns
    # them: the call frees each fresh allocation once (@several returns %m twice), and
    # neither the argument nor the global it also returns. Unwound, it never allocates,
    # and its results were never written: nothing (no stack garbage) is freed. Each
    # case leaked 8 KB per result and call (40-80 MB here) before; a wrong free aborts.
    rows = run_isolated(_GROWN + textwrap.dedent("""
        import os

        session = Session(shared_libs=shared_libs)
        @mlir_kernel(source=SOURCE, name="one", session=session)
        def one(n, b): ...
        @mlir_kernel(source=SOURCE, name="filled", session=session)
        def filled(n, b): ...
        @mlir_kernel(source=SOURCE, name="several", session=session)
        def several(n, b, a): ...

        def python_path_calls(call):
            calls = []
            def profile(frame, event, arg):
                code = frame.f_code
                if (event == "call" and code.co_name == "__call__"
                        and code.co_filename.endswith(
                            os.path.join("pymlirjit", "runtime", "pythoncall.py"))):
                    calls.append(1)
            sys.setprofile(profile)
            try:
                outcome(call)
            finally:
                sys.setprofile(None)
            return len(calls)

        a = np.ones(1000)
        cases = {  # call_python: the Python path
            "one": (lambda: one(1000, 0), lambda: one.compile().call_python(1000, 0)),
            "tensor": (lambda: filled(1000, 0), lambda: filled.compile().call_python(1000, 0)),
            "several": (lambda: several(1000, 0, a),
                        lambda: several.compile().call_python(1000, 0, a)),
        }
        for name, calls in cases.items():
            for path, call in zip(("native", "python"), calls):
                say(name, path, python_path_calls(call), grown(call), outcome(call)[0])
        for r in (several(4, 2, a), several(n=4, b=2, a=a)):
            say(r[1], np.shares_memory(r[2], a), r[4].tolist(), np.shares_memory(r[0], r[5]))
        del r
        gc.collect()
        say(one(3, 1)[0], filled(2, 7).tolist(), a.sum())
    """), cwd=ROOT, shared_libs=shared_libs, SOURCE=ALLOCATING)
    for name, path, python_calls, grown, raised in rows[:6]:
        assert raised == "ZeroDivisionError", (name, path)
        assert python_calls == ("1" if path == "python" else "0"), (name, path)
        assert int(grown) < 2 << 20, f"{name}, {path} path: {int(grown) >> 10} KiB more"
    assert rows[6:] == [["3", "True", "[1.0, 2.0, 3.0]", "True"]] * 2 + [
        ["7.0", "[1.0, 1.0]", "1000.0"]]


def test_a_call_running_on_in_a_module_that_unwinds_frees_its_results() -> None:
    # A module without shared libraries unwinds a failing call by longjmp, but a kernel it
    # calls fails in its own guard, which makes this call fail and returns: this call runs
    # on to its end (after its allocation) and its native entry frees the result.
    rows = run_isolated(_GROWN + textwrap.dedent("""
        session = Session()
        @mlir_kernel(source=RATIO, session=session)
        def ratio(a, b): ...
        @mlir_kernel(source='''
        func.func private @ratio(i64, i64) -> i64
        func.func @outer(%n: index, %b: i64) -> memref<?xi64> {
          %m = memref.alloc(%n) : memref<?xi64>
          %c7 = arith.constant 7 : i64
          %q = call @ratio(%c7, %b) : (i64, i64) -> i64
          %c0 = arith.constant 0 : index
          memref.store %q, %m[%c0] : memref<?xi64>
          return %m : memref<?xi64>
        }''', session=session, callbacks=[ratio])
        def outer(n, b): ...

        # call_python: the Python path, through the function's guard, which frees the
        # results of the call it zeroes.
        for call in (lambda: outer(1000, 0), lambda: outer.compile().call_python(1000, 0)):
            say(outer.compile().unwind, grown(call), outcome(call)[0],
                outer(2, 2)[0], outer(n=2, b=7)[0])
    """), cwd=ROOT, RATIO=DIVISIONS.split("func.func @divui")[0].replace("@divsi", "@ratio"))
    assert len(rows) == 2
    for unwinds, grown, raised, value, by_keyword in rows:
        assert unwinds == "True" and raised == "ZeroDivisionError"
        assert (value, by_keyword) == ("3", "1")
        assert int(grown) < 2 << 20, f"{int(grown) >> 10} KiB more after 5,000 failing calls"


def test_a_failed_assert_in_a_call_that_cannot_unwind_never_writes_out_of_bounds() -> None:
    # The call runs on after the failed assert (a shared library: it cannot unwind); the
    # store the assert guarded must not run, or index 2**40 would crash the process.
    rows = run_isolated("""
        m = Session(shared_libs=["mlir_c_runner_utils"]).compile('''
        func.func @put(%a: memref<?xf64>, %i: index) {
          %c0 = arith.constant 0 : index
          %n = memref.dim %a, %c0 : memref<?xf64>
          %ok = arith.cmpi ult, %i, %n : index
          cf.assert %ok, "index in range"
          %x = arith.constant 1.0 : f64
          memref.store %x, %a[%i] : memref<?xf64>
          return
        }''')
        a = np.zeros(4)
        say(*outcome(m.put, a, 2**40))
        say(*outcome(m.put, a, 3), a.tolist())
    """)
    assert rows == [["AssertionError", "index in range, in @put (MLIR line 6)"],
                    ["ok", "None", str([0.0, 0.0, 0.0, 1.0])]]


ALLOCATING_FIRST = """
func.func @kept(%n: index, %v: i64, %b: i64) -> memref<?xi64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xi64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %m[%i] : memref<?xi64>
  }
  %q = arith.divsi %v, %b : i64
  memref.store %q, %m[%c0] : memref<?xi64>
  return %m : memref<?xi64>
}
func.func @temporary(%n: index, %v: i64, %b: i64) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.alloc(%n) : memref<?xi64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %t[%i] : memref<?xi64>
  }
  %last = arith.subi %n, %c1 : index
  %x = memref.load %t[%last] : memref<?xi64>
  %q = arith.divsi %x, %b : i64
  memref.dealloc %t : memref<?xi64>
  return %q : i64
}
func.func @filled(%n: index, %v: i64, %b: i64) -> tensor<?xi64> {
  %c0 = arith.constant 0 : index
  %e = tensor.empty(%n) : tensor<?xi64>
  %t = linalg.fill ins(%v : i64) outs(%e : tensor<?xi64>) -> tensor<?xi64>
  %x = tensor.extract %t[%c0] : tensor<?xi64>
  %q = arith.divsi %x, %b : i64
  %r = tensor.insert %q into %t[%c0] : tensor<?xi64>
  return %r : tensor<?xi64>
}"""

# Runs in the subprocess: the kernels of ALLOCATING_FIRST (n=1000: 8 KB each allocation),
# and grown() (see _GROWN).
_UNWIND_PRELUDE = _GROWN + """
import os

def kernels(session):
    return [mlir_kernel(source=SOURCE, name=name, session=session)(lambda n, v, b: None)
            for name in ("kept", "temporary", "filled")]

CACHE = globals().get("CACHE")
if CACHE is not None:  # from the disk cache: a shared library, or object code ($CC empty)
    os.environ["CC"] = "" if ARTIFACT == "object" else os.environ.get("CC", "cc")
    for kernel in kernels(Session(boundscheck=True, cache_dir=CACHE)):
        kernel.compile()
session = Session(boundscheck=True, cache_dir=CACHE)
kept, temporary, filled = kernels(session)
"""


@pytest.mark.parametrize("artifact", ["jit", "shared", "object"])
def test_an_unwound_call_frees_what_it_allocated_before_it_failed(
        artifact: str, tmp_path: Path) -> None:
    # Each call allocates 8 KB (a result, a temporary, a tensor's buffer) and then
    # divides by zero: the call ends by longjmp, never reaching its free or its return.
    # Unwound, it frees that memory (40 MB over 5,000 calls before), on the native path
    # and on the Python path (call_python) alike, whether the code was JIT-compiled or
    # loaded from the disk cache; and a call that passes is unchanged.
    cache = None if artifact == "jit" else str(tmp_path)
    rows = run_isolated(_UNWIND_PRELUDE + textwrap.dedent("""
        cases = {
            "result": (lambda: kept(1000, 7, 0), lambda: kept.compile().call_python(1000, 7, 0)),
            "temporary": (lambda: temporary(1000, 7, 0),
                          lambda: temporary.compile().call_python(1000, 7, 0)),
            "tensor": (lambda: filled(1000, 7, 0),
                       lambda: filled.compile().call_python(1000, 7, 0)),
        }
        for name, calls in cases.items():
            for path, call in zip(("native", "python"), calls):
                say(name, path, grown(call))
        say(kept.compile().unwind, kept(3, 6, 2).tolist(), temporary(4, 9, 3),
            filled(2, 8, 4).tolist(), kept(n=2, v=5, b=5).tolist(),
            session.cache_info().disk_hits, type(kept.compile().engine).__name__)
    """), cwd=ROOT, SOURCE=ALLOCATING_FIRST, CACHE=cache, ARTIFACT=artifact)
    for name, path, grew in rows[:6]:
        assert int(grew) < 2 << 20, f"{name}, {path} path: {int(grew) >> 10} KiB more"
    engine = {"jit": "ExecutionEngine", "shared": "SharedLibrary", "object": "ObjectEngine"}
    assert rows[6] == ["True", "[3, 6, 6]", "3", "[2, 8]", "[1, 5]",
                       "0" if artifact == "jit" else "1", engine[artifact]]


def test_nested_kernel_calls_that_unwind_free_what_each_allocated() -> None:
    # @outer allocates a temporary, then gets @kept's result (allocated in the call of
    # the other kernel, handed to this call when it returns), then fails: both are freed.
    # Or @kept fails in its own call, which frees its allocation; @outer runs on (its
    # accesses to the zeroed result skipped by boundscheck) and frees its temporary.
    rows = run_isolated(_UNWIND_PRELUDE + textwrap.dedent("""
        @mlir_kernel(source='''
        func.func private @kept(index, i64, i64) -> memref<?xi64>
        func.func @outer(%n: index, %v: i64, %b: i64, %d: i64) -> memref<?xi64> {
          %c0 = arith.constant 0 : index
          %c1 = arith.constant 1 : index
          %t = memref.alloc(%n) : memref<?xi64>
          scf.for %i = %c0 to %n step %c1 {
            memref.store %v, %t[%i] : memref<?xi64>
          }
          %m = call @kept(%n, %v, %b) : (index, i64, i64) -> memref<?xi64>
          %x = memref.load %t[%c1] : memref<?xi64>
          %q = arith.divsi %x, %d : i64
          memref.store %q, %m[%c1] : memref<?xi64>
          memref.dealloc %t : memref<?xi64>
          return %m : memref<?xi64>
        }''', session=session, callbacks=[kept])
        def outer(n, v, b, d): ...

        cases = {
            "outer fails": (lambda: outer(1000, 7, 1, 0),
                            lambda: outer.compile().call_python(1000, 7, 1, 0)),
            "inner fails": (lambda: outer(1000, 7, 0, 1),
                            lambda: outer.compile().call_python(1000, 7, 0, 1)),
        }
        for name, calls in cases.items():
            for path, call in zip(("native", "python"), calls):
                say(name, path, grown(call), outcome(call)[0])
        say(outer.compile().unwind, outer(3, 6, 2, 3).tolist(),
            outer(n=3, v=6, b=3, d=2).tolist())
    """), cwd=ROOT, SOURCE=ALLOCATING_FIRST)
    for name, path, grew, raised in rows[:4]:
        assert raised == "ZeroDivisionError", (name, path)
        assert int(grew) < 2 << 20, f"{name}, {path} path: {int(grew) >> 10} KiB more"
    assert rows[4] == ["True", "[3, 2, 6]", "[2, 3, 6]"]


def test_two_threads_failing_at_once_each_free_their_own_allocations() -> None:
    # The modules release the GIL while other threads run: both threads are in compiled
    # code at once, each with its own call records and allocation lists. Every call
    # fails, nothing leaks, and the results a thread keeps stay intact.
    rows = run_isolated(_UNWIND_PRELUDE + textwrap.dedent("""
        import threading
        from tests.threads import run_in_threads
        start = threading.Barrier(2)
        report = {}

        def work(index):
            mine = kept(1000, index + 10, 1)
            start.wait()
            outcomes = set()
            for i in range(3000):
                call = (kept, temporary, filled)[i % 3]
                outcomes.add(outcome(call, 1000, -1, 0)[0])
            report[index] = (outcomes, mine[1:].min(), mine.max(), mine[0])

        def both():
            run_in_threads(work, range(2))
            gc.collect()

        say(kept.compile().release_gil)
        both()
        before = rss_bytes()
        for _ in range(3):
            both()
        say(rss_bytes() - before)
        for index in sorted(report):
            say(index, *report[index])
    """), cwd=ROOT, SOURCE=ALLOCATING_FIRST)
    assert rows[0] == ["None"]
    assert int(rows[1][0]) < 2 << 20, f"{int(rows[1][0]) >> 10} KiB more after 18,000 calls"
    assert rows[2:] == [["0", "{'ZeroDivisionError'}", "10", "10", "10"],
                        ["1", "{'ZeroDivisionError'}", "11", "11", "11"]]


def test_results_kept_across_many_failing_calls_stay_valid() -> None:
    # Nothing a call returned is freed by a later call's unwinding (nor twice, which
    # would abort): arrays returned before thousands of failing calls that allocate and
    # fill memory with -1 still hold their values, as does a kernel-to-kernel result.
    rows = run_isolated(_UNWIND_PRELUDE + textwrap.dedent("""
        @mlir_kernel(source='''
        func.func private @kept(index, i64, i64) -> memref<?xi64>
        func.func @twice(%n: index, %v: i64, %b: i64) -> (memref<?xi64>, memref<?xi64>) {
          %a = call @kept(%n, %v, %b) : (index, i64, i64) -> memref<?xi64>
          %c = call @kept(%n, %v, %v) : (index, i64, i64) -> memref<?xi64>
          return %a, %c : memref<?xi64>, memref<?xi64>
        }''', session=session, callbacks=[kept])
        def twice(n, v, b): ...

        held = [(v, kept(1000, v, 1)) for v in range(1, 40)]
        held += [(v, filled(1000, v, 1)) for v in range(1, 40)]
        pairs = [(v, twice(1000, v, 1)) for v in range(1, 20)]
        for _ in range(2000):
            for call in (kept, temporary, filled, twice):
                outcome(call, 1000, -1, 0)
        gc.collect()
        say(all((a == v).all() for v, a in held),
            all((p[0] == v).all() and p[1][0] == 1 and (p[1][1:] == v).all()
                for v, p in pairs),
            twice(3, 4, 2)[0].tolist(), kept(3, 5, 1).tolist())
    """), cwd=ROOT, SOURCE=ALLOCATING_FIRST)
    assert rows == [["True", "True", "[2, 4, 4]", "[5, 5, 5]"]]


def test_all_code_allocates_through_the_trackers() -> None:
    # Every module allocates through the trackers, whether its calls may unwind (a
    # failure callback) or not (no callback: a kernel another one may call; shared
    # libraries), which LLVM still knows as malloc and free (an allocation nothing reads
    # is removed).
    from pymlirjit.boundary.failures import ALLOCATION_TRACKERS

    source = """
    func.func @f(%n: index, %b: i64) -> memref<?xi64> {
      %c0 = arith.constant 0 : index
      %m = memref.alloc(%n) : memref<?xi64>
      %t = memref.alloc(%n) : memref<?xi64>
      %q = arith.divsi %n_i, %b : i64
      memref.store %q, %m[%c0] : memref<?xi64>
      memref.dealloc %t : memref<?xi64>
      return %m : memref<?xi64>
    }"""
    divided = source.replace("%n_i", "%b")
    plain = source.replace("%q = arith.divsi %n_i, %b : i64", "%q = arith.addi %b, %b : i64")
    unwinding = Session().compile(divided)
    running_on = Session(shared_libs=["mlir_c_runner_utils"]).compile(divided)
    unchecked = Session().compile(plain)
    assert unwinding.f.unwind and not running_on.f.unwind
    assert not unchecked.f.unwind and not unchecked.f._links_callbacks
    for tracked in (unwinding, running_on, unchecked):
        lowered = tracked.lowered_mlir
        assert all(f"@{tracker}(" in lowered for tracker in
                   (ALLOCATION_TRACKERS["malloc"], ALLOCATION_TRACKERS["free"]))
        assert "@malloc(" not in lowered and "@free(" not in lowered
        assert '"allockind", "9"' in lowered  # what LLVM knows of malloc
    for m in (unwinding, running_on, unchecked):
        assert m.f(3, 2)[0] == (1 if m is not unchecked else 4)


PARALLEL_MAKE = """
func.func @make(%n: index, %v: i64, %d: i64) -> memref<?xi64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xi64>
  %q = arith.divsi %v, %d : i64
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %t = memref.alloc() : memref<4xi64>
    memref.store %q, %t[%c0] : memref<4xi64>
    %x = memref.load %t[%c0] : memref<4xi64>
    memref.store %x, %m[%i] : memref<?xi64>
    memref.dealloc %t : memref<4xi64>
  }
  return %m : memref<?xi64>
}
func.func @drop(%m: memref<?xi64>) {
  memref.dealloc %m : memref<?xi64>
  return
}"""


def test_a_parallel_module_allocates_memory_another_thread_frees_from_the_c_library() -> None:
    # A coroutine's frame (aligned_alloc) and a task's record (malloc in pymlirjit's
    # scheduling) are freed by the thread that runs the task: tracked on the caller's
    # list, an unwinding caller would free them again. The kernel's own buffers, and
    # every free, go through the trackers.
    from pymlirjit.boundary.failures import ALLOCATION_TRACKERS

    m = Session(parallel=True).compile(PARALLEL_MAKE)
    calls: dict[str, set[str]] = {}
    function = ""
    for line in m.lowered_mlir.splitlines():
        declared = re.match(r"\s*llvm\.func (?:internal )?@(\w+)\(.*\{$", line)
        if declared:
            function = declared.group(1)
        called = re.search(r"llvm\.call @(\w+)\(", line)
        if called and (called.group(1) in ALLOCATION_TRACKERS
                       or called.group(1) in ALLOCATION_TRACKERS.values()):
            calls.setdefault(function, set()).add(called.group(1))
    tracked = {ALLOCATION_TRACKERS["malloc"], ALLOCATION_TRACKERS["free"]}
    assert calls["make"] == {ALLOCATION_TRACKERS["malloc"]}
    assert calls["parallel_compute_fn"] == tracked
    assert calls["async_execute_fn"] == {"aligned_alloc", ALLOCATION_TRACKERS["free"]}
    assert calls["__pymlirjit_par_execute"] == {"malloc"}
    assert calls["__pymlirjit_par_once"] == {ALLOCATION_TRACKERS["free"]}  # runs a task
    assert m.make(10, 3, 1).tolist() == [3] * 10


@pytest.mark.parametrize("kind", ["shared-libs", "parallel"])
def test_an_unwound_call_frees_what_kernels_with_shared_libraries_allocated_for_it(
        kind: str) -> None:
    # @make's module has shared libraries (MLIR's runner utils, or the async runtime of
    # parallel=True: its loop runs on worker threads too), so its calls cannot unwind,
    # and it has a failure callback, so its calls have a record of their own (without a
    # jump buffer). Called by @held's code, its result goes on @held's list, which @held
    # frees when it unwinds (8 KB a call leaked before); @drop's free takes it off
    # (@handed: freed once, not again when @handed unwinds).
    rows = run_isolated(_GROWN + textwrap.dedent("""
        options = {"shared-libs": {"session": Session(shared_libs=["mlir_c_runner_utils"])},
                   "parallel": {"session": Session(parallel=True)}}[KIND]
        make = mlir_kernel(source=SOURCE, name="make", **options)(lambda n, v, d: None)
        drop = mlir_kernel(source=SOURCE, name="drop", **options)(lambda m: None)
        outer = mlir_kernel(callbacks=[make, drop], name="held", source='''
        func.func private @make(index, i64, i64) -> memref<?xi64>
        func.func private @drop(memref<?xi64>)
        func.func @held(%n: index, %v: i64, %b: i64) -> i64 {
          %c0 = arith.constant 0 : index
          %one = arith.constant 1 : i64
          %m = call @make(%n, %v, %one) : (index, i64, i64) -> memref<?xi64>
          %x = memref.load %m[%c0] : memref<?xi64>
          %q = arith.divsi %x, %b : i64
          call @drop(%m) : (memref<?xi64>) -> ()
          return %q : i64
        }
        func.func @handed(%n: index, %v: i64, %b: i64) -> i64 {
          %c0 = arith.constant 0 : index
          %one = arith.constant 1 : i64
          %m = call @make(%n, %v, %one) : (index, i64, i64) -> memref<?xi64>
          %x = memref.load %m[%c0] : memref<?xi64>
          call @drop(%m) : (memref<?xi64>) -> ()
          %q = arith.divsi %x, %b : i64
          return %q : i64
        }''')(lambda n, v, b: None)
        m = outer.compile().module
        say(make.compile().unwind, make.compile()._links_callbacks, m.held.unwind,
            m.held(1000, 6, 2), m.handed(1000, 6, 3), make(3, 4, 1).tolist())
        for name, call in [("held", lambda: m.held(1000, 6, 0)),
                           ("python path", lambda: m.held.call_python(1000, 6, 0)),
                           ("handed", lambda: m.handed(1000, 6, 0))]:
            say(name, grown(call))
    """), cwd=ROOT, SOURCE=PARALLEL_MAKE, KIND=kind)
    # A parallel @make's worker threads may call Python (its failure callback): @held,
    # which links it, then releases the GIL and runs on at a failure (issue 31 item 2).
    unwinds = "True" if kind == "shared-libs" else "False"
    assert rows[0] == ["False", "True", unwinds, "3", "2", "[4, 4, 4]"]
    for name, grew in rows[1:4]:
        assert int(grew) < 2 << 20, f"{name}: {int(grew) >> 10} KiB more"


CALLBACK_RESULTS = """
func.func private @give(index) -> memref<?xf64>
func.func private @pair(index) -> (memref<?xf64>, i64)
func.func @held(%n: index, %b: i64) -> f64 {
  %c0 = arith.constant 0 : index
  %m = call @give(%n) : (index) -> memref<?xf64>
  %x = memref.load %m[%c0] : memref<?xf64>
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %f = arith.sitofp %q : i64 to f64
  %r = arith.addf %x, %f : f64
  memref.dealloc %m : memref<?xf64>
  return %r : f64
}
func.func @freed_first(%n: index, %b: i64) -> f64 {
  %c0 = arith.constant 0 : index
  %m = call @give(%n) : (index) -> memref<?xf64>
  %x = memref.load %m[%c0] : memref<?xf64>
  memref.dealloc %m : memref<?xf64>
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %f = arith.sitofp %q : i64 to f64
  %r = arith.addf %x, %f : f64
  return %r : f64
}
func.func @returned(%n: index, %b: i64) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %m = call @give(%n) : (index) -> memref<?xf64>
  %c7 = arith.constant 7 : i64
  %q = arith.divsi %c7, %b : i64
  %f = arith.sitofp %q : i64 to f64
  memref.store %f, %m[%c0] : memref<?xf64>
  return %m : memref<?xf64>
}
func.func @paired(%n: index, %b: i64) -> f64 {
  %c0 = arith.constant 0 : index
  %m, %k = call @pair(%n) : (index) -> (memref<?xf64>, i64)
  %x = memref.load %m[%c0] : memref<?xf64>
  %q = arith.divsi %k, %b : i64
  %f = arith.sitofp %q : i64 to f64
  %r = arith.addf %x, %f : f64
  memref.dealloc %m : memref<?xf64>
  return %r : f64
}"""


def test_an_unwound_call_frees_the_arrays_its_callbacks_returned() -> None:
    # @give's array is copied into malloc memory the call owns (by a trampoline), as
    # @pair's first result is (by the native wrapper of its ctypes entry: two results).
    # A call that unwinds before it frees that memory frees it (8 KB a call leaked
    # before: 40 MB over 5,000 calls); one that freed it first does not free it again
    # (that would abort); one that returns it to Python does not free it. A callback
    # whose second result is wrong fails the call, and the copy of its first is freed.
    rows = run_isolated(_GROWN + textwrap.dedent("""
        from pymlirjit import callback

        session = Session()
        bad_second = []

        @callback("(index) -> memref<?xf64>", name="give", session=session)
        def give(n):
            return np.full(n, 2.0)

        @callback("(index) -> (memref<?xf64>, i64)", name="pair", session=session)
        def pair(n):
            return np.full(n, 3.0), ("seven" if bad_second else 7)

        m = session.compile(SOURCE)

        def wrong_result():
            try:
                m.paired(1000, 1)
            except TypeError:
                raise ZeroDivisionError from None

        say(m.held.unwind, m.held(1000, 7), m.freed_first(1000, 1), m.paired(1000, 7),
            m.returned(3, 2).tolist())
        for name, call in [("held", lambda: m.held(1000, 0)),
                           ("python path", lambda: m.held.call_python(1000, 0)),
                           ("freed first", lambda: m.freed_first(1000, 0)),
                           ("returned", lambda: m.returned(1000, 0)),
                           ("two results", lambda: m.paired(1000, 0))]:
            say(name, grown(call))
        bad_second.append(True)
        say("wrong second result", grown(wrong_result))
        bad_second.clear()
        kept = [m.returned(1000, 1) for _ in range(50)]
        for _ in range(2000):
            outcome(m.returned, 1000, 0)
        say(all(a[0] == 7 and (a[1:] == 2).all() for a in kept), m.paired(2, 1))
    """), cwd=ROOT, SOURCE=CALLBACK_RESULTS)
    assert rows[0] == ["True", "3.0", "9.0", "4.0", "[3.0, 2.0, 2.0]"]
    for name, grew in rows[1:7]:
        assert int(grew) < 2 << 20, f"{name}: {int(grew) >> 10} KiB more"
    assert rows[7] == ["True", "10.0"]


PLAIN_KERNELS = """
func.func @make(%n: index, %v: i64) -> memref<?xi64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xi64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %m[%i] : memref<?xi64>
  }
  return %m : memref<?xi64>
}
func.func @drop(%m: memref<?xi64>) {
  memref.dealloc %m : memref<?xi64>
  return
}"""


@pytest.mark.parametrize("artifact", ["jit", "shared"])
def test_an_unwound_call_frees_what_kernels_that_cannot_unwind_allocated_for_it(
        artifact: str, tmp_path: Path) -> None:
    # @make and @drop have no callback (their calls cannot unwind), yet allocate and
    # free through the trackers: called by @outer's code, @make's result goes on
    # @outer's list (freed when @outer unwinds: 8 KB a call leaked before), and @drop's
    # free of @outer's buffer takes it off (before, @outer's unwinding freed it again
    # and aborted), as does @drop's free of it called from Python by @outer's callback
    # (@released). @make called from Python inside @outer's callback returns an array
    # Python owns: @outer's unwinding leaves it alone.
    rows = run_isolated(_GROWN + textwrap.dedent("""
        from pymlirjit import callback, i64

        session = Session(cache_dir=CACHE)
        kept = []

        @mlir_kernel(source=SOURCE, name="make", session=session)
        def make(n, v): ...
        @mlir_kernel(source=SOURCE, name="drop", session=session)
        def drop(m): ...

        @callback(session=session)
        def keep(v: i64) -> i64:
            kept.append(make(1000, v))
            return v

        @callback("(memref<?xi64>) -> ()", name="release", session=session)
        def release(a):
            drop(a)

        @mlir_kernel(session=session, callbacks=[make, drop], name="held", source='''
        func.func private @make(index, i64) -> memref<?xi64>
        func.func private @drop(memref<?xi64>)
        func.func private @keep(i64) -> i64
        func.func private @release(memref<?xi64>)
        func.func @held(%n: index, %v: i64, %b: i64) -> i64 {
          %c0 = arith.constant 0 : index
          %m = call @make(%n, %v) : (index, i64) -> memref<?xi64>
          %x = memref.load %m[%c0] : memref<?xi64>
          %q = arith.divsi %x, %b : i64
          memref.dealloc %m : memref<?xi64>
          return %q : i64
        }
        func.func @handed(%n: index, %v: i64, %b: i64) -> i64 {
          %c0 = arith.constant 0 : index
          %t = memref.alloc(%n) : memref<?xi64>
          memref.store %v, %t[%c0] : memref<?xi64>
          %x = memref.load %t[%c0] : memref<?xi64>
          call @drop(%t) : (memref<?xi64>) -> ()
          %q = arith.divsi %x, %b : i64
          return %q : i64
        }
        func.func @released(%n: index, %b: i64) -> i64 {
          %t = memref.alloc(%n) : memref<?xi64>
          call @release(%t) : (memref<?xi64>) -> ()
          %c7 = arith.constant 7 : i64
          %q = arith.divsi %c7, %b : i64
          return %q : i64
        }
        func.func @from_python(%v: i64, %b: i64) -> i64 {
          %k = call @keep(%v) : (i64) -> i64
          %q = arith.divsi %k, %b : i64
          return %q : i64
        }''')
        def outer(n, v, b): ...

        m = outer.compile().module
        say(make.compile().unwind, m.held.unwind, make(3, 4).tolist(), m.held(1000, 6, 2),
            m.handed(1000, 6, 3), m.from_python(6, 3), m.released(1000, 7),
            type(make.compile().engine).__name__)
        for name, call in [("held", lambda: m.held(1000, 6, 0)),
                           ("python path", lambda: m.held.call_python(1000, 6, 0)),
                           ("handed", lambda: m.handed(1000, 6, 0)),
                           ("released", lambda: m.released(1000, 0))]:
            say(name, grown(call))
        for v in range(300):
            outcome(m.from_python, v, 0)
            outcome(m.held, 1000, v, 0)
        gc.collect()
        say(len(kept), all((a == v).all() for v, a in enumerate(kept[1:])))
    """), cwd=ROOT, SOURCE=PLAIN_KERNELS, CACHE=None if artifact == "jit" else str(tmp_path))
    engine = {"jit": "ExecutionEngine", "shared": "SharedLibrary"}[artifact]
    assert rows[0] == ["False", "True", "[4, 4, 4]", "3", "2", "2", "1", engine]
    for name, grew in rows[1:5]:
        assert int(grew) < 2 << 20, f"{name}: {int(grew) >> 10} KiB more"
    assert rows[5] == ["301", "True"]


def test_division_of_i128_is_checked() -> None:
    # The checks' constants for i128 (its minimum, for the overflow check) exceed int64.
    from pymlirjit import Session

    module = Session().compile("""
func.func @div(%a: i64, %b: i64) -> i64 {
  %x = arith.extsi %a : i64 to i128
  %y = arith.extsi %b : i64 to i128
  %q = arith.divsi %x, %y : i128
  %r = arith.trunci %q : i128 to i64
  return %r : i64
}""")
    assert module.div(-7, 2) == -3
    with pytest.raises(ZeroDivisionError):
        module.div(1, 0)
