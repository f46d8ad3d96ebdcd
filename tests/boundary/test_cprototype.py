"""ctypes prototypes of C-ABI entries (pymlirjit.boundary.cprototype) and the !llvm.ptr type."""

from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

from pymlirjit import Session, SignatureError, callback, f64, i32, mlir_kernel, ptr
from pymlirjit.boundary.cprototype import function_pointer, pointer_annotations, prototype
from pymlirjit.boundary.signature import as_signature
from pymlirjit.boundary.types import parse_type, to_type

DOUBLE_P = ctypes.POINTER(ctypes.c_double)


def test_ptr_is_the_type_of_llvm_ptr_and_of_ctypes_pointers() -> None:
    assert parse_type("!llvm.ptr") is ptr
    assert to_type(DOUBLE_P) is ptr
    assert to_type(ctypes.c_void_p) is ptr
    assert ptr.ctype is ctypes.c_void_p


def test_ptr_is_no_array_element_type() -> None:
    with pytest.raises(TypeError, match="element type"):
        parse_type("memref<?x!llvm.ptr>")


def test_prototype_of_scalars() -> None:
    proto = prototype(as_signature("(f64, i32) -> f64"))
    assert proto._restype_ is ctypes.c_double
    assert proto._argtypes_ == (ctypes.c_double, ctypes.c_int32)


def test_prototype_types_pointers_by_position() -> None:
    signature = as_signature("(i32, !llvm.ptr, !llvm.ptr) -> f64")
    assert prototype(signature)._argtypes_ == (ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
    typed = prototype(signature, {1: DOUBLE_P})
    assert typed._argtypes_ == (ctypes.c_int32, DOUBLE_P, ctypes.c_void_p)


def test_prototype_maps_positions_through_expanded_parameters() -> None:
    # complex<f64> crosses as two doubles: the pointer after it is the third C argument
    typed = prototype(as_signature("(complex<f64>, !llvm.ptr) -> ()"), {1: DOUBLE_P})
    assert typed._argtypes_ == (ctypes.c_double, ctypes.c_double, DOUBLE_P)
    assert typed._restype_ is None


def test_prototype_passes_several_results_through_a_leading_pointer() -> None:
    proto = prototype(as_signature("(f64) -> (f64, i32)"))
    assert proto._argtypes_ == (ctypes.c_void_p, ctypes.c_double)
    assert proto._restype_ is None


def test_pointer_annotation_on_a_non_pointer_parameter_is_refused() -> None:
    signature = as_signature("(f64, !llvm.ptr) -> f64")
    with pytest.raises(SignatureError, match=r"argument 1 \('x'\).*f64"):
        pointer_annotations(signature, {"x": DOUBLE_P}, ["x", "p"], "@k")
    assert pointer_annotations(signature, {"x": f64, "p": DOUBLE_P}, ["x", "p"], "@k") == {
        1: DOUBLE_P}


def test_function_pointer_refuses_address_zero() -> None:
    with pytest.raises(ValueError, match="address 0"):
        function_pointer(0, as_signature("(f64) -> f64"), None)


def test_function_pointer_keeps_its_owner_alive() -> None:
    class Owner:
        pass

    owner = Owner()
    alive = weakref.ref(owner)
    libm = ctypes.CDLL("libm.so.6")
    address = ctypes.cast(libm.cos, ctypes.c_void_p).value
    assert address is not None
    pointer = function_pointer(address, as_signature("(f64) -> f64"), owner)
    del owner
    gc.collect()
    assert alive() is not None
    assert pointer(0.0) == 1.0
    del pointer
    gc.collect()
    assert alive() is None


def test_kernel_ctypes_uses_the_stubs_pointer_annotations(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @first(%n: i32, %xx: !llvm.ptr) -> f64 {
      %x = llvm.load %xx : !llvm.ptr -> f64
      return %x : f64
    }""", session=session)
    def first(n: i32, xx: DOUBLE_P) -> f64: ...  # type: ignore[valid-type]

    function = first.ctypes
    assert function.argtypes == (ctypes.c_int32, DOUBLE_P)
    values = np.array([2.5, 1.0])
    assert function(2, values.ctypes.data_as(DOUBLE_P)) == 2.5
    assert first(2, values.ctypes.data) == 2.5  # from Python: an int address
    assert first.ctypes is function  # made once per compiled function


def test_kernel_ctypes_refuses_a_pointer_annotation_on_a_scalar(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @half(%x: f64) -> f64 {
      %c = arith.constant 0.5 : f64
      %r = arith.mulf %x, %c : f64
      return %r : f64
    }""", session=session)
    def half(x: ctypes.c_void_p) -> f64: ...

    # the stub's annotation is checked as it compiles, as any annotation
    with pytest.raises(SignatureError,
                       match=r"'half': argument 1 \('x'\): the stub says !llvm.ptr, MLIR has f64"):
        half.ctypes  # noqa: B018


def test_pointers_cross_to_callbacks_and_back_as_ints(session: Session) -> None:
    @callback(session=session)
    def peek(p: DOUBLE_P) -> f64:  # type: ignore[valid-type]
        return float(ctypes.c_double.from_address(p).value)

    module = session.compile("""
    func.func private @peek(!llvm.ptr) -> f64
    func.func @via(%p: !llvm.ptr) -> f64 {
      %r = call @peek(%p) : (!llvm.ptr) -> f64
      return %r : f64
    }
    func.func @same(%p: !llvm.ptr) -> !llvm.ptr {
      return %p : !llvm.ptr
    }""")
    values = np.array([4.25])
    assert module.via(values.ctypes.data) == 4.25
    assert module.same(values.ctypes.data) == values.ctypes.data
    assert module.same(0) == 0
    with pytest.raises(TypeError, match=r"expected an int for !llvm\.ptr"):
        module.same(1.5)
