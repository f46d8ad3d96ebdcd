"""Matmul microkernels kept on disk: a process's first matmul module links what an earlier
process compiled, and computes what it computes with a microkernel compiled now; an entry
changed, planted, of other code or in a folder it cannot use is never loaded (compiled
again, said on the ``pymlirjit`` logger, never on stderr by itself), through threads and
forks."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import Session
from pymlirjit.runtime import microkernelcache, microkernelstore
from pymlirjit.runtime.cache import DiskCache
from pymlirjit.runtime.cacheentry import CachedModule
from tests.runtime.test_microkernelcache import (
    CHECK_SCRIPT,
    MATMULS,
    ONE,
    check_one,
    check_two,
    shows_its_microkernels,
)
from tests.threads import run_in_threads


@pytest.fixture(autouse=True)
def first_module() -> Iterator[None]:
    """Each test compiles as a process's first matmul module does."""
    with microkernelcache.set_aside():
        yield


class Builds:
    """Counts the microkernels compiled (not loaded from disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        build = microkernelcache.build

        def counted(*args: Any) -> Any:
            self.count += 1
            return build(*args)

        monkeypatch.setattr(microkernelcache, "build", counted)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.entry"))


def test_a_first_module_links_the_microkernels_kept_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path) as store:
        compiled = Session().compile(MATMULS)
        assert builds.count == 2 and len(entries(tmp_path)) == 2
        assert store is not None and store.stores == 2
        check_two(compiled.two)
        built = {c.symbol: c for c in microkernelcache._compiled.values()}
        microkernelcache.clear()  # as a new process: nothing compiled in memory
        loaded = Session().compile(MATMULS.replace("@two", "@again"))
        assert builds.count == 2 and store.hits == 2
        # The same results, and the microkernels' MLIR shown as they were compiled.
        assert all(np.array_equal(x, y) for x, y in zip(check_two(compiled.two, seed=5),
                                                          check_two(loaded.again, seed=5)))
        assert shows_its_microkernels(loaded.lowered_mlir, 2)
        for kept in microkernelcache._compiled.values():
            assert kept.object_code() == built[kept.symbol].object_code()
            assert kept.lowered_text() == built[kept.symbol].lowered_text()
    for entry in entries(tmp_path):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700


def test_each_opt_level_keeps_its_own_code(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path):
        for opt_level in (2, 3):
            check_one(Session(opt_level=opt_level).compile(ONE).one)
        assert builds.count == 2 and len(entries(tmp_path)) == 2


def test_parallel_modules_keep_their_microkernels_and_none_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Their microkernels' loops become tasks of the async runtime their module's engine
    # links: they stay in the module, never in the store (nor read from it).
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path) as store:
        compiled = Session(parallel=True).compile(ONE)
        check_one(compiled.one)
        assert builds.count == 0 and entries(tmp_path) == []
        assert store is not None and store.stores == store.hits == 0
        assert not shows_its_microkernels(compiled.lowered_mlir, 1)
        assert "__pymlirjit_matmul_0" in compiled.lowered_mlir  # in place, as generated
        check_one(Session().compile(ONE).one)  # a serial one: kept
        assert builds.count == 1 and len(entries(tmp_path)) == 1


#: Compiles and runs @one (argv[1]) in a new process; prints how many microkernels it
#: compiled and how many it loaded from the environment's store.
NEW_PROCESS = CHECK_SCRIPT + """
import sys
from pymlirjit import Session
from pymlirjit.runtime import microkernelcache, microkernelstore
built = []
build = microkernelcache.build
microkernelcache.build = lambda *args: built.append(1) or build(*args)
check(Session().compile(sys.argv[1]).one, 1, [(1, 1, 1), (37, 300, 19), (128, 64, 96)])
store = microkernelstore.store()
print(len(built), "none" if store is None else store.hits)
"""


def new_process(environment: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", NEW_PROCESS, ONE], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **environment})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.strip()


def test_the_environment_chooses_the_folder_or_none(tmp_path: Path) -> None:
    home = tmp_path / "home"  # the default folder: $XDG_CACHE_HOME/pymlirjit/microkernels
    default = {"XDG_CACHE_HOME": str(home), "PYMLIRJIT_CACHE_DIR": ""}
    unset = {**default, "PYMLIRJIT_MICROKERNEL_CACHE": ""}
    assert new_process(unset) == "1 0"
    assert len(entries(home / "pymlirjit" / "microkernels")) == 1
    assert new_process(unset) == "0 1"  # a new process: loaded, not compiled
    chosen = tmp_path / "chosen"
    assert new_process({**default, "PYMLIRJIT_MICROKERNEL_CACHE": str(chosen)}) == "1 0"
    assert len(entries(chosen)) == 1
    off = tmp_path / "off"
    assert new_process({"XDG_CACHE_HOME": str(off), "PYMLIRJIT_CACHE_DIR": "",
                        "PYMLIRJIT_MICROKERNEL_CACHE": "0"}) == "1 none"
    assert not off.exists()


def test_processes_starting_at_once_on_an_empty_folder_share_it(tmp_path: Path) -> None:
    environment = {**os.environ, "PYMLIRJIT_MICROKERNEL_CACHE": str(tmp_path)}
    started = [subprocess.Popen([sys.executable, "-c", NEW_PROCESS, ONE], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=environment) for _ in range(3)]
    for process in started:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert err == "" and out.split()[0] in ("0", "1")
    assert len(entries(tmp_path)) == 1 and len(list(tmp_path.glob("secret.key"))) == 1
    assert new_process({"PYMLIRJIT_MICROKERNEL_CACHE": str(tmp_path)}) == "0 1"


def test_a_changed_entry_is_refused_and_compiled_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path) as store:
        Session().compile(ONE)
        (entry,) = entries(tmp_path)
        for change in (lambda data: data[:100] + bytes([data[100] ^ 1]) + data[101:],
                       lambda data: data[:len(data) // 2], lambda data: b""):
            data = entry.read_bytes()
            entry.write_bytes(change(data))
            microkernelcache.clear()
            with caplog.at_level(logging.WARNING, logger="pymlirjit"):
                check_one(Session().compile(ONE).one)
            assert "refused" in caplog.text
            caplog.clear()
            entry.write_bytes(data)
        assert store is not None
        assert store.rejected["digest"] == 2 and store.rejected["format"] == 1
        assert builds.count == 4 and store.hits == 0


@pytest.mark.parametrize("code", ["another microkernel's", "garbage", "truncated"])
def test_an_authentic_entry_of_other_code_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path) as store:
        Session().compile(ONE)
        (f32,) = microkernelcache._compiled.values()
        Session().compile(ONE.replace("f32", "f64"))
        (f64,) = [c for c in microkernelcache._compiled.values() if c is not f32]
        assert store is not None
        # f32's key holding other code, written with the folder's secret (as a faulty
        # writer would): authentic, but not the code of the symbol it is loaded as, or
        # not an object file at all (which LLVM would crash on).
        other = {"another microkernel's": f64.object_code(), "garbage": b"garbage",
                 "truncated": f32.object_code()[:-100]}[code]
        store.save(microkernelstore.key(f32.source(), 2), lambda: CachedModule(
            "object", other, {}, {}, (), tuple(f64.needed), ""))
        microkernelcache.clear()
        check_one(Session().compile(ONE).one)
        assert store.rejected["unloadable"] == 1 and builds.count == 3


def test_an_entry_of_a_module_where_a_microkernels_is_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = Builds(monkeypatch)
    with microkernelstore.using(tmp_path) as store:
        Session().compile(ONE)
        (kept,) = microkernelcache._compiled.values()
        assert store is not None
        store.save(microkernelstore.key(kept.source(), 2), lambda: CachedModule(
            "object", kept.object_code(), {}, {}, (), (), "", objects=(b"linked with",)))
        microkernelcache.clear()
        check_one(Session().compile(ONE).one)
        assert store.rejected["format"] == 1 and builds.count == 2


@pytest.mark.parametrize("problem", ["under a file", "read-only", "permissions", "file-type",
                                     "owner"])
def test_a_folder_it_may_not_use_keeps_nothing_and_says_so_at_debug(
        tmp_path: Path, problem: str, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = Builds(monkeypatch)
    folder = tmp_path / "microkernels"
    if problem == "under a file":  # as a home folder that is a file
        (tmp_path / "home").write_text("not a folder")
        folder = tmp_path / "home" / "microkernels"
    elif problem == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes in a read-only folder")
        tmp_path.chmod(0o500)
    elif problem == "permissions":  # others may write it
        folder.mkdir()
        folder.chmod(0o777)
    elif problem == "file-type":
        folder.write_text("not a folder")
    else:  # another user's, as a container's home may be
        if os.geteuid() != 0:
            pytest.skip("only root gives a folder to another user")
        folder.mkdir(mode=0o700)
        os.chown(folder, 4242, 4242)
    reason = {"under a file": "io", "read-only": "io"}.get(problem, problem)
    try:
        with caplog.at_level(logging.DEBUG, logger="pymlirjit"), \
                microkernelstore.using(folder) as store:
            check_one(Session().compile(ONE).one)
            microkernelcache.clear()
            check_one(Session().compile(ONE).one)
    finally:
        tmp_path.chmod(0o700)
    assert store is not None and store.refused is not None
    assert store.refused.reason == reason and builds.count == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "not using the disk cache" in caplog.text  # said at DEBUG
    assert capfd.readouterr().err == ""
    assert problem == "file-type" or not folder.exists() or not entries(folder)


def test_threads_compiling_at_once_keep_one_entry(tmp_path: Path) -> None:
    with microkernelstore.using(tmp_path):
        def compile_and_run(index: int) -> None:
            if index % 2:
                microkernelcache.clear()  # from another thread, during the others' compiles
            module = Session().compile(ONE.replace("@one", f"@one{index}"))
            check_one(getattr(module, f"one{index}"), seed=index)

        run_in_threads(compile_and_run, range(6))
    assert len(entries(tmp_path)) == 1


#: Loads @one (argv[1]) with its microkernel from the environment's store, then forks:
#: the child compiles @child with the microkernel loaded from disk again (its memory
#: cleared) and runs both against numpy; prints the child's exit status.
FORKER = CHECK_SCRIPT + """
import os, sys
from pymlirjit import Session
from pymlirjit.runtime import microkernelcache, microkernelstore

