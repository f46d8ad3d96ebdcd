"""The types that cross the Python/MLIR boundary.

Each type knows its MLIR spelling, its numpy dtype and its C representation. One
function, :func:`to_type`, turns every accepted spelling (a pymlirjit type, ``float``,
a numpy scalar type or dtype, an MLIR type string, ``Annotated[...]``) into a type;
:func:`from_mlir` does the same for a type from the MLIR Python bindings.

>>> from pymlirjit import MemRef, f32
>>> MemRef[f32, None, 4].mlir
'memref<?x4xf32>'
>>> to_type(float).mlir
'f64'
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import math
import typing
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

import numpy as np

from .sparseformat import SparseTensorType, sparse_format
from .typeparser import parsed_type

__all__ = [
    "MemRef",
    "MemRefType",
    "ScalarType",
    "SparseTensorType",
    "Tensor",
    "TensorType",
    "Type",
    "UnrankedMemRef",
    "UnrankedMemRefType",
    "bf16",
    "complex64",
    "complex128",
    "f16",
    "f32",
    "f64",
    "f8E4M3FN",
    "f8E5M2",
    "from_mlir",
    "i1",
    "i8",
    "i16",
    "i32",
    "i64",
    "index",
    "parse_type",
    "ptr",
    "to_type",
]


class _Complex64(ctypes.Structure):
    _fields_ = [("real", ctypes.c_float), ("imag", ctypes.c_float)]


class _Complex128(ctypes.Structure):
    _fields_ = [("real", ctypes.c_double), ("imag", ctypes.c_double)]


@dataclass(frozen=True)
class ScalarType:
    """A scalar MLIR type: an integer, ``index``, a float or a complex number.

    ``kind`` is one of ``"bool"``, ``"int"``, ``"float"``, ``"complex"``; ``ctype`` is its
    representation in memory (in a struct or a buffer); ``crossing`` how a value of it
    crosses the C ABI by value (see :attr:`boundary`); ``dtype_module`` the module whose
    attribute ``dtype_name`` is its numpy dtype, where numpy has none of its own.
    """

    mlir: str
    kind: str
    bits: int
    dtype_name: str
    ctype: Any
    crossing: str = "value"
    dtype_module: str | None = None

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of this type (bf16 and the f8 types need ``ml_dtypes``)."""
        if self.dtype_module is None:
            return np.dtype(self.dtype_name)
        return _foreign_dtype(self.dtype_module, self.dtype_name, self.mlir)

    @property
    def boundary(self) -> tuple[ScalarType, ...]:
        """The plain scalar types a value of this type crosses the C ABI as: itself
        (``crossing="value"``), i8 for i1 (``"widened"``: an LLVM i1 result has undefined
        upper bits), a signless integer of the same width for the floats ctypes cannot
        express (``"bits"``: f16, bf16, the f8 types), and (re, im) for complex numbers
        (``"pair"``)."""
        if self.crossing == "value":
            return (self,)
        if self.crossing == "pair":
            part = f32 if self.bits == 64 else f64
            return (part, part)
        return (_INTEGERS[max(self.bits, 8)],)

    def __repr__(self) -> str:
        return self.mlir

    def __call__(self, value: Any) -> Any:
        """Convert ``value`` to this type's Python scalar, checking its range."""
        return to_python_scalar(self, value, "value")


@functools.cache
def _foreign_dtype(module: str, name: str, mlir: str) -> np.dtype[Any]:
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise TypeError(f"{mlir} arrays need the {module} package: "
                        f"pip install 'pymlirjit[bf16]'") from exc
    dtype: np.dtype[Any] = np.dtype(getattr(found, name))
    return dtype


def _scalar(mlir: str, kind: str, bits: int, dtype_name: str, ctype: Any,
            crossing: str = "value", dtype_module: str | None = None) -> ScalarType:
    return ScalarType(mlir, kind, bits, dtype_name, ctype, crossing, dtype_module)


# One row per scalar type: everything else (conversions, the C ABI, shims, native code,
# the disk cache) is derived from these fields.
i1 = _scalar("i1", "bool", 1, "bool", ctypes.c_bool, "widened")
i8 = _scalar("i8", "int", 8, "int8", ctypes.c_int8)
i16 = _scalar("i16", "int", 16, "int16", ctypes.c_int16)
i32 = _scalar("i32", "int", 32, "int32", ctypes.c_int32)
i64 = _scalar("i64", "int", 64, "int64", ctypes.c_int64)
index = _scalar("index", "int", 64, "int64", ctypes.c_int64)
f16 = _scalar("f16", "float", 16, "float16", ctypes.c_uint16, "bits")
bf16 = _scalar("bf16", "float", 16, "bfloat16", ctypes.c_uint16, "bits", "ml_dtypes")
f8E4M3FN = _scalar("f8E4M3FN", "float", 8, "float8_e4m3fn", ctypes.c_uint8, "bits",
                   "ml_dtypes")
