"""The on-disk compile cache: cross-process hits, keys, corrupted entries, and what it
refuses (planted, edited or swapped entries, folders and files of others)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pymlirjit import Session, callback, f64
from pymlirjit.boundary.signature import as_signature, decode_signature, encode_signature
from pymlirjit.runtime.cache import DiskCache, NullCache
from pymlirjit.runtime.cacheentry import (
    HEADER,
    CachedModule,
    decode_entry,
    encode_entry,
    entry_mac,
)
from pymlirjit.runtime.privatefiles import Refused
from pymlirjit.runtime.sharedlib import c_compiler

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


# -- what the cache trusts, and what it refuses ------------------------------------------------

ONE = "func.func @which() -> i64 { %c = arith.constant 1 : i64 return %c : i64 }"
TWO = "func.func @which() -> i64 { %c = arith.constant 2 : i64 return %c : i64 }"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "pymlirjit" and r.levelno == logging.WARNING]


def genuine_entry(cache_dir: Path) -> tuple[Path, str, bytes, CachedModule]:
    """The one entry of ``cache_dir``: its path, key, the folder's secret, and content."""
    (path,) = cache_dir.glob("*.entry")
    key = path.name.removesuffix(".entry")
    secret = (cache_dir / "secret.key").read_bytes()
    return path, key, secret, decode_entry(path.read_bytes(), key, secret)


