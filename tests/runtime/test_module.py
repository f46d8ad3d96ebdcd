"""pymlirjit.runtime.module: the build and load stages, and CompiledModule."""

from __future__ import annotations

import dataclasses

import pytest

from pymlirjit import SignatureError, callback, f64
from pymlirjit.callbacks import Callback, CallbackRegistry
from pymlirjit.runtime.artifacts import LOADERS, build_artifact, load
from pymlirjit.runtime.cacheentry import KINDS
from pymlirjit.runtime.engine import ExecutionEngine
from pymlirjit.runtime.module import (
    CompiledModule,
    attach_native_entries,
    build_engine,
    call_policy,
    engine_module,
)
from pymlirjit.runtime.objectfile import ObjectEngine
from pymlirjit.runtime.prepare import CompileOptions, PreparedModule, lower, prepare
from pymlirjit.runtime.sharedlib import SharedLibrary, supported

SOURCE = """
func.func @run(%x: f64) -> f64 {
  %r = call @bump(%x) : (f64) -> f64
  %s = arith.mulf %r, %r : f64
  return %s : f64
}
func.func private @bump(f64) -> f64
"""


@callback(name="bump", registry=CallbackRegistry())  # seen by no session
def bump(x: f64) -> f64:
    return x + 1.0


LINKABLE: dict[str, Callback] = {"bump": bump}


def lowered(options: CompileOptions) -> PreparedModule:
    return lower(prepare(SOURCE, options, LINKABLE.get), options)


def test_stages_give_a_module_that_generates_no_code_until_asked() -> None:
    options = CompileOptions.make()
    prepared = lowered(options)
    engine = build_engine(prepared, options)
    assert isinstance(engine, ExecutionEngine)
    module = engine_module(engine, prepared, SOURCE, options)
    assert isinstance(module, CompiledModule)
    assert module.run.native_entry is None  # the constructor generated nothing
    assert module.run.call_python(2.0) == 9.0
    attach_native_entries(module)
    assert module.run.native_entry is not None
    assert module.run(3.0) == 16.0
    assert "llvm.func @run" in module.lowered_mlir


def test_a_missing_symbol_fails_the_build_with_every_name() -> None:
    from pymlirjit import LinkError

    options = CompileOptions.make()
    prepared = lower(prepare(SOURCE, options, lambda name: None), options)
    with pytest.raises(LinkError, match="@bump") as info:
        build_engine(prepared, options)
    assert info.value.missing == ("bump",)


def test_every_artifact_kind_has_a_loader() -> None:
    assert set(LOADERS) == set(KINDS)


@pytest.mark.parametrize("kind", ["object", "shared"])
def test_each_artifact_loads_as_compiled_code(kind: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "shared" and not supported():
        pytest.skip("needs Linux and a C compiler")
    if kind == "object":
        monkeypatch.setenv("CC", "")  # no compiler: the object code alone
    options = CompileOptions.make()
    prepared = lowered(options)
    entry = build_artifact(build_engine(prepared, options), prepared, options)
    assert entry.kind == kind
    assert entry.callbacks == {"_mlir_ciface_bump": "bump"}
    module = load(entry, SOURCE, LINKABLE, options)
    expected = {"object": ObjectEngine, "shared": SharedLibrary}[kind]
    assert type(module.engine) is expected
    # A shared library brings its native entries; object code gets them generated.
    assert (module.run.native_entry is not None) == (kind == "shared")
    attach_native_entries(module)
    assert module.run(1.0) == 4.0
    assert module.callbacks == {"bump": bump}


@pytest.mark.parametrize(("calls_back", "shared_libs", "expected"), [
    (False, (), (None, False)),
    (True, (), (False, True)),
    (False, ("lib.so",), (True, False)),
    (True, ("lib.so",), (True, False)),
])
def test_call_policy(calls_back: bool, shared_libs: tuple[str, ...],
                     expected: tuple[bool | None, bool]) -> None:
    assert call_policy(calls_back, shared_libs) == expected


COUNTING = """
llvm.mlir.global internal @count(0 : i64) : i64
llvm.mlir.global_ctors ctors = [@ctor], priorities = [0 : i32], data = [#llvm.zero]
llvm.func @ctor() {
  %p = llvm.mlir.addressof @count : !llvm.ptr
  %v = llvm.load %p : !llvm.ptr -> i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %n = llvm.add %v, %one : i64
  llvm.store %n, %p : i64, !llvm.ptr
  llvm.return
}
llvm.func @constructed() -> i64 {
  %p = llvm.mlir.addressof @count : !llvm.ptr
  %v = llvm.load %p : !llvm.ptr -> i64
  llvm.return %v : i64
}
"""


@pytest.mark.parametrize("kind", ["object", "shared"])
def test_global_constructors_run_once_in_each_load(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "shared" and not supported():
        pytest.skip("needs Linux and a C compiler")
    if kind == "object":
        monkeypatch.setenv("CC", "")
    options = CompileOptions.make()
    prepared = lower(prepare(COUNTING, options, lambda name: None), options)
    engine = build_engine(prepared, options)
    entry = build_artifact(engine, prepared, options)
    assert entry.kind == kind and entry.initializers
    # Each load has its own globals, constructed once.
    for _ in range(2):
        assert load(entry, COUNTING, {}, options).constructed() == 1
    assert engine_module(engine, prepared, COUNTING, options).constructed() == 1


def test_an_entry_keeps_why_a_function_is_uncallable() -> None:
    options = CompileOptions.make()
    source = "func.func @show(%t: tensor<*xf32>) { return }\n" + SOURCE
    prepared = lower(prepare(source, options, LINKABLE.get), options)
    entry = build_artifact(build_engine(prepared, options), prepared, options)
    assert entry.uncallable == prepared.uncallable and "show" in entry.uncallable
    module = load(entry, source, LINKABLE, options)
    with pytest.raises(SignatureError, match="tensor<\\*xf32> cannot cross"):
        module.show(1)
    with pytest.raises(SignatureError, match="tensor<\\*xf32> cannot cross"):
        module["show"]


@pytest.mark.parametrize("name", ["/usr/lib/libc.so.6", "./libmlir_async_runtime.so",
                                  "..", "libnot_an_mlir_runtime.so"])
def test_runtime_libraries_of_an_entry_are_only_found_in_mlir_s_folder(name: str) -> None:
    options = CompileOptions.make()
    prepared = lowered(options)
    entry = build_artifact(build_engine(prepared, options), prepared, options)
    with pytest.raises((ValueError, FileNotFoundError)):
        load(dataclasses.replace(entry, runtime_libs=(name,)), SOURCE, LINKABLE, options)
