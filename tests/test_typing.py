"""pymlirjit.typing: scalar annotations for type checkers, read by pymlirjit as types."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pymlirjit
import pymlirjit.typing as annotations
from pymlirjit import Session, callback
from pymlirjit.boundary.types import to_type
from pymlirjit.typing import complex128, f32, i1, i32
from tests.conftest import skip_unless_ndarray_is_generic_with_defaults


@pytest.mark.parametrize("name", annotations.__all__)
def test_each_alias_is_the_type_of_the_same_name(name: str) -> None:
    if name in ("MemRef", "Tensor", "UnrankedMemRef"):  # the spellers themselves, at run time
        assert getattr(annotations, name) is getattr(pymlirjit, name)
        return
    assert to_type(getattr(annotations, name)) is getattr(pymlirjit, name)


def test_kernels_and_callbacks_take_the_aliases(session: Session) -> None:
    @callback(session=session)
    def halve(x: f32, flip: i1, z: complex128) -> f32:
        return -x / 2 if flip else x / 2 + z.imag

    module = session.compile("""
    func.func @run(%x: f32, %k: i32) -> f32 {
      %t = arith.constant true
      %z = complex.constant [0.0 : f64, 1.0 : f64] : complex<f64>
      %h = call @halve(%x, %t, %z) : (f32, i1, complex<f64>) -> f32
      %kf = arith.sitofp %k : i32 to f32
      %r = arith.addf %h, %kf : f32
      return %r : f32
    }
    func.func private @halve(f32, i1, complex<f64>) -> f32
    """)

    @pymlirjit.mlir_kernel(source=module.source, session=session)
    def run(x: f32, k: i32) -> f32: ...

    assert run(8.0, 1) == module.run(8.0, 1) == -3.0


CHECKED = """
from pymlirjit import callback, mlir_kernel
from pymlirjit.typing import f32, i32

@callback
def scale(x: f32, k: i32) -> f32:
    return x / 2 + k / 2

@mlir_kernel(source="func.func @neg(%a: f32) -> f32 {...}")
def neg(a: f32) -> f32:
    raise NotImplementedError

total: float = scale(1.0, 2) + neg(1.0)
"""


def test_type_checkers_accept_the_aliases(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent(CHECKED))
    # The package's own names are the same aliases to a type checker.
    root = tmp_path / "root.py"
    root.write_text(textwrap.dedent(CHECKED).replace("pymlirjit.typing", "pymlirjit"))
    # ...so a type checker sees no ScalarType attribute on them (take those from .types).
    bad = tmp_path / "bad.py"
    bad.write_text("import pymlirjit\nname: str = pymlirjit.f32.mlir\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / ".mypy"), str(good), str(root),
                           str(bad)],
                          capture_output=True, text=True, timeout=300)
    assert "good.py" not in done.stdout and "root.py" not in done.stdout, done.stdout
    assert "bad.py:2: error" in done.stdout, done.stdout


ARRAYS = """
from typing import Literal

import numpy as np

from pymlirjit import MemRef, Tensor, UnrankedMemRef, callback, f32, f64, index

@callback
def total(a: MemRef[f64, None, Literal[3]], c: UnrankedMemRef[f32], n: index) -> f64:
    a *= 2  # a numpy array to the type checker too
    return float(a.sum() + c.sum()) * n

def stub(t: Tensor[f32, None]) -> None: ...

rows: np.ndarray = np.ones((2, 3)).view(np.ndarray)
"""


def test_type_checkers_read_array_annotations_as_numpy_arrays(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    skip_unless_ndarray_is_generic_with_defaults()
    arrays = tmp_path / "arrays.py"
    arrays.write_text(textwrap.dedent(ARRAYS))
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / ".mypy"), str(arrays)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    namespace: dict[str, object] = {}
    exec(compile(textwrap.dedent(ARRAYS), "arrays", "exec"), namespace)  # and it runs
    assert str(namespace["total"].signature) == (  # type: ignore[attr-defined]
        "Signature('(memref<?x3xf64>, memref<*xf32>, index) -> f64')")