f8E5M2 = _scalar("f8E5M2", "float", 8, "float8_e5m2", ctypes.c_uint8, "bits", "ml_dtypes")
f32 = _scalar("f32", "float", 32, "float32", ctypes.c_float)
f64 = _scalar("f64", "float", 64, "float64", ctypes.c_double)
complex64 = _scalar("complex<f32>", "complex", 64, "complex64", _Complex64, "pair")
complex128 = _scalar("complex<f64>", "complex", 128, "complex128", _Complex128, "pair")
#: An opaque pointer (``!llvm.ptr``): an address, an int in Python (not an array element
#: type, and no numpy dtype maps to it), ``void *`` in C.
ptr = _scalar("!llvm.ptr", "int", 64, "uintp", ctypes.c_void_p)

_INTEGERS = {8: i8, 16: i16, 32: i32, 64: i64}

SCALARS: tuple[ScalarType, ...] = (
    i1, i8, i16, i32, i64, index, f16, bf16, f8E4M3FN, f8E5M2, f32, f64, complex64, complex128,
)
_BY_MLIR = {t.mlir: t for t in (*SCALARS, ptr)}
_BY_DTYPE = {t.dtype_name: t for t in SCALARS if t is not index}
_PYTHON_TYPES: dict[Any, ScalarType] = {float: f64, int: i64, bool: i1, complex: complex128}
_C_POINTERS = (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p)


def _dims(shape: tuple[int | None, ...]) -> str:
    """``2x?x`` for shape (2, None): the dims part of a memref or tensor type."""
    return "".join(("?" if d is None else str(d)) + "x" for d in shape)


@dataclass(frozen=True)
class MemRefType:
    """A ranked memref: element type, shape (``None`` for a dynamic dim) and layout.

    ``strides`` and ``offset`` describe a strided layout in elements (``None`` where
    dynamic); ``strides is None`` means the identity (row-major contiguous) layout.
    In an annotation, ``MemRef[f32, 2, None]`` leaves the layout to the MLIR declaration.
    """

    element: ScalarType
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...] | None = None
    offset: int | None = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def mlir(self) -> str:
        dims = _dims(self.shape)
        layout = ""
        if self.strides is not None:
            strides = ", ".join("?" if s is None else str(s) for s in self.strides)
            offset = "?" if self.offset is None else str(self.offset)
            layout = f", strided<[{strides}], offset: {offset}>"
        return f"memref<{dims}{self.element.mlir}{layout}>"

    def __repr__(self) -> str:
        return self.mlir

    def same_as_annotation(self, annotation: MemRefType) -> bool:
        """Whether this (MLIR) type fits ``annotation``, which may leave the layout open."""
        if annotation.element != self.element or annotation.shape != self.shape:
            return False
        return annotation.strides is None or annotation == self


