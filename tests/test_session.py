"""Sessions: compiling, linking, caching, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlirjit import LinkError, MLIRError, Session, callback, f64, mlir_kernel
from tests.threads import run_in_threads

SQUARE = """
func.func @square(%x: f64) -> f64 {
  %r = arith.mulf %x, %x : f64
  return %r : f64
}
"""

USES_HOOK = """
func.func @run(%x: f64) -> f64 {
  %r = call @hook(%x) : (f64) -> f64
  return %r : f64
}
func.func private @hook(f64) -> f64
"""


def test_compiling_twice_reuses_the_engine(session: Session) -> None:
    first = session.compile(SQUARE)
    second = session.compile(SQUARE)
    assert first is second
    assert session.cache_info() == (1, 1, 1)
    assert first.square(3.0) == 9.0


def test_options_are_part_of_the_key(session: Session) -> None:
    a = session.compile(SQUARE)
    b = session.compile(SQUARE, opt_level=0)
    assert a is not b
    assert b.square(4.0) == 16.0


def test_clear_cache_recompiles_kernels(session: Session) -> None:
    @mlir_kernel(source=SQUARE, session=session)
    def square(x: f64) -> f64: ...

    assert square(2.0) == 4.0
    old = session.compile(SQUARE)
    session.clear_cache()
    assert session.cache_info() == (0, 0, 0)
    assert square(3.0) == 9.0  # the kernel compiles again
    assert old.square(5.0) == 25.0  # what was handed out keeps working


def test_missing_callbacks_are_listed_before_anything_runs(session: Session) -> None:
    with pytest.raises(LinkError) as caught:
        session.compile("""
        func.func @run() {
          call @alpha() : () -> ()
          call @beta() : () -> ()
          return
        }
        func.func private @alpha()
        func.func private @beta()
        """)
    assert set(caught.value.missing) == {"alpha", "beta"}
    assert "@alpha" in str(caught.value) and "@beta" in str(caught.value)


def test_explicit_callbacks_win_over_registered_ones(session: Session) -> None:
    @callback(name="hook", session=session)
    def registered(x: f64) -> f64:
        return x + 1

    @callback(name="hook", registry=None, session=Session())
    def explicit(x: f64) -> f64:
        return x * 10

    assert session.compile(USES_HOOK).run(2.0) == 3.0
    assert session.compile(USES_HOOK, callbacks=[explicit]).run(2.0) == 20.0


def test_redefining_a_callback_replaces_it(session: Session) -> None:
    @callback(name="hook", session=session)
    def old(x: f64) -> f64:
        return 1.0

    assert session.compile(USES_HOOK).run(0.0) == 1.0

    @callback(name="hook", session=session)
    def new(x: f64) -> f64:
        return 2.0

    assert session.compile(USES_HOOK).run(0.0) == 2.0


def test_parse_errors_carry_locations(session: Session) -> None:
    with pytest.raises(MLIRError) as caught:
        session.compile("func.func @f() -> i32 {\n  return\n}")
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.diagnostics[0].location == 'loc("<source>":2:3)'
    assert "returns 1" in error.diagnostics[0].message


@pytest.mark.parametrize(("source", "pipeline", "message"), [
    ("func.func @f() { \"foo.bar\"() : () -> () \n return }", None, "unregistered dialect"),
    (SQUARE, "not-a-pass", "not-a-pass"),
    (SQUARE, "convert-arith-to-llvm", "was not lowered"),
])
def test_mlir_errors(session: Session, source: str, pipeline: str | None, message: str,
                     capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(MLIRError, match=message):
        session.compile(source, pipeline=pipeline)
    assert capfd.readouterr().err == ""
    assert session.compile(SQUARE).square(2.0) == 4.0  # the session still works


def test_bad_options(session: Session) -> None:
    with pytest.raises(ValueError, match="opt_level"):
        Session(opt_level=7)
    with pytest.raises(TypeError, match="source"):
        session.compile(42)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="runtime library"):
        Session(shared_libs=["libdefinitely_not_here.so"])


def test_runtime_libraries_are_found_by_name() -> None:
    session = Session(shared_libs=["mlir_c_runner_utils"])
    assert session.shared_libs[0].endswith("libmlir_c_runner_utils.so")


def test_concurrent_compiles_of_one_source_compile_once(session: Session) -> None:
    results = run_in_threads(lambda _: session.compile(SQUARE), range(4))
    assert len({id(r) for r in results}) == 1
    assert session.cache_info().misses == 1


def test_redefining_a_callback_relinks_kernels_that_already_ran(session: Session) -> None:
    @callback(name="hook", session=session)
    def old(x: f64) -> f64:
        return 1.0

    @mlir_kernel(source=USES_HOOK, name="run", session=session)
    def run(x: f64) -> f64: ...

    assert run(0.0) == 1.0

    @callback(name="hook", session=session)
    def new(x: f64) -> f64:
        return 2.0

    assert run(0.0) == 2.0


class Subscriber:
    """An :class:`pymlirjit.callbacks.Invalidated`: records, per notification, whether
    the session's lock was held (by the notifying thread) and the registry's was not."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.seen: list[tuple[bool, bool]] = []

    def invalidate(self) -> None:
        # Another thread cannot take the session's lock if this one holds it.
        def probe(_: int) -> bool:
            taken = self.session.lock.acquire(blocking=False)
            if taken:
                self.session.lock.release()
            return taken

        [taken] = run_in_threads(probe, range(1))
        self.seen.append((not taken, self.session.callbacks._lock.locked()))


