"""pymlirjit.runtime.prepare: compile options as values, and the MLIR a session prepares."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MLIRError, Session, SignatureError, callback, f64
from pymlirjit.callbacks import Callback, CallbackRegistry
from pymlirjit.lowering.pipeline import DEFAULT_PIPELINE, normalize_pipeline
from pymlirjit.runtime.prepare import CompileOptions, lower, prepare

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


# -- what real files contain: LLVM-dialect functions, externs of any type ---------------------

LLVM_SOURCE = """
llvm.func @twice(%x: i64) -> i64 {
  %r = llvm.add %x, %x : i64
  llvm.return %r : i64
}
llvm.func @takes_pointer(%p: !llvm.ptr) {
  llvm.return
}
llvm.func internal @hidden() {
  llvm.return
}
"""


def test_public_llvm_funcs_of_scalars_are_entries(session: Session) -> None:
    prepared = prepare(LLVM_SOURCE, CompileOptions.make(), lambda name: None)
    assert list(prepared.signatures) == ["twice"]
    assert "!llvm.func<void (ptr)>" in prepared.uncallable["takes_pointer"]
    module = session.compile(LLVM_SOURCE)
    assert module.twice(21) == 42
    with pytest.raises(SignatureError, match=r"@takes_pointer .*\(ptr\)"):
        module.takes_pointer(0)


def test_externs_of_any_type_pass_through_unless_a_callback_binds_them(
        session: Session) -> None:
    source = """
    func.func private @printMemrefVector4x4xf32(memref<?x?xvector<4x4xf32>>)
    func.func private @printMemrefF32(tensor<*xf32>)
    func.func private @puts(!llvm.ptr) -> i32
    func.func @vectors(%a: memref<?x?xvector<4x4xf32>>) { return }
    func.func @seven() -> i32 {
      %c = arith.constant 7 : i32
      return %c : i32
    }
    """
    prepared = prepare(source, CompileOptions.make(), lambda name: None)
    assert prepared.declared == ("printMemrefVector4x4xf32", "printMemrefF32", "puts")
    assert list(prepared.signatures) == ["seven"]
    module = session.compile(source)  # unused externs need no definition, as in mlir-runner
    assert module.seven() == 7
    with pytest.raises(SignatureError, match=r"vector<4x4xf32>"):
        module.vectors(None)
    with pytest.raises(SignatureError, match=r"vector<4x4xf32>"):
        module["vectors"]


def test_a_callback_bound_extern_still_needs_boundary_types() -> None:
    source = "func.func private @hook(tensor<*xf32>)\nfunc.func @f() { return }"
    with pytest.raises(SignatureError):
        prepare(source, CompileOptions.make(), resolve_hook)


def test_bare_pointer_memref_convention_passes_through(session: Session) -> None:
    source = """
    func.func @first(%a: memref<4xf32>) -> f32 {
      %c0 = arith.constant 0 : index
      %v = memref.load %a[%c0] : memref<4xf32>
      return %v : f32
    }
    func.func @scalar(%x: i64) -> i64 { return %x : i64 }
    """
    module = session.compile(source, pipeline=(
        "finalize-memref-to-llvm,convert-arith-to-llvm,"
        "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},reconcile-unrealized-casts"))
    assert module.scalar(5) == 5
    with pytest.raises(SignatureError, match="bare-pointer"):
        module.first(np.zeros(4, np.float32))


def test_functions_already_carrying_emit_c_interface(session: Session) -> None:
    source = """
    func.func @f(%x: f64) -> f64 attributes {llvm.emit_c_interface} {
      %y = arith.addf %x, %x : f64
      return %y : f64
    }"""
    assert session.compile(source).f(1.5) == 3.0


def test_global_constructors_run_before_the_entry(session: Session) -> None:
    source = """
    llvm.mlir.global_ctors ctors = [@ctor], priorities = [0 : i32], data = [#llvm.zero]
    llvm.mlir.global @counter(0 : i64) : i64
    llvm.func @ctor() {
      %p = llvm.mlir.addressof @counter : !llvm.ptr
      %c = llvm.mlir.constant(41 : i64) : i64
      llvm.store %c, %p : i64, !llvm.ptr
      llvm.return
    }
    llvm.func @read() -> i64 {
      %p = llvm.mlir.addressof @counter : !llvm.ptr
      %v = llvm.load %p : !llvm.ptr -> i64
      llvm.return %v : i64
    }"""
    assert session.compile(source).read() == 41


_NAMED_LIKE_LIBM = """
func.func @exp(%a: memref<?xf64>, %b: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = math.exp %x : f64
    memref.store %y, %b[%i] : memref<?xf64>
  }
  return
}
func.func @malloc(%n: index) -> f64 {
  %m = memref.alloc(%n) : memref<?xf64>
  %c0 = arith.constant 0 : index
  %x = arith.constant 2.5 : f64
  memref.store %x, %m[%c0] : memref<?xf64>
  %v = memref.load %m[%c0] : memref<?xf64>
  memref.dealloc %m : memref<?xf64>
  return %v : f64
}
func.func @tanh(%x: f16) -> f16 {
  %y = math.tanh %x : f16
  return %y : f16
}
func.func @calls_exp(%a: memref<?xf64>, %b: memref<?xf64>) {
  call @exp(%a, %b) : (memref<?xf64>, memref<?xf64>) -> ()
  return
}
"""


def test_functions_named_like_c_functions_do_not_capture_the_lowerings_calls(
        tmp_path: Path) -> None:
    # math.exp lowers to a call of libm's @exp, memref.alloc to @malloc: a module defining
    # functions of those names must not have its own functions called instead (that
    # gave silently wrong values, or a crash through unbounded recursion).
    values = np.linspace(-1.0, 1.0, 1001)
    for session in (Session(), Session(cache_dir=tmp_path), Session(cache_dir=tmp_path)):
        module = session.compile(_NAMED_LIKE_LIBM)
        out = np.zeros_like(values)
        module.exp(values, out)
        np.testing.assert_allclose(out, np.exp(values), rtol=1e-15)
        out[:] = 0
        module.calls_exp(values, out)
        np.testing.assert_allclose(out, np.exp(values), rtol=1e-15)
        assert module.malloc(3) == 2.5
        assert module.tanh(0.5) == pytest.approx(np.tanh(0.5), rel=1e-3)
        assert "@exp(" in module.source  # the source as given is untouched


def test_unused_declarations_are_found_without_reading_constants_from_python() -> None:
    """A dense complex constant cannot be read back through the Python bindings (they
    throw through C++ and the process aborts): finding unused declarations must not
    touch it. Run in a subprocess, since the failure is an abort."""
    code = textwrap.dedent('''
        from pymlirjit import Session
        module = Session().compile("""
        func.func @modulus() -> f64 {
          %z = arith.constant dense<[(3.0, 4.0), (1.0, 1.0)]> : tensor<2xcomplex<f64>>
          %c0 = arith.constant 0 : index
          %e = tensor.extract %z[%c0] : tensor<2xcomplex<f64>>
          %m = complex.abs %e : complex<f64>
          return %m : f64
        }
        func.func private @declared_but_never_called(f64)
        """)
        print(module.modulus())
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout == "5.0\n"


def test_a_compile_loads_the_dialects_it_needs_only() -> None:
    prepared = prepare("func.func @f(%x: f64) -> f64 { return %x : f64 }",
                       CompileOptions.make(), lambda name: None)
    assert not prepared.context.is_registered_operation("linalg.matmul")
    assert all(prepared.context.is_registered_operation(f"{dialect}.{op}") for dialect, op in
               (("arith", "constant"), ("scf", "if"), ("llvm", "call"), ("ub", "poison")))
    prepared = prepare("""
    func.func @g(%a: memref<2x2xf32>, %b: memref<2x2xf32>, %c: memref<2x2xf32>) {
      linalg.matmul ins(%a, %b : memref<2x2xf32>, memref<2x2xf32>)
                    outs(%c : memref<2x2xf32>)
      return
    }""", CompileOptions.make(), lambda name: None)
    assert prepared.context.is_registered_operation("linalg.matmul")
    naive = CompileOptions.make(opt_level=1)  # the default gives it the microkernel
    assert "llvm.fmul" in str(lower(prepared, naive).module)


def test_the_failure_callback_has_the_signature_checked_code_declares() -> None:
    from pymlirjit.boundary.failures import FAIL_SIGNATURE, FAIL_SYMBOL
    from pymlirjit.boundary.signature import as_signature
    from pymlirjit.runtime.prepare import builtin_callbacks

    assert builtin_callbacks()[FAIL_SYMBOL].signature == as_signature(FAIL_SIGNATURE)


def test_fp8_arithmetic_links_mlir_c_runner_utils_by_itself() -> None:
    # Lowered, arith.negf on f8E4M3FN calls MLIR's APFloat wrappers (_mlir_apfloat_*),
    # which libmlir_c_runner_utils.so defines: linked as the async runtime is.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    module = Session().compile("""
    func.func @neg(%a: memref<?xf8E4M3FN>) {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0] : memref<?xf8E4M3FN>
      %y = arith.negf %x : f8E4M3FN
      memref.store %y, %a[%c0] : memref<?xf8E4M3FN>
      return
    }""")
    a = np.array([1.5, 2.0], ml_dtypes.float8_e4m3fn)
    module.neg(a)
    assert a.astype(np.float32).tolist() == [-1.5, 2.0]
