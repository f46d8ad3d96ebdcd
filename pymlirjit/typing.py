"""Scalar annotations that type checkers understand.

``pymlirjit.f32`` and its kin are values (as numba's types are), so a type checker
rejects ``def scale(x: f32) -> f32``. The names here are ``Annotated`` aliases of the
same types: ``f32`` is ``Annotated[float, pymlirjit.f32]``, which a type checker reads
as ``float`` and pymlirjit as ``f32``. Import them instead of the values where the code
is type-checked:

>>> from pymlirjit import callback, CallbackRegistry
>>> from pymlirjit.typing import f32, i32
>>> @callback(registry=CallbackRegistry())
... def scale(x: f32, k: i32) -> f32:
...     return x / 2 + k / 2
>>> scale.signature
Signature('(f32, i32) -> f32')

``from pymlirjit import f32`` gives type checkers these aliases too (and pymlirjit the
values), so annotations written with the package's names type-check as they are.

Arrays: to a type checker, ``MemRef[f32, None]`` (and ``Tensor[...]``,
``UnrankedMemRef[...]``) is a numpy array; to pymlirjit, a memref type. Dims must then be
types: ``None`` for a dynamic dim, ``Literal[4]`` for a static one (an int such as
``MemRef[f32, 4]`` works at run time, but a type checker rejects it). The long form
``Annotated[numpy.typing.NDArray[numpy.float32], MemRef[pymlirjit.f32, 4]]`` says the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeAlias, TypeVar

import numpy as np

from .boundary import types

__all__ = ["MemRef", "Tensor", "UnrankedMemRef", "bf16", "complex64", "complex128",
           "f8E4M3FN", "f8E5M2", "f16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "index",
           "ptr"]

if TYPE_CHECKING:
    from typing_extensions import TypeVarTuple, Unpack

    _Element = TypeVar("_Element")
    _Dims = TypeVarTuple("_Dims")

    class MemRef(np.ndarray[Any, np.dtype[Any]], Generic[_Element, Unpack[_Dims]]):
        """A ranked memref, which Python code sees as a numpy array."""

    class Tensor(np.ndarray[Any, np.dtype[Any]], Generic[_Element, Unpack[_Dims]]):
        """A ranked tensor, which Python code sees as a numpy array."""

    class UnrankedMemRef(np.ndarray[Any, np.dtype[Any]], Generic[_Element]):
        """An unranked memref, which Python code sees as a numpy array."""
else:
    from .boundary.types import MemRef, Tensor, UnrankedMemRef

i1: TypeAlias = Annotated[bool, types.i1]
i8: TypeAlias = Annotated[int, types.i8]
i16: TypeAlias = Annotated[int, types.i16]
i32: TypeAlias = Annotated[int, types.i32]
i64: TypeAlias = Annotated[int, types.i64]
index: TypeAlias = Annotated[int, types.index]
f16: TypeAlias = Annotated[float, types.f16]
bf16: TypeAlias = Annotated[float, types.bf16]
f8E4M3FN: TypeAlias = Annotated[float, types.f8E4M3FN]
f8E5M2: TypeAlias = Annotated[float, types.f8E5M2]
f32: TypeAlias = Annotated[float, types.f32]
f64: TypeAlias = Annotated[float, types.f64]
complex64: TypeAlias = Annotated[complex, types.complex64]
complex128: TypeAlias = Annotated[complex, types.complex128]
ptr: TypeAlias = Annotated[int, types.ptr]
