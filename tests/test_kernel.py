"""@mlir_kernel and compiled functions: arguments, results, checks, memory."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MemRef, Session, SignatureError, f32, f64, i8, i32, mlir_kernel

from .conftest import rss_bytes
from .test_callbacks import SCALAR_CASES

IDENTITY = """
func.func @same(%a: {t}) -> {t} {{
  return %a : {t}
}}
"""


@pytest.mark.parametrize(("mlir_type", "value", "_other"), SCALAR_CASES)
def test_every_scalar_type_through_a_kernel(session: Session, mlir_type: str, value: object,
                                            _other: object) -> None:
    same = session.compile(IDENTITY.format(t=mlir_type)).same
    result = same(value)
    assert result == value and type(result) is type(value)


def test_the_design_example(session: Session) -> None:
    from pymlirjit import callback

    @callback(session=session)
    def scale(x: f32, k: i32) -> f32:
        return x / 2 + k / 2

    @mlir_kernel(source="""
    func.func @add(%a: f32, %b: i32) -> f32 {
      %r = call @scale(%a, %b) : (f32, i32) -> f32
      return %r : f32
    }
    func.func private @scale(f32, i32) -> f32
    """, session=session)
    def add(a: f32, b: i32) -> f32: ...

    assert add(42.0, 2) == 22.0
    assert add.signature.mlir == "(f32, i32) -> f32"
    assert [p.name for p in add.signature.params] == ["a", "b"]
    assert "llvm.func" in add.lowered_mlir
    assert add.engine is not None


def test_source_from_a_path(tmp_path: Path, session: Session) -> None:
    path = tmp_path / "neg.mlir"
    path.write_text("""
    func.func @neg(%a: f64) -> f64 {
      %r = arith.negf %a : f64
      return %r : f64
    }""")

    @mlir_kernel(source=path, session=session)
    def neg(a: float) -> float: ...

    assert neg(2.5) == -2.5


def test_kernel_name_differs_from_stub(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="i64"), name="same", session=session)
    def other_name(a: int) -> int: ...

    assert other_name(7) == 7


def test_several_kernels_from_one_module_and_several_results(session: Session) -> None:
    module = session.compile("""
    func.func @swap(%a: i32, %b: f64) -> (f64, i32) {
      return %b, %a : f64, i32
    }
    func.func @inc(%a: i32) -> i32 {
      %c = arith.constant 1 : i32
      %r = arith.addi %a, %c : i32
      return %r : i32
    }""")
    assert module.swap(3, 0.5) == (0.5, 3)
    assert module["inc"](41) == 42


MEMREF_SOURCE = """
func.func @scale(%a: memref<?x?xf64, strided<[?, ?], offset: ?>>, %k: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x?xf64, strided<[?, ?], offset: ?>>
  %m = memref.dim %a, %c1 : memref<?x?xf64, strided<[?, ?], offset: ?>>
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %m step %c1 {
      %x = memref.load %a[%i, %j] : memref<?x?xf64, strided<[?, ?], offset: ?>>
      %y = arith.mulf %x, %k : f64
      memref.store %y, %a[%i, %j] : memref<?x?xf64, strided<[?, ?], offset: ?>>
    }
  }
  return
}
"""


@pytest.mark.parametrize("view", ["plain", "transposed", "sliced", "reversed"])
def test_strided_memref_arguments_are_zero_copy(session: Session, view: str) -> None:
    scale = session.compile(MEMREF_SOURCE).scale
    base = np.arange(30, dtype=np.float64).reshape(5, 6)
    expected = base.copy()
    select = {
        "plain": lambda a: a,
        "transposed": lambda a: a.T,
        "sliced": lambda a: a[1:4, ::2],
        "reversed": lambda a: a[::-1, ::-2],
    }[view]
    select(expected)[...] *= 3
    scale(select(base), 3.0)
    np.testing.assert_array_equal(base, expected)


def test_identity_layout_needs_a_contiguous_array(session: Session) -> None:
    module = session.compile("func.func @f(%a: memref<?x?xf32>) { return }")
    with pytest.raises(ValueError, match="C-contiguous"):
        module.f(np.zeros((3, 4), np.float32).T)


@pytest.mark.parametrize(("argument", "error", "message"), [
    (np.zeros((2, 3), np.float64), TypeError, "dtype float32"),
    (np.zeros((2, 3, 1), np.float32), ValueError, "rank-2"),
    (np.zeros((2, 4), np.float32), ValueError, "dim 1 must be 3"),
    ([[1.0] * 3] * 2, TypeError, "numpy array"),
])
def test_bad_array_arguments_name_the_parameter(session: Session, argument: object,
                                                error: type[Exception], message: str) -> None:
    module = session.compile("func.func @f(%a: memref<?x3xf32>) { return }")
    with pytest.raises(error, match=message) as caught:
        module.f(argument)
    assert "parameter 'arg0'" in str(caught.value)


def test_kernel_errors_use_the_stub_parameter_names(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="i8"), name="same", session=session)
    def small(value: i8) -> i8: ...

    with pytest.raises(ValueError, match=r"'value'.*out of range for i8"):
        small(300)
    with pytest.raises(TypeError, match="expected an int"):
        small(float("inf"))
    with pytest.raises(TypeError, match="takes 1 arguments"):
        small(1, 2)
    with pytest.raises(TypeError, match="keyword"):
        small(value=1)


def test_stub_annotations_are_checked(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="f32"), name="same", session=session)
    def wrong(a: f64) -> f64: ...

    with pytest.raises(SignatureError, match=r"f64.*f32|f32.*f64"):
        wrong(1.0)


def test_missing_kernel_name(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="f32"), session=session)
    def absent(a: f32) -> f32: ...

    with pytest.raises(SignatureError, match=r"no public function @absent.*same"):
        absent(1.0)


def test_tensor_arguments_and_results(session: Session) -> None:
    module = session.compile("""
    func.func @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = tensor.dim %a, %c0 : tensor<?x?xf32>
      %m = tensor.dim %b, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%n, %m) : tensor<?x?xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
                         outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }""")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(module.matmul(a, b), a @ b)
    np.testing.assert_allclose(module.matmul(b.T.copy().T[:, :2].T, a.T), b[:, :2].T @ a.T)


def test_memref_results_own_their_memory_and_are_freed(session: Session) -> None:
    fill = session.compile("""
    func.func @fill(%n: index, %v: f64) -> memref<?xf64> {
      %m = memref.alloc(%n) : memref<?xf64>
      linalg.fill ins(%v : f64) outs(%m : memref<?xf64>)
      return %m : memref<?xf64>
    }""").fill
    result = fill(4, 2.5)
    np.testing.assert_array_equal(result, [2.5] * 4)
    view = result[1:]
    del result
    gc.collect()
    np.testing.assert_array_equal(view, [2.5] * 3)  # a view keeps the buffer alive


def test_memref_results_do_not_leak(session: Session) -> None:
    fill = session.compile("""
    func.func @fill(%n: index) -> memref<?xf64> {
      %m = memref.alloc(%n) : memref<?xf64>
      return %m : memref<?xf64>
    }""").fill
    rss = rss_bytes() // 1024
    for _ in range(200):
        fill(1 << 17)  # 1 MiB each: 200 MiB if nothing were freed
    gc.collect()
    assert rss_bytes() // 1024 - rss < 50 * 1024


def test_returning_an_argument_aliases_it(session: Session) -> None:
    module = session.compile("""
    func.func @first_row(%a: memref<3x4xf32>) -> memref<4xf32, strided<[1]>> {
      %s = memref.subview %a[0, 0] [1, 4] [1, 1]
          : memref<3x4xf32> to memref<4xf32, strided<[1]>>
      return %s : memref<4xf32, strided<[1]>>
    }""")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    row = module.first_row(data)
    row[0] = 100
    assert data[0, 0] == 100  # the same memory, not freed twice
    del data
    gc.collect()
    assert row[0] == 100


def test_unranked_memref_argument_and_result(session: Session) -> None:
    module = session.compile("""
    func.func @echo(%a: memref<*xf32>) -> memref<*xf32> {
      return %a : memref<*xf32>
    }""")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(module.echo(data), data)


def test_memref_annotation_in_stub(session: Session) -> None:
    @mlir_kernel(source="func.func @f(%a: memref<2x2xf32>) { return }", session=session)
    def f(a: MemRef[f32, 2, 2]) -> None: ...

    assert f(np.zeros((2, 2), np.float32)) is None


def test_tensor_arguments_are_values(session: Session) -> None:
    module = session.compile("""
    func.func @set_first(%t: tensor<?xf64>, %v: f64) -> tensor<?xf64> {
      %c0 = arith.constant 0 : index
      %r = tensor.insert %v into %t[%c0] : tensor<?xf64>
      return %r : tensor<?xf64>
    }
    func.func @same(%t: tensor<?xf64>) -> tensor<?xf64> {
      return %t : tensor<?xf64>
    }""")
    data = np.arange(4.0)
    assert module.set_first(data, 9.0).tolist() == [9.0, 1.0, 2.0, 3.0]
    assert data.tolist() == [0.0, 1.0, 2.0, 3.0]
    echoed = module.same(data)
    echoed[0] = 5.0
    assert data[0] == 0.0
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    assert module.same(read_only).tolist() == [0.0, 1.0, 2.0]


def test_stub_may_annotate_arrays_with_ndarray(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @echo(%a: memref<?xf64>) -> memref<?xf64> {
      return %a : memref<?xf64>
    }""", session=session)
    def echo(a: np.ndarray) -> np.ndarray: ...

    assert echo(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]


