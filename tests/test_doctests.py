"""The examples in the public docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["types", "boundary.types", "boundary.signature", "callbacks", "lowering.pipeline",
           "runtime.engine", "session", "kernel", "ufunc", "typing", "boundary.cprototype",
           "runtime.externs", "lowering.walk", "frontend.complexes", "frontend.randoms",
           "boundary.native.randomstate"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"pymlirjit.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
