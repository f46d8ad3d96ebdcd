"""Callbacks taking sparse tensors: compiled code hands them scipy.sparse views."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from pymlirjit import Session, SignatureError, callback

MAPS = {"CSR": "(i, j) -> (i : dense, j : compressed)",
        "CSC": "(i, j) -> (j : dense, i : compressed)",
        "DCSR": "(i, j) -> (i : compressed, j : compressed)",
        "COO": "(i, j) -> (i : compressed(nonunique), j : singleton)"}


def encoded(map_: str) -> str:
    return f"tensor<?x?xf64, #sparse_tensor.encoding<{{ map = {map_} }}>>"


def source(map_: str) -> str:
    t = encoded(map_)
    return f"""
func.func @f(%a: {t}, %k: f64) -> f64 {{
  %r = func.call @inspect(%a, %k) : ({t}, f64) -> f64
  return %r : f64
}}
func.func private @inspect({t}, f64) -> f64
"""


@pytest.mark.parametrize("name", list(MAPS))
def test_a_callback_sees_the_sparse_argument_as_scipy(name: str, tmp_path: Path) -> None:
    t = encoded(MAPS[name])
    seen: list[Any] = []

    def inspect(a: Any, k: float) -> float:
        seen.append(a.toarray())
        return float(a.sum()) * k

    a = sp.random_array((6, 9), density=0.3, format="csr", rng=1)
    a = a.asformat({"CSR": "csr", "CSC": "csc", "DCSR": "csr", "COO": "coo"}[name])
    sessions = (Session(), Session(cache_dir=tmp_path), Session(cache_dir=tmp_path))
    for session in sessions:  # the last one loads the module from the disk cache
        callback(f"({t}, f64) -> f64", session=session)(inspect)
        m = session.compile(source(MAPS[name]))
        assert m.f(a, 2.0) == pytest.approx(2.0 * a.sum())
        np.testing.assert_array_equal(seen.pop(), a.toarray())
    assert sessions[-1].cache_info().disk_hits == 1


def test_a_sparse_callback_raising_ends_the_call(session: Session) -> None:
    t = encoded(MAPS["CSR"])

    @callback(f"({t}, f64) -> f64", session=session)
    def inspect(a: Any, k: float) -> float:
        if k > 1.0:
            raise LookupError(f"k is {k}")
        return float(a.nnz)

    m = session.compile(source(MAPS["CSR"]))
    a = sp.random_array((4, 4), density=0.5, format="csr", rng=2)
    assert m.f(a, 0.5) == a.nnz
    with pytest.raises(LookupError, match=r"k is 3\.0") as raised:
        m.f(a, 3.0)
    # noted with the user's callback's name, not the flat symbol serving it
    assert getattr(raised.value, "__notes__", None) == [
        "raised in callback 'inspect' called from compiled MLIR code"]
    assert m.f(a, 0.5) == a.nnz


def test_a_callback_cannot_return_a_sparse_tensor(session: Session) -> None:
    t = encoded(MAPS["CSR"])

    @callback(f"(f64) -> {t}", session=session)
    def make(k: float) -> Any:
        raise AssertionError("never called")

    with pytest.raises(SignatureError, match="a callback cannot return a sparse tensor"):
        session.compile(f"""
func.func @f(%k: f64) -> {t} {{
  %r = func.call @make(%k) : (f64) -> {t}
  return %r : {t}
}}
func.func private @make(f64) -> {t}
""")