def test_sessions_and_registries_notify_subscribers(session: Session) -> None:
    subscriber = Subscriber(session)
    session.watch(subscriber)
    session.callbacks.watch(subscriber)
    session.clear_cache()
    assert subscriber.seen == [(True, False)]  # under the session's lock

    @callback(name="hook", session=session)
    def hook(x: f64) -> f64:
        return x

    session.callbacks.remove("hook")
    session.callbacks.remove("hook")  # nothing removed: nothing to tell
    # Registries notify outside their own lock (a kernel takes its session's lock then).
    assert subscriber.seen == [(True, False), (False, False), (False, False)]
    session.clear_cache()  # subscriptions last: a later change is told too
    assert len(subscriber.seen) == 4


def test_subscribers_are_kept_weakly(session: Session) -> None:
    import gc
    import weakref

    subscriber = Subscriber(session)
    session.watch(subscriber)
    session.callbacks.watch(subscriber)
    gone = weakref.ref(subscriber)
    del subscriber
    gc.collect()
    assert gone() is None
    session.clear_cache()
    session.callbacks.remove("nothing")


def test_removing_a_callback_relinks_kernels(session: Session) -> None:
    @callback(name="hook", session=session)
    def hook(x: f64) -> f64:
        return x + 1

    @mlir_kernel(source=USES_HOOK, name="run", session=session)
    def run(x: f64) -> f64: ...

    assert run(1.0) == 2.0
    session.callbacks.remove("hook")
    with pytest.raises(LinkError, match="@hook"):
        run(1.0)


def test_one_compile_options_value_is_the_key(session: Session) -> None:
    from pymlirjit.session import CompileOptions

    assert session.options == CompileOptions.make()
    first = session.compile(SQUARE, opt_level=3)
    assert session.compile(SQUARE, options=session.options.replace(opt_level=3)) is first
    assert session.compile(SQUARE, options=CompileOptions.make(None, 3)) is first
    assert session.compile(SQUARE) is not first
    assert session.cache_info() == (2, 2, 2)


def test_cache_info_is_the_three_counts_with_the_disk_counts_beside_them() -> None:
    from pymlirjit.session import CacheInfo

    info = CacheInfo(1, 2, 3, 4, {"digest": 1})
    assert info == (1, 2, 3) and tuple(info) == (1, 2, 3)
    hits, misses, size = info
    assert (hits, misses, size, info.disk_hits, info.rejected) == (1, 2, 3, 4, {"digest": 1})
    assert repr(info) == "CacheInfo(hits=1, misses=2, size=3, disk_hits=4, rejected={'digest': 1})"


def test_a_cache_dir_that_is_no_path_is_a_type_error_naming_it() -> None:
    # It was Path()'s "expected str, bytes or os.PathLike object, not int".
    with pytest.raises(TypeError, match=r"^cache_dir must be a folder's path .*got int$"):
        Session(cache_dir=5)  # type: ignore[arg-type]


def test_an_empty_cache_dir_is_the_default_folder_not_the_current_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, default = tmp_path / "here", tmp_path / "default"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("PYMLIRJIT_CACHE_DIR", str(default))
    session = Session(cache_dir="")
    assert session.compile(SQUARE).square(3.0) == 9.0
    assert list(here.iterdir()) == []  # no secret.key, no entries in the current folder
    assert any(default.iterdir())


def test_sessions_without_a_cache_folder_share_a_store_that_keeps_nothing() -> None:
    first, second = Session(), Session(opt_level=1)
    assert first.disk_cache is second.disk_cache
    first.compile(SQUARE)
    store = second.disk_cache
    assert (store.hits, store.misses, store.stores, dict(store.rejected)) == (0, 0, 0, {})
    assert first.cache_info().disk_hits == 0 and first.cache_info().rejected == {}
