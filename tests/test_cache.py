"""The on-disk compile cache: cross-process hits, keys, corrupted entries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pymlirjit import Session, callback, f64
from pymlirjit.cache import DiskCache, decode_signature, encode_signature
from pymlirjit.signature import as_signature

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from pymlirjit import MemRef, Session, callback, f64
    session = Session(cache_dir=sys.argv[1])

    @callback(session=session)
    def hook(x: f64) -> f64:
        return x * FACTOR

    @callback(session=session)
    def total(a: MemRef[f64, None]) -> f64:
        return float(a.sum())

    module = session.compile('''
    func.func @run(%x: f64) -> f64 {
      %r = call @hook(%x) : (f64) -> f64
      %s = math.sqrt %r : f64
      return %s : f64
    }
    func.func @sum(%a: memref<?xf64>) -> f64 {
      %r = call @total(%a) : (memref<?xf64>) -> f64
      return %r : f64
    }
    func.func @pair(%a: complex<f64>, %h: f16) -> (complex<f64>, f16) {
      return %a, %h : complex<f64>, f16
    }
    func.func private @hook(f64) -> f64
    func.func private @total(memref<?xf64>) -> f64
    ''')
    cache = session.disk_cache
    print(module.run(2.0), module.sum(np.arange(4.0)), module.pair(1 + 2j, 0.5),
          type(module.engine).__name__, cache.hits, cache.misses,
          "llvm" if "llvmlite.binding" in sys.modules else "no-llvm")
""")

NO_COMPILER = {"CC": ""}  # no C compiler: entries hold object code


def run(cache_dir: Path, factor: str = "8", env: dict[str, str] | None = None,
        warning: str = "") -> list[str]:
    """The script's output; its stderr must be empty, or the one warning (a fragment)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT.replace("FACTOR", factor),
                           str(cache_dir)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    if warning:
        assert len(done.stderr.splitlines()) == 1 and warning in done.stderr, done.stderr
    else:
        assert done.stderr == ""
    return done.stdout.split()


def names(folder: Path) -> list[str]:
    """The files of a cache folder, entries named by their suffix."""
    return sorted(".entry" if p.suffix == ".entry" else p.name for p in folder.iterdir())


CACHE_FILES = [".entry", "CACHEDIR.TAG", "secret.key"]


VALUES = ["4.0", "6.0", "((1+2j),", "0.5)"]


def test_a_new_process_loads_the_shared_library_an_earlier_one_linked(tmp_path: Path,
                                                                        ) -> None:
    first = run(tmp_path)
    assert first == [*VALUES, "SharedLibrary", "0", "1", "llvm"]
    assert names(tmp_path) == CACHE_FILES
    # Loading needs neither MLIR's engine nor LLVM: llvmlite's binding is not imported.
    assert run(tmp_path) == [*VALUES, "SharedLibrary", "1", "0", "no-llvm"]


def test_without_a_c_compiler_entries_hold_object_code(tmp_path: Path) -> None:
    first = run(tmp_path, env=NO_COMPILER)
    assert first == [*VALUES, "ExecutionEngine", "0", "1", "llvm"]
    assert names(tmp_path) == CACHE_FILES
    assert run(tmp_path, env=NO_COMPILER)[:-1] == [*VALUES, "ObjectEngine", "1", "0"]
    # An object entry serves processes that could link a library too.
    assert run(tmp_path)[:-1] == [*VALUES, "ObjectEngine", "1", "0"]


def test_a_corrupted_or_truncated_entry_is_compiled_again(tmp_path: Path) -> None:
    run(tmp_path)
    (entry,) = tmp_path.glob("*.entry")
    entry.write_bytes(entry.read_bytes()[:-100])
    assert run(tmp_path, warning="(digest)")[-4:-1] == ["SharedLibrary", "0", "1"]
    entry.write_text("{not an entry")
    assert run(tmp_path, warning="(format)")[-4:-1] == ["SharedLibrary", "0", "1"]
    assert run(tmp_path)[-4:-1] == ["SharedLibrary", "1", "0"]


def test_a_different_callback_body_with_the_same_signature_reuses_code(tmp_path: Path,
                                                                        ) -> None:
    run(tmp_path, "8")
    result = run(tmp_path, "2")
    assert result[0] == "2.0"  # the machine code is shared; the callback is this one
    assert result[-4:-1] == ["SharedLibrary", "1", "0"]


def test_keys_change_with_every_input() -> None:
    base = ("src", "pipe", 2, ("lib",), [("cb", "(f64) -> f64")])
    key = DiskCache.key(*base)
    assert DiskCache.key(*base) == key
    variants = [("src2", "pipe", 2, ("lib",), [("cb", "(f64) -> f64")]),
                ("src", "pipe2", 2, ("lib",), [("cb", "(f64) -> f64")]),
                ("src", "pipe", 3, ("lib",), [("cb", "(f64) -> f64")]),
                ("src", "pipe", 2, (), [("cb", "(f64) -> f64")]),
                ("src", "pipe", 2, ("lib",), [("cb", "(f32) -> f32")]),
                ("src", "pipe", 2, ("lib",), [])]
    assert len({DiskCache.key(*v) for v in variants} | {key}) == len(variants) + 1


def test_callback_signature_changes_miss(tmp_path: Path) -> None:
    source = """
    func.func @run(%x: f64) -> f64 {
      %r = call @cb(%x) : (f64) -> f64
      return %r : f64
    }
    func.func private @cb(f64) -> f64
    """
    first = Session(cache_dir=tmp_path)

    @callback(name="cb", session=first)
    def cb(x: f64) -> f64:
        return x + 1

    assert first.compile(source).run(1.0) == 2.0
    assert first.disk_cache is not None and first.disk_cache.stores == 1
    second = Session(cache_dir=tmp_path)

    @callback("(f64) -> f64", name="cb", session=second)
    def cb_again(x: float) -> float:
        return x + 2

    assert second.compile(source).run(1.0) == 3.0
    assert second.disk_cache is not None and second.disk_cache.hits == 1


@pytest.mark.parametrize("text", [
    "(f32, memref<?x4xf32, strided<[?, 1], offset: ?>>, memref<*xi8>) -> (f64, complex<f32>)",
    "(tensor<2x?xbf16>, i1, index) -> ()",
])
def test_signatures_round_trip_through_json(text: str) -> None:
    signature = as_signature(text)
    assert decode_signature(encode_signature(signature)) == signature


def test_a_cache_that_cannot_be_written_is_no_cache(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    session = Session(cache_dir=not_a_directory)
    module = session.compile("""
    func.func @one() -> i64 {
      %c = arith.constant 1 : i64
      return %c : i64
    }""")
    assert module.one() == 1
    assert session.disk_cache is not None and session.disk_cache.stores == 0


def test_entries_and_size(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "not yet")
    assert (cache.entries(), cache.size_bytes()) == (0, 0)
    session = Session(cache_dir=tmp_path / "not yet")
    session.compile("func.func @f() -> i64 { %c = arith.constant 1 : i64 return %c : i64 }")
    files = list((tmp_path / "not yet").glob("*.entry"))
    assert cache.entries() == 1
    assert cache.size_bytes() == sum(f.stat().st_size for f in files) > 0
    assert cache.clear() == 1
    assert (cache.entries(), cache.size_bytes()) == (0, 0)
