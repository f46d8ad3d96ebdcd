"""Matmul microkernels compiled once per process and linked into every module calling one:
each module computes what it computes with its microkernels kept inside it, through
threads, forks, a forgotten cache and the disk cache (in processes that never compiled
the microkernel)."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import LinkError, Session
from pymlirjit.codegen.options import CompileOptions
from pymlirjit.runtime import microkernelcache
from pymlirjit.runtime.cacheentry import decode_entry
from pymlirjit.runtime.prepare import PreparedModule, lower, prepare
from pymlirjit.runtime.sharedlib import c_compiler
from tests.threads import run_in_threads

MATMULS = """
func.func @two(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>,
               %x: memref<?x?xf64>, %y: memref<?x?xf64>, %z: memref<?x?xf64>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  linalg.matmul ins(%x, %y : memref<?x?xf64>, memref<?x?xf64>) outs(%z : memref<?x?xf64>)
  return
}
"""

BATCH = """
func.func @batch(%a: memref<?x?x?xf64>, %b: memref<?x?x?xf64>, %c: memref<?x?x?xf64>) {
  linalg.batch_matmul ins(%a, %b : memref<?x?x?xf64>, memref<?x?x?xf64>)
                      outs(%c : memref<?x?x?xf64>)
  return
}
"""

ONE = """
func.func @one(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

#: A microkernel as its module declares it once compiled apart.
DECLARED = re.compile(r"llvm\.func @__pymlirjit_matmul_[0-9a-f]{24}\([^)]*\)"
                      r"( attributes \{[^{}]*\})?$", re.M)
#: A microkernel defined, as a module's ``lowered_mlir`` shows the ones it links.
DEFINED = re.compile(r"llvm\.func @__pymlirjit_matmul_[0-9a-f]{24}\(%arg0")


def shows_its_microkernels(text: str, count: int) -> bool:
    """Whether ``text`` (a ``lowered_mlir``) parses and defines ``count`` microkernels."""
    from mlir import ir

    ir.Module.parse(text, ir.Context())
    return len(DEFINED.findall(text)) == count and not DECLARED.search(text)


@pytest.fixture(autouse=True)
def empty_cache() -> Any:
    microkernelcache.clear()
    yield
    microkernelcache.clear()


def lowered(source: str, **options: Any) -> PreparedModule:
    compile_options = CompileOptions.make(**options)
    return lower(prepare(source, compile_options, lambda name: None, "<source>"),
                 compile_options)


def operands(shapes: list[tuple[int, ...]], dtype: Any, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(dtype) for shape in shapes]


def check_two(two: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Run @two of MATMULS on edge shapes against numpy; its last results."""
    for m, k, n in [(1, 1, 1), (7, 13, 33), (61, 5, 17), (200, 64, 31), (0, 3, 2)]:
        a, b, c = operands([(m, k), (k, n), (m, n)], np.float32, seed)
        x, y, z = operands([(n, k), (k, m), (n, m)], np.float64, seed + 1)
        expected = (c + a @ b, z + x @ y)
        two(a, b, c, x, y, z)
        np.testing.assert_allclose(c, expected[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(z, expected[1], rtol=1e-12, atol=1e-12)
    return c, z


def check_one(one: Any, seed: int = 0) -> None:
    for m, k, n in [(1, 1, 1), (7, 13, 33), (61, 5, 17), (200, 64, 31)]:
        a, b, c = operands([(m, k), (k, n), (m, n)], np.float32, seed)
        expected = c + a @ b
        one(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{}, {"opt_level": 3}, {"fastmath": True},
                                     {"error_model": "numpy"}], ids=repr)
def test_modules_compute_alike_with_microkernels_compiled_apart(
        monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]) -> None:
    monkeypatch.setattr(microkernelcache, "ENABLED", False)
    whole = Session(**options).compile(MATMULS)
    assert not DECLARED.search(whole.lowered_mlir)
    monkeypatch.setattr(microkernelcache, "ENABLED", True)
    first = Session(**options).compile(MATMULS)  # compiled now, kept
    assert len(microkernelcache._compiled) == 2
    kept = Session(**options).compile(MATMULS.replace("@two", "@other"))
    assert len(microkernelcache._compiled) == 2
    assert len(DECLARED.findall(str(lowered(MATMULS, **options).module))) == 2
    for module in (first, kept):  # as they run: the microkernels' code shown in place
        assert shows_its_microkernels(module.lowered_mlir, 2)
    results = [check_two(function, seed=3) for function in (whole.two, first.two, kept.other)]
    for apart in results[1:]:  # the same machine code, compiled apart or inside
        for got, expected in zip(apart, results[0], strict=True):
            np.testing.assert_array_equal(got, expected)


def test_a_batch_matmul_calls_its_microkernel_compiled_apart() -> None:
    module = Session().compile(BATCH)
    assert shows_its_microkernels(module.lowered_mlir, 1)
    assert len(DECLARED.findall(str(lowered(BATCH).module))) == 1
    a, b, c = operands([(3, 17, 9), (3, 9, 26), (3, 17, 26)], np.float64, 0)
    expected = c + a @ b
    module.batch(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


def test_one_microkernel_serves_two_matmuls_alike() -> None:
    twice = ONE.replace("  return", "  linalg.matmul ins(%a, %b : memref<?x?xf32>, "
                        "memref<?x?xf32>) outs(%c : memref<?x?xf32>)\n  return")
    prepared = lowered(twice)
    assert len(prepared.microkernels) == 1
    module = Session().compile(twice)
    a, b, c = operands([(9, 4), (4, 5), (9, 5)], np.float32, 0)
    expected = c + 2 * (a @ b)
    module.one(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


def test_a_microkernel_compiled_before_is_found_by_its_recipe_not_generated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A module only declares its microkernels until split_off: those compiled before
    # (the same recipe, opt level) are never generated, parsed or digested again.
    from pymlirjit.codegen import microkernelrecipes

    generated: list[tuple[Any, ...]] = []
    generate = microkernelrecipes.microkernel

    def counted(*args: Any) -> str:
        generated.append(args)
        return generate(*args)

    monkeypatch.setattr(microkernelrecipes, "microkernel", counted)
    twice = ONE.replace("  return", "  linalg.matmul ins(%a, %b : memref<?x?xf32>, "
                        "memref<?x?xf32>) outs(%c : memref<?x?xf32>)\n  return")
    first = Session().compile(twice)
    assert len(generated) == 1  # two matmuls, one recipe
    again = Session().compile(twice.replace("@one", "@again"))
    assert len(generated) == 1 and len(microkernelcache._by_recipe) == 1
    assert shows_its_microkernels(again.lowered_mlir, 1)
    for kernel in (first.one, again.again):
        a, b, c = operands([(13, 7), (7, 40), (13, 40)], np.float32, 3)
        expected = c + 2 * (a @ b)
        kernel(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    Session().compile(twice, opt_level=3)  # another opt level: generated again
    assert len(generated) == 2
    microkernelcache.clear()  # forgotten: generated again
    check_one(Session().compile(ONE).one)
    assert len(generated) == 3


def test_a_declaration_naming_no_recipe_of_this_process_is_left_alone() -> None:
    # What a source writes in pymlirjit's attribute is not a microkernel of this
    # process: a declaration like any other, which nothing defines.
    source = ONE.replace("  return", "  call @planted(%a, %b, %c) : (memref<?x?xf32>, "
                         "memref<?x?xf32>, memref<?x?xf32>) -> ()\n  return") + (
        "func.func private @planted(memref<?x?xf32>, memref<?x?xf32>, memref<?x?xf32>) "
        'attributes {pymlirjit.microkernel = "0123456789abcdef01234567"}\n')
    with pytest.raises(LinkError, match="@planted"):
        Session().compile(source)


def test_the_opt_level_and_types_are_part_of_the_key() -> None:
    lowered(ONE)
    lowered(ONE, opt_level=3)
    lowered(ONE.replace("f32", "f64"))
    lowered(ONE, fastmath=True)  # the same microkernel MLIR, compiled alike: no new key
    lowered(ONE)
    assert len(microkernelcache._compiled) == 3


def test_the_least_recently_used_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    f32, f64, third = (ONE, 2), (ONE.replace("f32", "f64"), 2), (ONE, 3)
    keys = {}
    for source, opt_level in (f32, f64, third):
        microkernelcache.clear()
        lowered(source, opt_level=opt_level)
        (keys[source, opt_level],) = microkernelcache._compiled
    microkernelcache.clear()
    monkeypatch.setattr(microkernelcache, "_KEPT", 2)
    for source, opt_level in (f32, f64, f32, f64, third):
        lowered(source, opt_level=opt_level)
    # f64 was used after f32: f32 went when the third one came, and with it its recipe
    # (the next f32 module compiles its microkernel again).
    assert list(microkernelcache._compiled) == [keys[f64], keys[third]]
    assert {opt for _, opt in microkernelcache._by_recipe} == {2, 3}
    assert len(microkernelcache._by_recipe) == 2
    lowered(ONE)
    assert list(microkernelcache._compiled) == [keys[third], keys[f32]]


def test_a_strided_matmul_shares_the_microkernel_of_a_plain_one() -> None:
    # The microkernel takes rows of unit stride whatever their layout: one recipe.
    lowered(ONE)
    lowered(ONE.replace("xf32>", "xf32, strided<[?, 1], offset: ?>>"))
    assert len(microkernelcache._compiled) == len(microkernelcache._by_recipe) == 1


def test_parallel_microkernels_stay_in_their_module() -> None:
    module = Session().compile(ONE, parallel=True)
    assert not microkernelcache._compiled
    assert not DECLARED.search(module.lowered_mlir) and not DEFINED.search(module.lowered_mlir)
    check_one(module.one)


def test_modules_share_one_compiled_microkernel() -> None:
    first = lowered(ONE)
    second = lowered(ONE.replace("@one", "@again"))
    assert list(first.microkernels) == list(second.microkernels)
    (compiled,) = first.microkernels.values()
    assert second.microkernels[compiled.symbol] is compiled
    check_one(Session().compile(ONE).one)
    check_one(Session().compile(ONE.replace("@one", "@again")).again, seed=1)


def test_a_module_keeps_its_microkernel_after_the_cache_forgets_it() -> None:
    module = Session().compile(ONE)
    microkernelcache.clear()
    for _ in range(3):  # other microkernels take the place; nothing else holds the first
        lowered(ONE.replace("f32", "f64"))
        microkernelcache.clear()
    gc.collect()
    check_one(module.one, seed=2)


def test_threads_compiling_at_once_get_correct_code() -> None:
    def compile_and_run(index: int) -> None:
        if index == 2:
            microkernelcache.clear()  # from another thread, during the others' compiles
        name = f"k{index}"
        check_one(getattr(Session().compile(ONE.replace("@one", f"@{name}")), name), index)

    run_in_threads(compile_and_run, range(4))


#: For the scripts the tests run: ``check(function, seed, shapes)`` runs an f32 @one-like
#: function (C += A @ B) on random operands of each (m, k, n) against numpy.
CHECK_SCRIPT = """
import numpy as np

def check(function, seed, shapes=((1, 1, 1), (61, 5, 17), (200, 64, 31))):
    rng = np.random.default_rng(seed)
    for m, k, n in shapes:
        a, b, c = (rng.uniform(-1, 1, s).astype(np.float32) for s in [(m, k), (k, n), (m, n)])
        expected = c + a @ b
        function(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
"""

#: Compiles @one (argv[1]) and forks: the child compiles @child with the kept microkernel
#: and runs both against numpy; prints the child's exit status.
FORKER = CHECK_SCRIPT + """
import os, sys
from pymlirjit import Session
from pymlirjit.runtime import microkernelcache

parent = Session().compile(sys.argv[1]).one
check(parent, 0)
assert len(microkernelcache._compiled) == 1
pid = os.fork()
if pid == 0:
    try:
        check(Session().compile(sys.argv[1].replace("@one", "@child")).child, 3)
        check(parent, 4)
        os._exit(0 if len(microkernelcache._compiled) == 1 else 2)
    except BaseException:
        os._exit(1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_links_the_kept_microkernels() -> None:
    # In a child process with a timeout: a lock held across the fork would hang it.
    done = subprocess.run([sys.executable, "-c", FORKER, ONE], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.split() == ["0"]


#: Loads @disk from the cache folder argv[1] in a process that never compiled a
#: microkernel, and runs it against numpy.
LOADER = CHECK_SCRIPT + """
import sys
from pymlirjit import Session
from pymlirjit.runtime import microkernelcache
session = Session(cache_dir=sys.argv[1])
module = session.compile(sys.argv[2])
assert session.cache_info().disk_hits == 1, session.cache_info()
assert not microkernelcache._compiled
check(module.disk, 7, [(1, 1, 1), (37, 300, 19), (128, 64, 96)])
print(type(module.engine).__name__)
"""


@pytest.mark.parametrize("kind", ["shared", "object"])
def test_a_module_stored_on_disk_holds_its_microkernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    if kind == "shared" and c_compiler() is None:
        pytest.skip("needs a C compiler")
    if kind == "object":
        monkeypatch.setenv("CC", "")  # no C compiler: the entry holds object files
    source = ONE.replace("@one", "@disk")
    check_one(Session().compile(ONE).one)  # compiled and kept: the next module links it
    writer = Session(cache_dir=tmp_path)
    check_one(writer.compile(source).disk)
    (entry,) = tmp_path.glob("*.entry")
    decoded = decode_entry(entry.read_bytes(), entry.name.removesuffix(".entry"),
                           (tmp_path / "secret.key").read_bytes())
    assert decoded.kind == kind
    assert len(decoded.objects) == (kind == "object")
    assert shows_its_microkernels(decoded.lowered_mlir, 1)
    assert not any(symbol.startswith("__pymlirjit_matmul") for symbol in decoded.needed)
    monkeypatch.delenv("CC", raising=False)
    done = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path), source],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.split() == [{"shared": "SharedLibrary", "object": "ObjectEngine"}[kind]]


def test_a_microkernel_calling_its_modules_code_stays_in_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # None does; one that did would need its module's code.
    monkeypatch.setattr(microkernelcache, "_refers_to_symbols", lambda function: True)
    prepared = lowered(ONE)
    assert not microkernelcache._compiled and not prepared.microkernels
    assert not DECLARED.search(str(prepared.module))
    check_one(Session().compile(ONE).one)
    monkeypatch.undo()
    assert len(lowered(ONE).microkernels) == 1


def test_references_to_other_symbols_are_found() -> None:
    from mlir import ir

    with ir.Context():
        module = ir.Module.parse("""
            func.func private @helper(f32) -> f32
            func.func @calls(%x: f32) -> f32 {
              %y = func.call @helper(%x) : (f32) -> f32
              return %y : f32
            }
            func.func @alone(%x: f32) -> f32 {
              %y = arith.addf %x, %x : f32
              return %y : f32
            }""")
        _helper, calls, alone = module.body.operations
    assert microkernelcache._refers_to_symbols(calls)
    assert not microkernelcache._refers_to_symbols(alone)


def test_set_aside_compiles_as_a_first_module_and_keeps_the_others() -> None:
    lowered(ONE)
    (key,) = microkernelcache._compiled
    kept = microkernelcache._compiled[key]
    with microkernelcache.set_aside():
        assert not microkernelcache._compiled
        first = lowered(ONE)  # compiled again: its own code
        assert first.microkernels[kept.symbol] is not kept
    assert microkernelcache._compiled == {key: kept}
    with pytest.raises(ZeroDivisionError), microkernelcache.set_aside():
        lowered(ONE.replace("f32", "f64"))
        1 / 0  # noqa: B018
    assert microkernelcache._compiled == {key: kept}


def test_a_kept_microkernel_outlives_the_module_that_compiled_it() -> None:
    first = Session().compile(ONE)
    check_one(first.one)
    del first  # its context, its MLIR and its engine go; the microkernel's code stays
    gc.collect()
    check_one(Session().compile(ONE.replace("@one", "@later")).later, seed=6)


def test_a_callback_forgets_and_compiles_microkernels_between_two_matmuls() -> None:
    from pymlirjit import callback

    session = Session()
    compiled: list[Any] = []

    @callback("(i64) -> ()", name="meddle", session=session)
    def meddle(step: int) -> None:
        microkernelcache.clear()  # from inside the call, between its two matmuls
        compiled.append(Session().compile(ONE.replace("@one", f"@inner{step}")))

    source = ONE.replace("  return", """  %step = arith.constant 1 : i64
  func.call @meddle(%step) : (i64) -> ()
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return""") + "func.func private @meddle(i64) -> ()\n"
    module = session.compile(source)
    a, b, c = operands([(37, 19), (19, 29), (37, 29)], np.float32, 9)
    expected = c + 2 * (a @ b)
    module.one(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    check_one(compiled[0].inner1, seed=10)


def test_a_failed_build_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    # LLVM failing on a microkernel fails its module's compile with that error; nothing
    # is kept, and the next compile builds the microkernel again.
    from pymlirjit.errors import MLIRError
    from pymlirjit.runtime import microkernelbuild

    def failing(ir_text: str, opt_level: int = 2) -> bytes:
        raise MLIRError("LLVM cannot read a microkernel's IR: injected")

    monkeypatch.setattr(microkernelbuild, "object_code", failing)
    with pytest.raises(MLIRError, match="injected"):
        Session().compile(ONE)
    assert not microkernelcache._compiled
    monkeypatch.undo()
    check_one(Session().compile(ONE).one)
    assert len(microkernelcache._compiled) == 1
