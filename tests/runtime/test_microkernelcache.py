"""Microkernels lowered once per process: a module whose microkernel was lowered apart (now
or by an earlier module) is the module lowered whole, and its code computes the same."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import Session
from pymlirjit.codegen.options import CompileOptions
from pymlirjit.runtime import microkernelcache
from pymlirjit.runtime.prepare import lower, prepare
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


@pytest.fixture(autouse=True)
def empty_cache() -> Any:
    microkernelcache.clear()
    yield
    microkernelcache.clear()


def lowered(source: str, filename: str = "<source>", **options: Any) -> list[str]:
    """The top-level ops of ``source`` lowered, as text, sorted (their order may differ)."""
    compile_options = CompileOptions.make(**options)
    prepared = prepare(source, compile_options, lambda name: None, filename)
    return sorted(str(op) for op in lower(prepared, compile_options).module.body.operations)


@pytest.mark.parametrize("options", [{}, {"opt_level": 3}, {"fastmath": True},
                                     {"error_model": "numpy"}], ids=repr)
@pytest.mark.parametrize("source", [MATMULS, BATCH], ids=["two matmuls", "batch"])
def test_a_module_is_lowered_alike_with_microkernels_lowered_apart(
        monkeypatch: pytest.MonkeyPatch, source: str, options: dict[str, Any]) -> None:
    monkeypatch.setattr(microkernelcache, "ENABLED", False)
    whole = lowered(source, "first.mlir", **options)
    assert any("__pymlirjit_matmul" in op for op in whole)
    monkeypatch.setattr(microkernelcache, "ENABLED", True)
    apart = lowered(source, "first.mlir", **options)  # lowered now, kept
    assert len(microkernelcache._lowered) == (2 if source is MATMULS else 1)
    # Another file and source, the kept microkernels: nothing of the first may leak in.
    renamed = source.replace("@two", "@other").replace("@batch", "@other")
    kept = lowered(renamed, "second.mlir", **options)
    monkeypatch.setattr(microkernelcache, "ENABLED", False)
    assert apart == whole
    assert kept == lowered(renamed, "second.mlir", **options)


def test_options_and_types_are_part_of_the_key() -> None:
    lowered(ONE)
    lowered(ONE, fastmath=True)
    lowered(ONE.replace("f32", "f64"))
    lowered(ONE)
    assert len(microkernelcache._lowered) == 3


def test_the_least_recently_used_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    f64 = ONE.replace("f32", "f64")
    strided = ONE.replace("xf32>", "xf32, strided<[?, 1], offset: ?>>")
    keys = {}
    for source in (ONE, f64, strided):
        microkernelcache.clear()
        lowered(source)
        (keys[source],) = microkernelcache._lowered
    microkernelcache.clear()
    monkeypatch.setattr(microkernelcache, "_KEPT", 2)
    for source in (ONE, f64, ONE, f64, strided):
        lowered(source)
    # f64 was used after f32: f32 went when the strided one came.
    assert list(microkernelcache._lowered) == [keys[f64], keys[strided]]


def test_parallel_microkernels_stay_in_their_module() -> None:
    session = Session()
    module = session.compile(ONE, parallel=True)
    assert not microkernelcache._lowered
    check_one(module.one)


def check_one(one: Any, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for m, k, n in [(1, 1, 1), (7, 13, 33), (61, 5, 17), (200, 64, 31)]:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
        expected = c + a @ b
        one(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


def test_modules_sharing_a_microkernel_compute_alike() -> None:
    first = Session().compile(ONE).one
    second = Session().compile(ONE.replace("@one", "@again")).again  # the kept one
    assert len(microkernelcache._lowered) == 1
    check_one(first)
    check_one(second, seed=1)


def test_threads_compiling_at_once_get_correct_code() -> None:
    def compile_and_run(index: int) -> None:
        if index == 2:
            microkernelcache.clear()  # from another thread, during the others' compiles
        name = f"k{index}"
        check_one(getattr(Session().compile(ONE.replace("@one", f"@{name}")), name), index)

    run_in_threads(compile_and_run, range(4))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_compiles_with_the_kept_microkernels() -> None:
    check_one(Session().compile(ONE).one)
    assert microkernelcache._lowered
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's outcome is its exit status
        try:
            check_one(Session().compile(ONE.replace("@one", "@child")).child, 3)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_module_stored_on_disk_holds_its_microkernel(tmp_path: Path) -> None:
    check_one(Session().compile(ONE).one)  # kept: the next module splices it
    writer = Session(cache_dir=tmp_path)
    check_one(writer.compile(ONE.replace("@one", "@disk")).disk)
    reader = Session(cache_dir=tmp_path)
    module = reader.compile(ONE.replace("@one", "@disk"))
    assert reader.cache_info().disk_hits == 1
    check_one(module.disk, 5)


def test_a_microkernel_calling_its_modules_code_is_not_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # None does; one that did would carry that code into other modules.
    real = microkernelcache._is_declaration
    monkeypatch.setattr(microkernelcache, "_is_declaration", lambda op: False)
    lowered(ONE)
    assert not microkernelcache._lowered
    monkeypatch.setattr(microkernelcache, "_is_declaration", real)
    lowered(ONE)
    assert len(microkernelcache._lowered) == 1