TWICE = """
func.func @twice(%x: f64) -> f64 {
  %r = arith.addf %x, %x : f64
  return %r : f64
}
"""


def test_cache_true_keeps_the_machine_code_on_disk(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import pymlirjit.session

    monkeypatch.setenv("PYMLIRJIT_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.setattr(pymlirjit.session, "_default_disk", None)
    for expected_hits in (0, 1):  # a new session, as a new process would have
        session = Session()

        @mlir_kernel(source=TWICE, session=session, cache=True)
        def twice(x: float) -> float: ...

        assert twice(2.5) == 5.0
        assert pymlirjit.session._default_disk is not None
        assert pymlirjit.session._default_disk.hits == expected_hits
    assert len(list((tmp_path / "default").glob("*.entry"))) == 1

    own = Session(cache_dir=tmp_path / "own")

    @mlir_kernel(source=TWICE, name="twice", session=own, cache=True)
    def twice_here(x: float) -> float: ...

    assert twice_here(1.0) == 2.0
    assert own.disk_cache is not None and own.disk_cache.stores == 1

    @mlir_kernel(source=TWICE, name="twice", session=Session(cache_dir=tmp_path / "off"),
                 cache=False)
    def twice_uncached(x: float) -> float: ...

    assert twice_uncached(1.0) == 2.0
    assert not (tmp_path / "off").exists()