def planted_library(folder: Path, witness: Path) -> Path:
    """A shared library whose constructor writes ``witness``: loading it runs code."""
    compiler = c_compiler()
    if compiler is None:
        pytest.skip("needs a C compiler")
    source = folder / "planted.c"
    source.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *out = fopen("{witness}", "w");
            if (out) {{ fputs("planted code ran\\n", out); fclose(out); }}
        }}
    """))
    library = folder / "planted.so"
    subprocess.run([*compiler, "-shared", "-fPIC", "-o", str(library), str(source)],
                   check=True, capture_output=True)
    return library


def test_a_planted_entry_with_a_plain_digest_is_refused_and_never_runs(tmp_path: Path,
                                                                       ) -> None:
    cache_dir = tmp_path / "cache"
    run(cache_dir)  # a genuine entry: its key is computable by anyone anyway
    path, key, secret, genuine = genuine_entry(cache_dir)
    witness = tmp_path / "witness"
    code = planted_library(tmp_path, witness).read_bytes()
    planted = dataclasses.replace(genuine, code=code)
    # What one who can write the folder but not read the secret plants: the format with a
    # plain SHA-256 where the MAC goes, and the previous format's pair of files.
    body = encode_entry(planted, key, secret)[:-32]
    path.write_bytes(body + hashlib.sha256(body).digest())
    (cache_dir / f"{key}.so").write_bytes(code)
    (cache_dir / f"{key}.json").write_text(json.dumps(
        {"format": 2, "kind": "shared", "sha256": hashlib.sha256(code).hexdigest()}))
    assert run(cache_dir, warning="(digest)") == [*VALUES, "SharedLibrary", "0", "1", "llvm"]
    assert not witness.exists()
    # The MAC is what refused it: the same bytes under the folder's secret do run (and then
    # fail to bind, a rejection too).
    path.write_bytes(encode_entry(planted, key, secret))
    assert run(cache_dir, warning="(unloadable)")[:4] == VALUES
    assert witness.read_text() == "planted code ran\n"


def test_shared_libs_written_into_an_entry_are_never_loaded(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    run(cache_dir)
    path, key, secret, _ = genuine_entry(cache_dir)
    witness = tmp_path / "witness"
    library = planted_library(tmp_path, witness)
    data = path.read_bytes()
    _, size = HEADER.unpack_from(data)
    meta = json.loads(data[HEADER.size:HEADER.size + size])
    assert "shared_libs" not in meta  # an entry names none: they are inputs of its key
    meta["shared_libs"] = [str(library)]
    description = json.dumps(meta).encode()
    body = (HEADER.pack(b"pymlirjit-entry\n", len(description)) + description
            + data[HEADER.size + size:-32])
    path.write_bytes(body + data[-32:])  # edited, the MAC kept
    assert run(cache_dir, warning="(digest)")[-4:-1] == ["SharedLibrary", "0", "1"]
    assert not witness.exists()
    # Even an entry holding a valid MAC has its shared_libs ignored.
    path.write_bytes(body + entry_mac(secret, key, body))
    assert run(cache_dir) == [*VALUES, "SharedLibrary", "1", "0", "no-llvm"]
    assert not witness.exists()


def test_swapped_entries_are_misses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for source in (ONE, TWO):
        Session(cache_dir=tmp_path).compile(source)
    first, second = sorted(tmp_path.glob("*.entry"))
    first.rename(tmp_path / "swap")
    second.rename(first)
    (tmp_path / "swap").rename(second)
    loader = Session(cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pymlirjit"):
        assert [loader.compile(source).which() for source in (ONE, TWO)] == [1, 2]
    info = loader.cache_info()
    assert (info.disk_hits, info.rejected) == (0, {"digest": 2})
    assert [m.count("(digest)") for m in warnings_of(caplog)] == [1, 1]
    again = Session(cache_dir=tmp_path)  # the recompiled modules replaced them
    assert [again.compile(source).which() for source in (ONE, TWO)] == [1, 2]
    assert again.cache_info().disk_hits == 2


def chown_to_another_user(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    os.chown(path, 12345, 12345)


@pytest.mark.parametrize(("setup", "reason", "fragment"), [
    (chown_to_another_user, "owner", "belongs to uid 12345"),
    (lambda path: path.chmod(0o770), "permissions", "written by group or others (mode 770)"),
    (lambda path: path.chmod(0o702), "permissions", "written by group or others (mode 702)"),
])
def test_a_folder_of_another_user_or_open_to_others_is_not_used(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, setup: Any, reason: str,
        fragment: str) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    setup(folder)
    session = Session(cache_dir=folder)
    with caplog.at_level(logging.DEBUG, logger="pymlirjit"):
        assert [session.compile(source).which() for source in (ONE, TWO)] == [1, 2]
    (warning,) = warnings_of(caplog)  # one warning, naming the folder and the reason
    assert fragment in warning and str(folder) in warning
    assert list(folder.iterdir()) == []  # nothing read or written
    assert session.cache_info().rejected == {reason: 1}
    assert isinstance(session.disk_cache, DiskCache)
    assert session.disk_cache.refused is not None
    assert session.disk_cache.refused.reason == reason
    assert type(session.compile(ONE).engine).__name__ == "ExecutionEngine"


def test_folders_are_made_private_and_files_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0)  # the modes must not depend on the umask
    try:
        Session(cache_dir=tmp_path / "a" / "b" / "cache").compile(ONE)
    finally:
        os.umask(previous)
    folders = [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "cache"]
    assert [stat.S_IMODE(f.stat().st_mode) for f in folders] == [0o700] * 3
    files = sorted(folders[-1].iterdir())
    assert len(files) == 3
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o600] * 3


def make_symlink(path: Path) -> None:
    moved = path.with_name("elsewhere")
    path.rename(moved)
    path.symlink_to(moved)


@pytest.mark.parametrize(("change", "reason"), [
    (make_symlink, "file-type"),
    (lambda path: path.chmod(0o622), "permissions"),
    (chown_to_another_user, "owner"),
])
def test_entry_files_are_checked(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                 change: Any, reason: str) -> None:
    Session(cache_dir=tmp_path).compile(ONE)
    (entry,) = tmp_path.glob("*.entry")
    change(entry)
    loader = Session(cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pymlirjit"):
        assert loader.compile(ONE).which() == 1
    assert loader.cache_info().rejected == {reason: 1}
    (warning,) = warnings_of(caplog)
    assert f"({reason})" in warning and entry.name in warning
    assert Session(cache_dir=tmp_path).compile(ONE).which() == 1  # written again, and used


def test_a_secret_others_may_read_refuses_the_folder(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    Session(cache_dir=tmp_path).compile(ONE)
    secret = tmp_path / "secret.key"
    assert len(secret.read_bytes()) == 32
    secret.chmod(0o644)
    session = Session(cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pymlirjit"):
        assert session.compile(ONE).which() == 1
    (warning,) = warnings_of(caplog)
    assert "secret.key is open to group or others" in warning
    info = session.cache_info()
    assert (*info, info.disk_hits, info.rejected) == (0, 1, 1, 0, {"permissions": 1})


def test_clear_removes_only_the_cache_s_own_files(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir(mode=0o700)
    foreign = ["main.o", "module.so", "package.json", "notes.txt"]
    for name in foreign:
        (project / name).write_text("the project's")
    Session(cache_dir=project).compile(ONE)
    (project / ".pymlirjit-tmp-left-by-a-killed-write").write_bytes(b"")
    env = {**os.environ, "PYMLIRJIT_CACHE_DIR": str(project)}
    done = subprocess.run([sys.executable, "-m", "pymlirjit", "cache", "--clear"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{project}: removed 1 module")
    assert sorted(p.name for p in project.iterdir()) == sorted(
        [*foreign, "CACHEDIR.TAG", "secret.key"])
    assert all((project / name).read_text() == "the project's" for name in foreign)


def test_a_folder_pymlirjit_did_not_mark_is_never_cleared(tmp_path: Path) -> None:
    key_like = ["0" * 64 + ".entry", "f" * 64 + ".so", "a" * 64 + ".json"]
    for name in key_like:
        (tmp_path / name).write_text("not pymlirjit's")
    assert DiskCache(tmp_path).clear() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(key_like)
    env = {**os.environ, "PYMLIRJIT_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "pymlirjit", "cache", "--clear"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1
    assert "nothing removed" in done.stderr and "CACHEDIR.TAG" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(key_like)


def test_without_a_cache_dir_the_store_is_a_null_cache(tmp_path: Path) -> None:
    session = Session()
    assert isinstance(session.disk_cache, NullCache)
    module = session.compile(ONE)
    assert type(module.engine).__name__ == "ExecutionEngine"  # no entry was built
    info = session.cache_info()
    assert (*info, info.disk_hits, info.rejected) == (0, 1, 1, 0, {})


def test_cache_info_counts_loads_from_disk(tmp_path: Path) -> None:
    Session(cache_dir=tmp_path).compile(ONE)
    loader = Session(cache_dir=tmp_path)
    loader.compile(ONE)
    loader.compile(ONE)
    info = loader.cache_info()
    assert (*info, info.disk_hits, info.rejected) == (1, 1, 1, 1, {})
    hits, misses, size = loader.cache_info()
    assert (hits, misses, size) == (1, 1, 1)


# -- what an entry keeps for real MLIR files: runtime libraries, uncallable functions,
#    global constructors ----------------------------------------------------------------------

DATA_DIR = Path(__file__).parents[1] / "data"

ASYNC_SCRIPT = textwrap.dedent("""
    import sys
    from pymlirjit import Session
    session = Session(cache_dir=sys.argv[1])
    module = session.compile('''
    func.func @twice(%c: i32) -> i32 {
      %token, %value = async.execute -> !async.value<i32> {
        %x = arith.addi %c, %c : i32
        async.yield %x : i32
      }
      %v = async.await %value : !async.value<i32>
      return %v : i32
    }
    func.func @show(%t: tensor<*xf32>) {
      return
    }
    ''')
    print(module.twice(21), module.twice.release_gil, type(module.engine).__name__,
          session.disk_cache.hits)
    try:
        module.show(1)
    except TypeError as exc:
        print(type(exc).__name__, exc)
