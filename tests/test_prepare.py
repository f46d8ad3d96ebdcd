"""pymlirjit.prepare: compile options as values, and the MLIR a session prepares."""

from __future__ import annotations

import dataclasses

import pytest

from pymlirjit import MLIRError, SignatureError, callback, f64
from pymlirjit.callbacks import Callback, CallbackRegistry
from pymlirjit.pipeline import DEFAULT_PIPELINE, normalize_pipeline
from pymlirjit.prepare import CompileOptions, lower, prepare

SOURCE = """
func.func @run(%x: f64) -> f64 {
  %r = call @hook(%x) : (f64) -> f64
  %s = call @elsewhere(%r) : (f64) -> f64
  return %s : f64
}
func.func private @hook(f64) -> f64
func.func private @elsewhere(f64) -> f64
func.func private @helper(%x: f64) -> f64 {
  return %x : f64
}
"""


@callback(name="hook", registry=CallbackRegistry())  # seen by no session
def hook(x: f64) -> f64:
    return x + 1.0


def resolve_hook(name: str) -> Callback | None:
    return hook if name == "hook" else None


def test_compile_options_are_immutable_values() -> None:
    options = CompileOptions.make(None, 2, ["mlir_c_runner_utils"])
    assert options == CompileOptions.make(DEFAULT_PIPELINE, 2, options.shared_libs)
    assert hash(options) == hash(CompileOptions.make(None, 2, ["mlir_c_runner_utils"]))
    assert options.pipeline == normalize_pipeline(None)
    assert options.shared_libs[0].endswith("libmlir_c_runner_utils.so")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.opt_level = 3  # type: ignore[misc]


def test_replacing_options_checks_what_changes() -> None:
    options = CompileOptions.make()
    assert options.replace() is options  # the session's own: nothing rebuilt
    faster = options.replace(opt_level=3)
    assert (faster.opt_level, faster.pipeline, faster.shared_libs) == (3, options.pipeline, ())
    assert faster != options
    with pytest.raises(ValueError, match="opt_level"):
        options.replace(opt_level=7)


def test_prepare_links_declarations_and_marks_c_interfaces() -> None:
    prepared = prepare(SOURCE, CompileOptions.make(), resolve_hook)
    assert list(prepared.signatures) == ["run"]  # private functions are not entries
    signature, entry = prepared.signatures["run"]
    assert (signature.mlir, entry) == ("(f64) -> f64", "run")
    assert prepared.linked == {"hook": hook}
    assert prepared.registrations == {"_mlir_ciface_hook": hook}
    assert prepared.declared == ("hook", "elsewhere")  # unresolved: left to the process
    text = str(prepared.module)
    assert text.count("llvm.emit_c_interface") == 2  # @run and @hook, not @elsewhere


def test_prepare_checks_callbacks_against_declarations() -> None:
    @callback(name="hook", registry=CallbackRegistry())
    def wrong(x: f64, y: f64) -> f64:
        return x

    with pytest.raises(SignatureError, match="callback @hook"):
        prepare(SOURCE, CompileOptions.make(), lambda name: wrong if name == "hook" else None)


def test_prepare_adds_shims_where_the_boundary_differs() -> None:
    source = """
    func.func @re(%z: complex<f64>) -> f64 {
      %r = complex.re %z : complex<f64>
      return %r : f64
    }"""
    prepared = prepare(source, CompileOptions.make(), lambda name: None)
    _, entry = prepared.signatures["re"]
    assert entry.startswith("__pymlirjit_entry_")
    assert f"@{entry}" in str(prepared.module)


def test_prepare_makes_tensor_arguments_read_only() -> None:
    source = """
    func.func @same(%t: tensor<4xf64>) -> tensor<4xf64> {
      return %t : tensor<4xf64>
    }"""
    prepared = prepare(source, CompileOptions.make(), lambda name: None)
    assert "bufferization.writable = false" in str(prepared.module)


def test_prepare_refuses_reserved_names() -> None:
    source = "func.func @__pymlirjit_entry_x() {\n  return\n}"
    with pytest.raises(MLIRError, match="reserved") as info:
        prepare(source, CompileOptions.make(), lambda name: None, "k.mlir")
    assert "k.mlir" in str(info.value)


def test_lower_lowers_in_place() -> None:
    options = CompileOptions.make()
    prepared = prepare(SOURCE, options, resolve_hook)
    assert lower(prepared, options) is prepared
    assert "llvm.func @run" in str(prepared.module)
