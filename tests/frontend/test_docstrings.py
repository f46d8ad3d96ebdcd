"""The examples in the docstrings of @jit and its frontend run."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["jit", "frontend.jtypes", "frontend.diagnostics"])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"pymlirjit.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