parent = Session().compile(sys.argv[1]).one
check(parent, 0)
assert microkernelstore.store().hits == 1
pid = os.fork()
if pid == 0:
    try:
        microkernelcache.clear()
        check(Session().compile(sys.argv[1].replace("@one", "@child")).child, 3)
        check(parent, 4)
        os._exit(0 if microkernelstore.store().hits == 1 else 2)
    except BaseException:
        os._exit(1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_loads_from_the_store(tmp_path: Path) -> None:
    with microkernelstore.using(tmp_path):
        Session().compile(ONE)  # kept on disk
    done = subprocess.run([sys.executable, "-c", FORKER, ONE],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYMLIRJIT_MICROKERNEL_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.split() == ["0"]


def test_the_cli_warms_shows_and_clears_the_microkernels(tmp_path: Path) -> None:
    folder = tmp_path / "microkernels"
    environment = {**os.environ, "PYMLIRJIT_CACHE_DIR": str(tmp_path),
                   "PYMLIRJIT_MICROKERNEL_CACHE": ""}

    def cli(*args: str, returncode: int = 0, **changed: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pymlirjit", "cache", *args],
                              capture_output=True, text=True, timeout=300,
                              env={**environment, **changed})
        assert done.returncode == returncode, done.stderr
        return done.stdout + done.stderr

    # f32 and f64 at opt levels 2 and 3, compiled once.
    assert cli("--warm") == f"{folder}: 4 microkernels compiled, 0 kept already\n"
    assert cli("--warm") == f"{folder}: 0 microkernels compiled, 4 kept already\n"
    assert new_process({"PYMLIRJIT_MICROKERNEL_CACHE": str(folder)}) == "0 1"
    shown = cli().splitlines()
    assert shown[0] == f"{tmp_path}: 0 modules (0.0 KiB)"
    assert shown[1].startswith(f"{folder}: 4 microkernels (")
    assert cli("--clear").splitlines()[1].startswith(f"{folder}: removed 4 microkernels (")
    assert not entries(folder)
    assert "no microkernel is kept on disk" in cli(
        "--warm", returncode=1, PYMLIRJIT_MICROKERNEL_CACHE="0")
    (tmp_path / "taken").write_text("not a folder")
    assert "cannot keep microkernels" in cli(
        "--warm", returncode=1, PYMLIRJIT_MICROKERNEL_CACHE=str(tmp_path / "taken"))


def test_a_store_is_a_disk_cache_of_its_own() -> None:
    with microkernelstore.using(None) as none:
        assert none is None and microkernelstore.store() is None
    with microkernelstore.using("somewhere") as store:
        assert isinstance(store, DiskCache) and store.quiet_folder
        assert microkernelstore.store() is store