@dataclass(frozen=True)
class UnrankedMemRefType:
    """An unranked memref ``memref<*xT>``: the rank is known only at run time."""

    element: ScalarType

    @property
    def mlir(self) -> str:
        return f"memref<*x{self.element.mlir}>"

    def __repr__(self) -> str:
        return self.mlir


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor; at a kernel's boundary it is passed as a contiguous buffer."""

    element: ScalarType
    shape: tuple[int | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def mlir(self) -> str:
        return f"tensor<{_dims(self.shape)}{self.element.mlir}>"

    def __repr__(self) -> str:
        return self.mlir


Type = ScalarType | MemRefType | UnrankedMemRefType | TensorType | SparseTensorType


def _shape_from_params(params: tuple[Any, ...], what: str) -> tuple[int | None, ...]:
    shape: list[int | None] = []
    for dim in params:
        if get_origin(dim) is typing.Literal and len(get_args(dim)) == 1:
            dim = get_args(dim)[0]  # Literal[4]: a static dim a type checker accepts
        if dim is None or dim is Ellipsis:
            shape.append(None)
        elif isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
            shape.append(dim)
        else:
            raise TypeError(f"{what} dims must be non-negative ints or None, got {dim!r}")
    return tuple(shape)


class MemRef:
    """``MemRef[dtype, *shape]`` spells a ranked memref type in an annotation.

    >>> MemRef[f32, 2, 2]
    memref<2x2xf32>
    >>> MemRef[np.float64, None]
    memref<?xf64>
    """

    def __class_getitem__(cls, params: Any) -> MemRefType:
        if not isinstance(params, tuple):
            params = (params,)
        element = _element_type(params[0], "MemRef")
        return MemRefType(element, _shape_from_params(params[1:], "MemRef"))


class UnrankedMemRef:
    """``UnrankedMemRef[dtype]`` spells ``memref<*xdtype>`` in an annotation."""

    def __class_getitem__(cls, params: Any) -> UnrankedMemRefType:
        return UnrankedMemRefType(_element_type(params, "UnrankedMemRef"))


class Tensor:
    """``Tensor[dtype, *shape]`` spells a ranked tensor type in an annotation."""

    def __class_getitem__(cls, params: Any) -> TensorType:
        if not isinstance(params, tuple):
            params = (params,)
        element = _element_type(params[0], "Tensor")
        return TensorType(element, _shape_from_params(params[1:], "Tensor"))


def _element_type(spelling: Any, what: str) -> ScalarType:
    element = to_type(spelling)
    if not isinstance(element, ScalarType):
        raise TypeError(f"{what} elements must be scalar types, got {element!r}")
    return element


def to_type(spelling: Any) -> Type:
    """Normalize any accepted spelling of a type into a pymlirjit type.

    Accepts pymlirjit types, ``float``/``int``/``bool``/``complex``, numpy scalar types
    and dtypes, MLIR type strings (``"memref<?xf32>"``) and ``Annotated[T, ...]`` (the
    first metadata item that is a type wins, else ``T``).

    >>> to_type(np.float32) is f32
    True
    >>> to_type("memref<*xi8>")
    memref<*xi8>
    """
    if isinstance(spelling, (ScalarType, MemRefType, UnrankedMemRefType, TensorType,
                             SparseTensorType)):
        return spelling
    if get_origin(spelling) is Annotated:
        base, *metadata = get_args(spelling)
        for item in metadata:
            try:
                return to_type(item)
            except TypeError:
                continue
        return to_type(base)
    if isinstance(spelling, str):
        return parse_type(spelling)
    if isinstance(spelling, type) and issubclass(spelling, _C_POINTERS):
        return ptr  # ctypes.POINTER(c_double), c_void_p, ...: an address
    if isinstance(spelling, typing.Hashable) and spelling in _PYTHON_TYPES:
        return _PYTHON_TYPES[spelling]
    if isinstance(spelling, np.dtype) or (
        isinstance(spelling, type) and issubclass(spelling, np.generic)
    ):
        dtype = np.dtype(spelling)
        found = _BY_DTYPE.get(dtype.name)
        if found is None:
            raise TypeError(f"numpy dtype {dtype} has no MLIR counterpart in pymlirjit")
        return found
    raise TypeError(f"{spelling!r} is not a type pymlirjit knows")


def parse_type(text: str) -> Type:
    """Parse an MLIR type string (with MLIR's own parser) into a pymlirjit type."""
    with parsed_type(text, lambda reason: TypeError(
            f"{text!r} is not an MLIR type: {reason}")) as parsed:
        return from_mlir(parsed)


def from_mlir(mlir_type: Any) -> Type:
    """Convert a type object from the MLIR Python bindings into a pymlirjit type."""
    from mlir import ir

    text = str(mlir_type)
    if text in _BY_MLIR:
        return _BY_MLIR[text]
    dynamic = ir.ShapedType.get_dynamic_size()
    if isinstance(mlir_type, ir.MemRefType):
        element = _element_from_mlir(mlir_type.element_type, text)
        shape = tuple(None if d == dynamic else d for d in mlir_type.shape)
        if mlir_type.memory_space is not None:
            raise TypeError(f"{text}: memory spaces are not supported at the Python boundary")
        layout = mlir_type.layout
        if isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(
            len(shape)
        ):
            return MemRefType(element, shape)
        if not isinstance(layout, ir.StridedLayoutAttr):
            raise TypeError(f"{text}: only identity and strided layouts are supported")
        dynamic_stride = ir.ShapedType.get_dynamic_stride_or_offset()
        strides = tuple(None if s == dynamic_stride else s for s in layout.strides)
        offset = None if layout.offset == dynamic_stride else layout.offset
        return MemRefType(element, shape, strides, offset)
    if isinstance(mlir_type, ir.UnrankedMemRefType):
        return UnrankedMemRefType(_element_from_mlir(mlir_type.element_type, text))
    if isinstance(mlir_type, ir.RankedTensorType):
        element = _element_from_mlir(mlir_type.element_type, text)
        shape = tuple(None if d == dynamic else d for d in mlir_type.shape)
        if mlir_type.encoding is not None:  # a sparse tensor: a scipy.sparse array
            try:
                return SparseTensorType(element, shape, *sparse_format(str(mlir_type.encoding)),
                                        text)
            except TypeError as exc:
                raise TypeError(f"{text}: {exc}") from None
        return TensorType(element, shape)
    raise TypeError(f"MLIR type {text} cannot cross the Python boundary")


def _element_from_mlir(element: Any, whole: str) -> ScalarType:
    found = _BY_MLIR.get(str(element))
    if found is None or found is ptr:
        raise TypeError(f"{whole}: element type {element} is not supported")
    return found


def to_python_scalar(scalar: ScalarType, value: Any, what: str, exact: bool = False) -> Any:
    """Check ``value`` against ``scalar`` and return it as a plain Python number.

    ``what`` names the value in the error ("argument 1 ('x')", "result #0 of 'cb'").
    Integers accept both the signed and the unsigned range of their width (MLIR integers
    are signless) and come back wrapped to the signed range.

    ``exact=True`` (kernel arguments) converts a number to a float or complex type of
    another width or kind only when the value is exactly representable there, and
    raises ``ValueError`` otherwise; the exception is a Python ``float`` (or
    ``complex``), which has no width of its own and rounds to the nearest value of the
    parameter's type, as a literal does in C, but must not overflow it.
    """
    kind = scalar.kind
    if exact and kind in ("float", "complex") and type(value) is not scalar.dtype.type:
        _check_exact(scalar, value, what)
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)) or (
            isinstance(value, (int, np.integer)) and value in (0, 1)
        ):
            return bool(value)
        raise TypeError(f"{what}: expected a bool for i1, got {_describe(value)}")
    if kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{what}: expected an int for {scalar.mlir}, got {_describe(value)}")
        number = int(value)
        bits = scalar.bits
        if not -(1 << (bits - 1)) <= number < (1 << bits):
            raise ValueError(f"{what}: {number} is out of range for {scalar.mlir}")
        if number >= 1 << (bits - 1):
            number -= 1 << bits
        return number
    numbers: tuple[type, ...] = ((float, int, np.floating, np.integer) if kind == "float"
                                 else (complex, float, int, np.number))
    if ((not isinstance(value, numbers) and type(value) is not scalar.dtype.type)  # ml_dtypes'
            or isinstance(value, (bool, np.bool_))):
        raise TypeError(f"{what}: expected a {kind} for {scalar.mlir}, got {_describe(value)}")
    convert: Any = float if kind == "float" else complex
    try:
        return convert(value)
    except OverflowError:  # an int beyond every float (a callback's result: not exact)
        raise ValueError(f"{what}: {_describe(value)} is out of range for "
                         f"{scalar.mlir}") from None


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def _check_exact(scalar: ScalarType, value: Any, what: str) -> None:
    """Raise ValueError unless ``value`` (of another type than ``scalar``'s numpy type)
    converts to ``scalar`` without changing (see :func:`to_python_scalar`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, complex,
                                                                      np.number)):
        return  # not a number: the type check names it
    rounds = type(value) in (float, complex)  # no width of its own: rounds to the nearest
    if isinstance(value, (complex, np.complexfloating)):
        if scalar.kind != "complex":
            return  # the type check rejects it
        parts: list[Any] = [value.real, value.imag]
        part_type = f32 if scalar.bits == 64 else f64
    else:
        parts = [value]
        part_type = scalar if scalar.kind == "float" else (f32 if scalar.bits == 64 else f64)
    for part in parts:
        converted = _converted(part_type, part)
        if rounds:
            if math.isfinite(part) and not math.isfinite(converted):
                raise ValueError(f"{what}: {value!r} is out of range for {scalar.mlir}")
        elif not _same(converted, part):
            raise ValueError(
                f"{what}: {_describe(value)} is not exactly representable in {scalar.mlir} "
                f"(it would become {converted!r}); pass np.{scalar.dtype.name}(...) to round "
                f"it, or a value of the parameter's type")


def _same(converted: float, number: Any) -> bool:
    if isinstance(number, (int, np.integer)):  # compared as ints: as floats, both round
        return math.isfinite(converted) and int(converted) == int(number)
    return bool(converted == number) or (converted != converted and number != number)


def _converted(t: ScalarType, number: Any) -> float:
    """``number`` rounded to the float type ``t`` (inf or nan where out of range)."""
    if isinstance(number, int) and not isinstance(number, np.integer):
        try:
            number = float(number)
        except OverflowError:
            return math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.array(number).astype(t.dtype))
