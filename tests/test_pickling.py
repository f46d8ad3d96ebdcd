"""Kernels, callbacks, compiled functions and sessions pickle and copy: by reference
when importable, by value otherwise; unpickled kernels compile lazily, from the disk
cache when one is configured."""

from __future__ import annotations

import copy
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MemRef, Session, callback, f64, mlir_kernel
from pymlirjit.boundary.vectorcall import NativeCallable, has_entry
from pymlirjit.callbacks import Callback, CallbackRegistry
from pymlirjit.kernel import Kernel
from tests.threads import run_in_threads

ROOT = Path(__file__).resolve().parent.parent

ADD = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}"""

BUMPED = """
func.func @bumped(%a: f64) -> f64 {
  %r = call @pickling_bump(%a) : (f64) -> f64
  return %r : f64
}
func.func private @pickling_bump(f64) -> f64
"""


@callback(registry=CallbackRegistry())
def pickling_bump(x: f64) -> f64:
    return x + 100.0


@mlir_kernel(source=ADD)
def add(a: f64, b: f64) -> f64: ...


@mlir_kernel(source=BUMPED, callbacks=[pickling_bump])
def bumped(a: f64) -> f64: ...


def run(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports this worktree's package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def test_importable_kernels_and_callbacks_pickle_by_reference() -> None:
    for obj in (add, bumped, pickling_bump):
        data = pickle.dumps(obj)
        assert b"tests.test_pickling" in data and b"arith" not in data
        assert pickle.loads(data) is obj
    assert bumped(1.0) == 101.0
    assert pickle.loads(pickle.dumps(bumped))(2.0) == 102.0


def test_a_kernel_made_at_run_time_pickles_by_value(session: Session) -> None:
    @callback(session=session)
    def triple(x: f64) -> f64:
        return 3.0 * x

    @mlir_kernel(source=ADD.replace("arith.addf %a, %b : f64", "arith.addf %a, %b : f64\n"
                                    "  %t = call @triple(%r) : (f64) -> f64")
                 .replace("return %r", "return %t") + "\nfunc.func private @triple(f64) -> f64",
                 session=session, name="add")
    def local_add(a: f64, b: f64) -> f64: ...

    data = pickle.dumps(local_add)
    assert b"arith.addf" in data  # the source travels
    back = pickle.loads(data)
    assert back is local_add  # unpickled in the sending process: the original
    assert back(1.0, 2.0) == 9.0
    assert pickle.loads(data) is back


def test_copies_are_kernels_of_their_own(session: Session) -> None:
    @mlir_kernel(source=ADD, session=session, name="add")
    def local_add(a: f64, b: f64) -> f64: ...

    pickle.dumps(local_add)  # gives it a pickling token, which copies do not share
    for duplicate in (copy.copy(local_add), copy.deepcopy(local_add), copy.copy(add)):
        assert isinstance(duplicate, Kernel) and duplicate is not local_add
        assert not has_entry(duplicate) and duplicate(1.0, 2.0) == 3.0
        assert pickle.loads(pickle.dumps(duplicate)) is duplicate
    assert copy.copy(pickling_bump) is pickling_bump  # like a function


def test_native_callable_subclasses_pickle_as_their_public_class() -> None:
    obj = _Plain(7)
    assert type(obj) is not _Plain  # the companion type
    back = pickle.loads(pickle.dumps(obj))
    assert type(back) is type(obj) and back.value == 7


class _Plain(NativeCallable):
    def __init__(self, value: int) -> None:
        self.value = value


def test_sessions_pickle_their_options_and_cache_folder(tmp_path: Path) -> None:
    session = Session(opt_level=1, cache_dir=tmp_path / "cache")
    session.compile(ADD)
    assert pickle.loads(pickle.dumps(session)) is session
    done = run(f"""
        import pickle
        session = pickle.loads({pickle.dumps(session)!r})
        print(session.opt_level, session.disk_cache.directory, session.cache_info().size)
        from pymlirjit.session import default_session
        print(pickle.loads({pickle.dumps(Session(opt_level=0))!r}) is default_session())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", str(tmp_path / "cache"), "0", "False"]
    from pymlirjit.session import default_session

    assert pickle.loads(pickle.dumps(default_session())) is default_session()


