"""The bad-input catalog: each mistake gets a clear exception, and nothing breaks after."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from pymlirjit import (
    LinkError,
    MemRef,
    MLIRError,
    Session,
    SignatureError,
    callback,
    f32,
    f64,
    i8,
    i16,
    i32,
)

KERNELS = """
func.func @scalars(%a: i8, %b: i16, %c: i32, %d: f64) -> f64 {
  return %d : f64
}
func.func @array(%m: memref<2x?xf32>) {
  return
}
"""


ADD_F64 = """
func.func @add(%a: f64, %b: f64) -> f64 {
  %r = arith.addf %a, %b : f64
  return %r : f64
}
"""


def compile_kernels(session: Session) -> object:
    return session.compile(KERNELS)


def define_callback(session: Session, function: Callable[..., object], name: str) -> None:
    callback(name=name, session=session)(function)


CASES: list[tuple[str, Callable[[Session], object], type[BaseException], str]] = [
    ("malformed MLIR", lambda s: s.compile("func.func @f( {"), MLIRError, r"1:\d+"),
    ("verifier error", lambda s: s.compile("func.func @f() -> i32 { return }"), MLIRError,
     "returns 1"),
    ("unregistered op", lambda s: s.compile('func.func @f() { "x.y"() : () -> () \n return }'),
     MLIRError, "unregistered dialect"),
    ("bad pipeline", lambda s: s.compile(KERNELS, pipeline="nonsense("), MLIRError, "pipeline"),
    ("bad pass option value",
     lambda s: s.compile(KERNELS, pipeline="canonicalize{max-iterations=x},convert-to-llvm"),
     MLIRError, "'x' value invalid for long argument"),
    ("op the pipeline cannot lower",
     lambda s: s.compile(ADD_F64, pipeline="convert-func-to-llvm"), MLIRError,
     "not lowered"),
    ("missing kernel name", lambda s: compile_kernels(s).nothing, AttributeError,  # type: ignore[attr-defined]
     "no public function @nothing"),
    ("wrong arity", lambda s: compile_kernels(s).scalars(1, 2), TypeError,  # type: ignore[attr-defined]
     "missing argument 3, argument 4"),
    ("keyword arguments", lambda s: compile_kernels(s).scalars(a=1), TypeError,  # type: ignore[attr-defined]
     "keyword"),
    ("wrong dtype", lambda s: compile_kernels(s).array(np.zeros((2, 3))), TypeError,  # type: ignore[attr-defined]
     "float32 array"),
    ("wrong rank", lambda s: compile_kernels(s).array(np.zeros(3, np.float32)), ValueError,  # type: ignore[attr-defined]
     "rank-2"),
    ("static dim mismatch", lambda s: compile_kernels(s).array(np.zeros((3, 3), np.float32)),  # type: ignore[attr-defined]
     ValueError, "dim 0 must be 2"),
    ("not an array", lambda s: compile_kernels(s).array([[1.0]]), TypeError, "numpy array"),  # type: ignore[attr-defined]
    ("masked array",
     lambda s: compile_kernels(s).array(np.ma.masked_array(np.zeros((2, 3), np.float32))),  # type: ignore[attr-defined]
     TypeError, "masked array"),
    ("i8 out of range", lambda s: compile_kernels(s).scalars(1000, 0, 0, 0.0), ValueError,  # type: ignore[attr-defined]
     "out of range for i8"),
    ("i16 out of range", lambda s: compile_kernels(s).scalars(0, 1 << 20, 0, 0.0), ValueError,  # type: ignore[attr-defined]
     "out of range for i16"),
    ("i32 out of range", lambda s: compile_kernels(s).scalars(0, 0, 1 << 40, 0.0), ValueError,  # type: ignore[attr-defined]
     "out of range for i32"),
    ("non-finite for an int", lambda s: compile_kernels(s).scalars(float("nan"), 0, 0, 0.0),  # type: ignore[attr-defined]
     TypeError, "expected an int"),
]


@pytest.mark.parametrize(("case", "action", "error", "message"), CASES,
                         ids=[c[0] for c in CASES])
def test_catalog(session: Session, case: str, action: Callable[[Session], object],
                 error: type[BaseException], message: str) -> None:
    with pytest.raises(error, match=message):
        action(session)
    module = compile_kernels(session)
    assert module.scalars(1, 2, 3, 4.5) == 4.5  # type: ignore[attr-defined]


CALLER = """
func.func @run(%x: f32) -> f32 {
  %r = call @cb(%x) : (f32) -> f32
  return %r : f32
}
func.func private @cb(f32) -> f32
"""


@pytest.mark.parametrize(("returns", "error", "message"), [
    ("a string", TypeError, "expected a float"),
    (np.zeros(2), TypeError, "expected a float"),
    (1e300, ValueError, r"callback 'cb': result #0: 1e\+300 is out of range for f32"),
])
def test_callback_returning_the_wrong_type(session: Session, returns: object,
                                          error: type[BaseException], message: str) -> None:
    def cb(x: f32) -> f32:
        return returns  # type: ignore[return-value]

    define_callback(session, cb, "cb")
    with pytest.raises(error, match=message):
        session.compile(CALLER).run(1.0)


def test_specialize_of_something_not_a_type(session: Session) -> None:
    from pymlirjit import mlir_kernel

    @mlir_kernel(source="func.func @same(%x: !T) -> !T { return %x : !T }", session=session)
    def same(x: object) -> object: ...

    with pytest.raises(TypeError, match=r"@mlir_kernel 'same': specialize\(T='notatype'\): "
                                        r"not an MLIR type"):
        same.specialize(T="notatype")
    assert same(1.5) == 1.5


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_callback_raising_base_exceptions(session: Session, raised: type[BaseException]) -> None:
    def cb(x: f32) -> f32:
        raise raised

    define_callback(session, cb, "cb")
    with pytest.raises(raised):
        session.compile(CALLER).run(1.0)


def test_callback_array_of_wrong_dtype(session: Session) -> None:
    @callback(session=session)
    def make() -> MemRef[f32, 2]:
        return np.zeros(2, np.float64)

    with pytest.raises(TypeError, match="dtype float32"):
        session.compile("""
        func.func @run() {
          %m = call @make() : () -> memref<2xf32>
          return
        }
        func.func private @make() -> memref<2xf32>
        """).run()


def test_callback_annotations_disagree_with_mlir(session: Session) -> None:
    @callback(name="cb", session=session)
    def cb(x: f64) -> f64:
        return x

    with pytest.raises(SignatureError, match=r"\(f64\) -> f64.*\n.*\(f32\) -> f32"):
        session.compile(CALLER)


def test_callback_with_a_missing_annotation() -> None:
    with pytest.raises(SignatureError, match="'x' has no type annotation"):
        @callback
        def cb(x) -> f32:  # type: ignore[no-untyped-def]
            return x


def test_missing_callback(session: Session) -> None:
    with pytest.raises(LinkError, match="@cb"):
        session.compile(CALLER)


def test_kernel_after_the_session_cleared_its_cache(session: Session) -> None:
    from pymlirjit import mlir_kernel

    @mlir_kernel(source=KERNELS, name="scalars", session=session)
    def scalars(a: i8, b: i16, c: i32, d: f64) -> f64: ...

    assert scalars(1, 2, 3, 1.5) == 1.5
    session.clear_cache()
    assert scalars(1, 2, 3, 2.5) == 2.5  # compiles again, transparently


@pytest.mark.parametrize("name", ["__pymlirjit_entry_f", "__pymlirjit_callback_g",
                                  "__pymlirjit_anything"])
def test_reserved_symbol_names_are_refused(session: Session, name: str) -> None:
    """A user function named like pymlirjit's shims would be called with their ABI."""
    source = (f"func.func @f(%x: f16) -> f16 {{ return %x : f16 }}\n"
              f"func.func @{name}(%x: i16) -> i16 {{ return %x : i16 }}\n")
    with pytest.raises(MLIRError, match=f"@{name}: symbols starting with '__pymlirjit_' "
                                        f"are reserved") as caught:
        session.compile(source)
    assert caught.value.diagnostics[0].location == 'loc("<source>":2:1)'
    with pytest.raises(MLIRError, match="reserved"):
        session.compile(f"func.func private @{name}(f32) -> f32\n")
    assert session.compile(ADD_F64).add(1.0, 2.0) == 3.0  # type: ignore[attr-defined]