""")

CTOR_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pymlirjit import Session
    session = Session(cache_dir=sys.argv[1], shared_libs=["mlir_c_runner_utils"])
    module = session.compile(Path(sys.argv[2]).read_text())
    print("compiled", flush=True)
    module.main()
    print(type(module.engine).__name__, session.disk_cache.hits, flush=True)
""")


def run_child(script: str, *args: str, env: dict[str, str]) -> list[str]:
    """The lines a child process prints; it must succeed and write nothing on stderr."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # e.g. no "refused (unloadable)": the entry was used
    return done.stdout.splitlines()


ARTIFACTS = [pytest.param("shared", {}, id="shared"), pytest.param("object", NO_COMPILER,
                                                                   id="object")]
LOADED = {"shared": "SharedLibrary", "object": "ObjectEngine"}


@pytest.mark.parametrize(("kind", "env"), ARTIFACTS)
def test_an_async_kernel_and_an_uncallable_function_survive_a_fresh_process(
        tmp_path: Path, kind: str, env: dict[str, str]) -> None:
    if kind == "shared" and c_compiler() is None:
        pytest.skip("needs a C compiler")
    why = ("SignatureError @show cannot be called from Python: @show: MLIR type tensor<*xf32> "
           "cannot cross the Python boundary")
    cold = run_child(ASYNC_SCRIPT, str(tmp_path), env=env)
    # The async runtime is a shared library: calls release the GIL (its threads may call
    # back), in the cold process and in the one that loads the entry alike.
    assert cold[0].split()[:2] == ["42", "True"] and cold[0].split()[3] == "0"
    assert cold[1] == why
    (entry,) = tmp_path.glob("*.entry")
    meta = decode_entry(entry.read_bytes(), entry.name.removesuffix(".entry"),
                         (tmp_path / "secret.key").read_bytes())
    assert meta.kind == kind
    assert meta.runtime_libs == ("libmlir_async_runtime.so",)  # a name, not a path
    warm = run_child(ASYNC_SCRIPT, str(tmp_path), env=env)
    assert warm == [f"42 True {LOADED[kind]} 1", why]


@pytest.mark.parametrize(("kind", "env"), ARTIFACTS)
def test_global_constructors_run_once_per_load(tmp_path: Path, kind: str,
                                               env: dict[str, str]) -> None:
    if kind == "shared" and c_compiler() is None:
        pytest.skip("needs a C compiler")
    source = str(DATA_DIR / "runner" / "global-constructors.mlir")
    cold = run_child(CTOR_SCRIPT, str(tmp_path), source, env=env)
    # The first ctor prints 1, the entry 2 and then 30 (the global the second ctor set:
    # both ran, in priority order). (The cold process may print the dtor's 3 when it drops
    # MLIR's engine for the loaded entry.)
    assert cold.count("1") == 1 and cold.index("1") < cold.index("compiled") < cold.index("2")
    assert cold[cold.index("2") + 1] == "30"
    warm = run_child(CTOR_SCRIPT, str(tmp_path), source, env=env)
    assert warm == ["1", "compiled", "2", "30", f"{LOADED[kind]} 1"]
    # A cold compile without a cache runs them once too.
    assert run_child(CTOR_SCRIPT.replace("cache_dir=sys.argv[1]", "cache_dir=None"),
                     str(tmp_path), source, env=env)[:4] == ["1", "compiled", "2", "30"]


def test_an_entry_naming_a_runtime_library_by_a_path_is_refused(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    Session(cache_dir=cache_dir).compile(ONE)
    _, key, secret, genuine = genuine_entry(cache_dir)
    for name in ("/tmp/libplanted.so", "../libplanted.so", ""):
        planted = encode_entry(dataclasses.replace(genuine, runtime_libs=(name,)), key,
                                secret)
        with pytest.raises(Refused, match="runtime libraries are file names"):
            decode_entry(planted, key, secret)


def test_an_entrys_object_files_round_trip_and_bad_sizes_are_refused() -> None:
    secret, key = b"s" * 32, "k" * 64
    entry = CachedModule("object", b"module code", {}, {}, (), (), "module {}",
                         objects=(b"first object", b"", b"third"))
    assert decode_entry(encode_entry(entry, key, secret), key, secret) == entry
    plain = dataclasses.replace(entry, objects=())
    assert decode_entry(encode_entry(plain, key, secret), key, secret) == plain
    # Authentic (under the secret) but sizes that do not fit: refused, nothing decoded.
    data = encode_entry(entry, key, secret)[:-32]
    _, size = HEADER.unpack_from(data)
    meta = json.loads(data[HEADER.size:HEADER.size + size])
    for sizes in ([10**9], [-5, 30], [1] * 10**4):
        description = json.dumps({**meta, "objects": sizes}).encode()
        body = HEADER.pack(b"pymlirjit-entry\n", len(description)) + description + data[
            HEADER.size + size:]
        with pytest.raises(Refused, match="objects' sizes"):
            decode_entry(body + entry_mac(secret, key, body), key, secret)