def test_compiled_functions_pickle_as_what_compiles_them(session: Session) -> None:
    function = session.compile(ADD)["add"]
    back = pickle.loads(pickle.dumps(function))
    assert back is function and back(1.0, 2.0) == 3.0  # the session's cache has it
    named = bumped.compile()
    back = pickle.loads(pickle.dumps(named))
    assert back(1.0) == 101.0 and back.display_name == "bumped"
    done = run(f"""
        import pickle
        function = pickle.loads({pickle.dumps(named)!r})
        print(function(5.0), function.signature.params[0].name)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["105.0", "a"]
    assert copy.copy(function)(2.0, 2.0) == 4.0


def test_a_compiled_function_without_its_module_names_itself(session: Session) -> None:
    function = session.compile(ADD)["add"]
    session.clear_cache()
    del session
    import gc

    gc.collect()
    with pytest.raises(pickle.PicklingError, match="@add"):
        pickle.dumps(function)


SENDER = """
import pickle, sys
from pymlirjit import MemRef, Session, callback, f64, mlir_kernel

session = Session(cache_dir=sys.argv[1])

@callback(session=session)
def scale(x: f64) -> f64:
    return x * FACTOR

@mlir_kernel(source='''
func.func @scaled(%a: memref<?xf64>, %x: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<?xf64>
  %s = arith.addf %v, %x : f64
  %r = call @scale(%s) : (f64) -> f64
  return %r : f64
}
func.func private @scale(f64) -> f64''', session=session)
def scaled(a: MemRef[f64, None], x: f64) -> f64:
    "Scaled first element."

FACTOR = 10.0
COMPILE
sys.stdout.buffer.write(pickle.dumps(scaled))
"""


def _send(folder: Path, compile_first: bool) -> bytes:
    script = SENDER.replace("COMPILE", "scaled.compile()" if compile_first else "")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def test_a_kernel_of_main_runs_in_a_fresh_process_from_the_disk_cache(tmp_path: Path) -> None:
    data = _send(tmp_path / "cache", compile_first=True)
    assert b"__main__" in data  # by value: another process has no such __main__
    done = run(f"""
        import pickle, time
        import numpy as np
        start = time.perf_counter()
        kernel = pickle.loads({data!r})
        result = kernel(np.array([1.0, 2.0]), 2.0)
        took = time.perf_counter() - start
        info = kernel.session.cache_info()
        print(result, info.disk_hits, info.misses, kernel.__doc__, took)
        assert pickle.loads({data!r}) is kernel
        try:
            kernel.__wrapped__(1, 2)
        except TypeError as exc:
            print("stub:", exc)
    """)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:3] == ["30.0", "1", "1"], done.stdout  # loaded, not compiled
    assert "Scaled first element." in done.stdout and "stub: scaled" in done.stdout


def test_unpickling_never_trusts_a_cache_the_receiver_would_not(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    data = _send(folder, compile_first=True)
    folder.chmod(folder.stat().st_mode | stat.S_IWOTH)  # anyone could have written there
    done = run(f"""
        import pickle
        import numpy as np
        kernel = pickle.loads({data!r})
        print(kernel(np.array([1.0]), 1.0), kernel.session.cache_info().disk_hits,
              kernel.session.disk_cache.refused is not None)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["20.0", "0", "True"]


def test_without_cloudpickle_the_error_names_the_callback() -> None:
    done = run("""
        import pickle, sys
        sys.modules["cloudpickle"] = None  # not installed
        from pymlirjit import callback, f64, mlir_kernel

        @callback
        def offset(x: f64) -> f64:
            return x + 1.0

        try:
            pickle.dumps(offset)
        except pickle.PicklingError as exc:
            print(exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "callback 'offset'" in done.stdout and "pip install cloudpickle" in done.stdout


def test_a_callback_unpickled_by_value_links_by_name_where_the_name_is_free() -> None:
    pytest.importorskip("cloudpickle")

    def double(x: f64) -> f64:
        return 2.0 * x

    registry = CallbackRegistry()
    cb = callback(registry=registry)(double)
    done = run(f"""
        import pickle
        from pymlirjit import mlir_kernel, f64
        from pymlirjit.callbacks import default_registry
        cb = pickle.loads({pickle.dumps(cb)!r})
        print(cb(4.0), cb.name in default_registry())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8.0", "False"]  # it was in no default registry


def test_pickling_an_array_kernel_round_trips_its_results() -> None:
    @mlir_kernel(source="""
    func.func @first(%a: memref<?xf64>) -> f64 {
      %c0 = arith.constant 0 : index
      %v = memref.load %a[%c0] : memref<?xf64>
      return %v : f64
    }""")
    def first(a: MemRef[f64, None]) -> f64: ...

    array = np.arange(3.0) + 7.0
    assert pickle.loads(pickle.dumps(first))(array) == first(array) == 7.0
    assert isinstance(pickle.loads(pickle.dumps(pickling_bump)), Callback)


def test_a_callback_pickled_by_value_ships_the_function_of_its_first_pickling() -> None:
    pytest.importorskip("cloudpickle")
    factor = [2.0]

    def scaled(x: f64) -> f64:
        return factor[0] * x

    cb = callback(registry=CallbackRegistry())(scaled)
    first = pickle.dumps(cb)
    factor[0] = 3.0  # cloudpickle would ship the new value: the token already names the old
    second = pickle.dumps(cb)
    assert first == second and cb(1.0) == 3.0
    done = run(f"""
        import pickle
        late = pickle.loads({second!r})
        print(late is pickle.loads({first!r}), late(1.0))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "2.0"]  # every receiver: one function per token


def test_a_kernel_pickled_by_value_carries_its_options_and_callbacks(session: Session) -> None:
    pytest.importorskip("cloudpickle")

    @callback(session=session)
    def pickled_offset(x: f64) -> f64:
        return x + 0.5

    @mlir_kernel(source=BUMPED.replace("pickling_bump", "pickled_offset"), session=session,
                 name="bumped", opt_level=0, fastmath=True, release_gil=False)
    def offset(a: f64) -> f64: ...

    data = pickle.dumps(offset)
    assert pickle.dumps(offset) == data  # its parts are pickled once
    done = run(f"""
        import pickle
        kernel = pickle.loads({data!r})
        result = kernel(1.0)
        print(result, kernel._overrides.given(), kernel.release_gil,
              kernel._options.opt_level, kernel._options.fastmath)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.5", "{'opt_level':", "0,", "'fastmath':", "True}",
                                   "False", "0", "True"]


def test_parts_pickled_at_once_by_two_threads_are_one_value() -> None:
    from pymlirjit.boundary.pickling import pickled_once

    class Holder:
        pass

    holder, both_making = Holder(), threading.Barrier(2, timeout=10)
    made = iter([b"first", b"second"])

    def make() -> bytes:
        part = next(made)
        both_making.wait()  # each thread has made its own parts before either keeps them
        return part

    first, second = run_in_threads(lambda _: pickled_once(holder, make), range(2))
    assert first == second == pickled_once(holder, make)


def test_a_receiver_keeps_what_it_unpickled_between_tasks(session: Session) -> None:
    # A Dask worker drops a task's kernel when the task ends: the next task's copy (the
    # same token) must be the kernel already built and compiled, not a new one.
    @mlir_kernel(source=ADD, session=session, name="add")
    def local_add(a: f64, b: f64) -> f64: ...

    data = pickle.dumps(local_add)
    done = run(f"""
        import gc, pickle
        kernel = pickle.loads({data!r})
        first = (kernel(1.0, 2.0), id(kernel), kernel.session.cache_info().misses)
        del kernel
        gc.collect()
        kernel = pickle.loads({data!r})
        print(*first, kernel(2.0, 2.0), id(kernel), kernel.session.cache_info().misses,
              kernel.compile() is kernel.compile())
    """)
    assert done.returncode == 0, done.stderr
    result, ident, misses, result2, ident2, misses2, same = done.stdout.split()
    assert (result, result2, ident2, misses, misses2, same) == (
        "3.0", "4.0", ident, "1", "1", "True")


def test_a_receiver_keeps_only_the_last_objects_it_unpickled() -> None:
    sessions = [Session(opt_level=level) for level in (0, 1, 3)]
    done = run(f"""
        import gc, pickle, weakref
        from pymlirjit.boundary import pickling
        pickling.KEPT = 2
        refs = [weakref.ref(pickle.loads(data)) for data in {[pickle.dumps(s) for s in sessions]!r}]
        gc.collect()
        print([ref() is not None for ref in refs], [ref().opt_level for ref in refs[1:]])
        pickling.forget_unpickled()
        gc.collect()
        print([ref() is not None for ref in refs])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[False, True, True] [1, 3]", "[False, False, False]"]


def test_the_sender_does_not_keep_what_it_pickled(session: Session) -> None:
    import gc
    import weakref

    @mlir_kernel(source=ADD, session=session, name="add")
    def local_add(a: f64, b: f64) -> f64: ...

    data = pickle.dumps(local_add)
    assert pickle.loads(data) is local_add
    ref = weakref.ref(local_add)
    del local_add
    gc.collect()
    assert ref() is None


def test_a_callback_by_value_carries_scalar_types_by_reference() -> None:
    pytest.importorskip("cloudpickle")
    from pymlirjit.boundary.pickling import function_by_value
    from pymlirjit.boundary.types import ScalarType

    def total(a: MemRef[f64, None], x: f64) -> f64:
        return float(a.sum()) + x

    # The types themselves, not their names (this module's annotations are strings).
    total.__annotations__ = {"a": MemRef[f64, None], "x": f64, "return": f64}
    cb = callback(registry=CallbackRegistry())(total)
    data = pickle.dumps(cb)
    assert b"ScalarType" not in data  # each type is a name, not a value to rebuild
    done = run(f"""
        import pickle
        import numpy as np
        from pymlirjit import f64
        cb = pickle.loads({data!r})
        memref, x = cb.signature.param_types
        print(memref.element is f64, x is f64, cb.signature.results[0] is f64,
              cb.__wrapped__.__annotations__["x"] is f64, cb(np.ones(3), 1.0))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "True", "4.0"]
    # A scalar type made apart is no canonical one: it travels by value.
    odd = ScalarType("f64", "float", 64, "float64", f64.ctype)
    back = pickle.loads(function_by_value(total, "test", (odd, f64)))
    assert back[0] == odd and back[0] is not f64 and back[1] is f64


def test_a_callbacks_scalar_signature_travels_as_names_and_is_shared() -> None:
    pytest.importorskip("cloudpickle")

    def half(x: f64, y: f64) -> f64:
        return x / 2

    def third(a: f64, b: f64) -> f64:
        return a / 3

    def quarter(x: f64, y: f64) -> f64:
        return x / 4

    cbs = [callback(registry=CallbackRegistry())(f) for f in (half, third, quarter)]
    data = pickle.dumps(cbs)
    # Each Signature and Parameter class in a pickle is an import by name (~1 us each).
    assert b"Signature" not in data and b"Parameter" not in data
    done = run(f"""
        import pickle
        from pymlirjit import f64
        half, third, quarter = pickle.loads({data!r})
        sig = half.signature
        print(sig, [p.name for p in sig.params], sig.param_types[0] is f64,
              sig.results[0] is f64, half(3.0, 0.0), third(3.0, 0.0))
        # Parameter names differ: two signatures; the same names and types: one.
        print(third.signature is sig, third.signature.param_types == sig.param_types,
              quarter.signature is sig, pickle.loads(pickle.dumps(half)) is half)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "Signature('(f64, f64) -> f64') ['x', 'y'] True True 1.5 1.0", "False True True True"]


def test_a_signature_naming_no_scalar_type_is_refused_when_unpickled() -> None:
    from pymlirjit.boundary.callback import _callback_by_value

    with pytest.raises(pickle.UnpicklingError, match=r"no scalar types.*'f65'"):
        _callback_by_value("a-token-of-this-test", "bad", (("x",), ("f65",), ("f64",)),
                           pickle.dumps((len,)), False)


def test_a_child_forked_while_a_thread_held_the_token_lock_can_pickle() -> None:
    code = """
import os, pickle, signal, threading
from pymlirjit import mlir_kernel
from pymlirjit.boundary import pickling
kernel = mlir_kernel(source="func.func @f(%x: f64) -> f64 { return %x : f64 }",
                     name="f")(lambda x: None)
held, release = threading.Event(), threading.Event()
def hold():
    with pickling._token_lock:
        held.set()
        release.wait()
thread = threading.Thread(target=hold)
thread.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a lock still held would hang the child: make that a failure
    os._exit(0 if pickle.loads(pickle.dumps(kernel))(2.5) == 2.5 else 1)
release.set()
thread.join()
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    completed = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
                               capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "0", completed.stdout + completed.stderr


def test_a_kernels_parts_name_nothing_the_receiver_must_import(session: Session) -> None:
    # Each name a pickle holds is an import by name when unpickled (~1 us each).
    @mlir_kernel(source=ADD, session=session, name="add", opt_level=1)
    def local_add(a: f64, b: f64) -> f64:
        """Adds."""

    fixed, _ = pickle.loads(pickle.dumps(local_add)) and local_add.__dict__["_pickled_parts"]
    for name in (b"OptionOverrides", b"_Stub", b"pymlirjit"):
        assert name not in fixed
    done = run(f"""
        import inspect, pickle
        kernel = pickle.loads({pickle.dumps(local_add)!r})
        print(kernel(1.0, 2.0), kernel.__doc__, list(inspect.signature(kernel.__wrapped__)
              .parameters), kernel._overrides.opt_level, kernel.__qualname__.split(".")[-1])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3.0", "Adds.", "['a',", "'b']", "1", "local_add"]


def test_a_sessions_options_are_pickled_again_only_when_they_change() -> None:
    from pymlirjit.codegen.options import CompileOptions

    session = Session(opt_level=1)
    first = pickle.dumps(session)
    parts = session.__dict__["_pickled_parts"]
    pickle.dumps(session)
    assert session.__dict__["_pickled_parts"] is parts  # not pickled again
    session.options = CompileOptions.make(opt_level=3)
    done = run(f"""
        import pickle
        print(pickle.loads({first!r}).opt_level, pickle.loads({pickle.dumps(session)!r})
              .opt_level)
    """)
    assert done.returncode == 0, done.stderr
    # One token: a receiver keeps the session it made first; a new one gets level 3.
    assert done.stdout.split() == ["1", "1"]
    done = run(f"""
        import pickle
        print(pickle.loads({pickle.dumps(session)!r}).opt_level)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]


def test_parts_find_pymlirjit_names_once_and_others_as_pickle_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from pymlirjit.boundary import pickling
    from pymlirjit.codegen.options import CompileOptions

    options = CompileOptions.make(opt_level=1)
    assert pickling.loads_parts(pickle.dumps(options)) == options
    assert pickling._found[("pymlirjit.codegen.options", "CompileOptions")] is CompileOptions
    module = types.ModuleType("pickling_parts_elsewhere")
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def first() -> int:
        return 1

    def second() -> int:
        return 2

    for function in (first, second):
        function.__module__, function.__qualname__ = module.__name__, "current"
    module.current = first  # type: ignore[attr-defined]
    data = pickle.dumps(first)
    assert pickling.loads_parts(data) is first
    module.current = second  # type: ignore[attr-defined]
    assert pickling.loads_parts(data) is second  # looked up again, as pickle.loads does
    assert (module.__name__, "current") not in pickling._found


def test_the_token_table_lets_go_of_objects_that_died() -> None:
    sessions = [Session(opt_level=level) for level in (0, 1, 3)]
    done = run(f"""
        import gc, pickle
        from pymlirjit.boundary import pickling
        pickling.KEPT = 0
        for data in {[pickle.dumps(s) for s in sessions]!r} * 2:
            pickle.loads(data)
        gc.collect()
        print(len(pickling._by_token), len(pickling._kept))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0"]


def test_objects_by_value_name_one_function_the_receiver_looks_up() -> None:
    # Each name a pickle holds is looked up by import when pickled and when unpickled
    # (~0.85 us each): a kernel with a callback and a session of its own names one.
    pytest.importorskip("cloudpickle")
    import pickletools

    session = Session(opt_level=1)

    @callback(session=session)
    def pickling_twice(x: f64) -> f64:
        return 2.0 * x

    @mlir_kernel(source=BUMPED.replace("pickling_bump", "pickling_twice"), session=session,
                 name="bumped")
    def local_bumped(a: f64) -> f64: ...

    data = pickle.dumps(local_bumped)
    pushed: list[str] = []
    globals_named = []
    for op, arg, _ in pickletools.genops(data):
        if op.name.endswith("UNICODE"):
            pushed.append(arg)
        elif op.name == "STACK_GLOBAL":  # named by the last two strings pushed
            globals_named.append(tuple(pushed[-2:]))
    assert globals_named == [("pymlirjit.boundary.pickling", "by_value")]
    done = run(f"""
        import pickle
        kernel = pickle.loads({data!r})
        print(kernel(1.5), kernel.session.opt_level, kernel.session is not None)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3.0", "1", "True"]


def test_an_unknown_kind_of_object_by_value_is_refused_by_name() -> None:
    from pymlirjit.boundary.pickling import by_value

    with pytest.raises(pickle.UnpicklingError, match=r"'widget'.*another version"):
        by_value("widget", "a-token")


def test_sessions_unpickled_with_equal_options_share_them() -> None:
    # The options are immutable: a receiver unpickles ~1 KB of them once per value.
    data = [pickle.dumps(Session(opt_level=1)) for _ in range(2)]
    done = run(f"""
        import pickle
        first, second = (pickle.loads(d) for d in {data!r})
        print(first is second, first.options is second.options, second.opt_level)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "1"]


def test_a_kernel_whose_callback_calls_it_again_pickles_by_value() -> None:
    # The reentrancy example of docs/threads.md, in __main__: pickling recursed ~60
    # levels (kernel -> callback's function -> kernel ...) and failed.
    done = run("""
        import pickle, subprocess, sys
        from pymlirjit import callback, mlir_kernel, f64, i64

        @callback
        def down(n: i64) -> f64:
            return 0.0 if n <= 0 else 1.0 + countdown(n - 1)

        @mlir_kernel(source='''
        func.func @countdown(%n: i64) -> f64 {
          %x = call @down(%n) : (i64) -> f64
          return %x : f64
        }
        func.func private @down(i64) -> f64
        ''')
        def countdown(n: i64) -> f64: ...

        data = pickle.dumps(countdown)
        assert pickle.loads(data) is countdown  # in this process: the kernel itself
        receiver = subprocess.run(
            [sys.executable, "-c", "import pickle, sys; "
             "k = pickle.loads(sys.stdin.buffer.read()); print(k(4), k(2))"],
            input=data, capture_output=True, timeout=120)
        print(countdown(3), receiver.stdout.decode().strip(), receiver.stderr.decode())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3.0", "4.0", "2.0"], done.stdout


def test_a_kernel_sent_again_after_its_callback_was_redefined_runs_the_new_one() -> None:
    # The token named the kernel alone: a receiver that had it reused the old callback.
    done = run("""
        import pickle, subprocess, sys
        from pymlirjit import callback, mlir_kernel, f64

        RECEIVER = '''
        import pickle, sys
        while True:
            size = sys.stdin.buffer.readline()
            if not size:
                break
            kernel = pickle.loads(sys.stdin.buffer.read(int(size)))
            print(kernel(1.0), flush=True)
        '''

        @callback
        def step(x: f64) -> f64:
            return x + 1.0

        @mlir_kernel(source='''
        func.func @apply(%x: f64) -> f64 {
          %y = call @step(%x) : (f64) -> f64
          return %y : f64
        }
        func.func private @step(f64) -> f64
        ''')
        def apply(x: f64) -> f64: ...

        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)

        def send():
            data = pickle.dumps(apply)
            receiver.stdin.write(b"%d\\n" % len(data) + data)
            receiver.stdin.flush()
            return receiver.stdout.readline().decode().strip()

        first = send()

        @callback
        def step(x: f64) -> f64:  # redefined: apply links the new one
            return x + 10.0

        print(first, send(), apply(1.0))
        receiver.stdin.close()
        receiver.wait(timeout=60)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.0", "11.0", "11.0"], done.stdout
