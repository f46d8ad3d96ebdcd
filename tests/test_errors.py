"""pymlirjit.errors: MLIRError's text, Diagnostic from MLIR's bindings, and the collector
of MLIR's error diagnostics."""

from __future__ import annotations

import pytest
from mlir import ir

from pymlirjit import MLIRError
from pymlirjit.errors import Diagnostic, error_diagnostics


def test_an_mlir_error_lists_every_diagnostic_under_its_summary() -> None:
    note = Diagnostic("note", "declared here", 'loc("k.mlir":1:1)')
    error = MLIRError("lowering failed", [
        Diagnostic("error", "first", 'loc("k.mlir":3:5)', (note,)),
        Diagnostic("error", "second", 'loc("k.mlir":4:5)')])
    assert str(error) == ('lowering failed\n'
                          'loc("k.mlir":3:5): error: first\n'
                          '  loc("k.mlir":1:1): note: declared here\n'
                          'loc("k.mlir":4:5): error: second')
    assert isinstance(error, ValueError)
    assert str(MLIRError("no diagnostics")) == "no diagnostics"


def test_errors_are_collected_renamed_and_nothing_else_is_kept() -> None:
    context = ir.Context()
    with context, error_diagnostics(context, "kernel.mlir") as errors:
        ir.Location.file("-", 7, 3).emit_error("the bad thing")
        ir.Location.unknown().emit_error("another")
    assert [d.message for d in errors] == ["the bad thing", "another"]
    assert errors[0].severity == "error"
    assert errors[0].location == 'loc("kernel.mlir":7:3)'  # MLIR's "-" renamed


def test_the_collector_is_detached_when_the_block_ends_or_raises() -> None:
    context = ir.Context()
    with pytest.raises(KeyError), context, error_diagnostics(context, "a") as first:
        raise KeyError("from the block")
    with context, error_diagnostics(context, "b") as second:
        ir.Location.unknown().emit_error("later")
    assert first == []
    assert [d.message for d in second] == ["later"]


def test_a_diagnostic_of_the_bindings_keeps_its_notes() -> None:
    context = ir.Context()
    with context, ir.Location.unknown(), pytest.raises(Exception) as caught:  # bindings'
        ir.Module.parse("func.func @f() { %x = arith.constant 1 : i32 \n"
                        "%x = arith.constant 2 : i32 \n func.return }")
    diagnostics = [Diagnostic.from_mlir(d) for d in caught.value.error_diagnostics]
    assert diagnostics[0].severity == "error"
    assert "redefinition" in diagnostics[0].message
    assert [n.severity for n in diagnostics[0].notes] == ["note"]
    assert "previously defined" in diagnostics[0].notes[0].message
