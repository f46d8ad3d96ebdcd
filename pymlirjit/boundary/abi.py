"""The C ABI at the Python boundary, and the MLIR shims that keep it simple.

A function marked ``llvm.emit_c_interface`` is reachable as ``_mlir_ciface_<name>``:
scalars by value, memrefs as pointers to descriptors, and (for several results or an
aggregate result) results written through a pointer passed first.

Some scalars do not survive that ABI from ctypes: f16/bf16/f8 and ``complex`` by value
are lowered to LLVM types that ctypes cannot express, and an ``i1`` result has undefined
upper bits. For functions using them the session adds an MLIR shim whose boundary types
are plain, as each type's :attr:`~pymlirjit.boundary.types.ScalarType.boundary` says: i1 -> i8,
f16/bf16 -> i16 and f8 -> i8 (their bits, converted exactly by numpy on the Python
side), complex<fN> -> (re, im) as two fN parameters. Everything else crosses unchanged.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .memref import UnrankedDescriptor, descriptor_type
from .signature import Signature
from .sparse import flat_signature, has_sparse
from .types import (
    MemRefType,
    ScalarType,
    TensorType,
    Type,
    UnrankedMemRefType,
)

__all__ = [
    "symbol_references",
    "CIFACE_PREFIX",
    "RESERVED_PREFIX",
    "BoundaryABI",
    "boundary_abi",
    "callback_shim",
    "c_interface_wrapper",
    "callback_shim_symbol",
    "ciface_name",
    "ciface_symbol",
    "entry_shim_symbol",
    "kernel_shim",
    "native_callback_supported",
    "native_kernel_supported",
]

# -- symbol names: every rule in one place --------------------------------------------------

#: MLIR names the C-interface wrapper of ``@f`` (``llvm.emit_c_interface``) this way.
CIFACE_PREFIX = "_mlir_ciface_"

#: Symbols starting with this are pymlirjit's own (entry and callback shims): user
#: source may not define or declare them.
RESERVED_PREFIX = "__pymlirjit_"
_ENTRY_SHIM_PREFIX = RESERVED_PREFIX + "entry_"
_CALLBACK_SHIM_PREFIX = RESERVED_PREFIX + "callback_"
_DEFINED_PREFIX = RESERVED_PREFIX + "defined_"


def ciface_symbol(name: str) -> str:
    """The symbol of ``@name``'s C interface: ``_mlir_ciface_<name>``."""
    return CIFACE_PREFIX + name


def ciface_name(symbol: str) -> str:
    """The MLIR function a C-interface symbol belongs to (other symbols unchanged)."""
    return symbol.removeprefix(CIFACE_PREFIX)


def entry_shim_symbol(name: str) -> str:
    """The function :func:`kernel_shim` defines for kernel ``@name``: the module's entry."""
    return _ENTRY_SHIM_PREFIX + name


def defined_function_symbol(name: str) -> str:
    """The symbol a function defined as ``@name`` gets when ``name`` is a C function the
    process exports (see :func:`pymlirjit.runtime.prepare.prepare`): lowering passes call those by
    name, and must not reach the module's own function."""
    return _DEFINED_PREFIX + name


def callback_shim_symbol(name: str) -> str:
    """The declaration :func:`callback_shim` makes for callback ``@name``: the Python
    callback is registered under ``ciface_symbol(callback_shim_symbol(name))``."""
    return _CALLBACK_SHIM_PREFIX + name



def _param_boundary_types(t: Type) -> tuple[Type, ...]:
    return t.boundary if isinstance(t, ScalarType) else (t,)


def _memory_ctype(t: Type) -> Any:
    """The ctypes type of a value stored in memory (a result struct field)."""
    if isinstance(t, ScalarType):
        return t.ctype
    if isinstance(t, UnrankedMemRefType):
        return UnrankedDescriptor
    return descriptor_type(t.rank)


@dataclass(frozen=True)
class BoundaryABI:
    """How one function's values cross the C ABI at the Python boundary.

    ``boundary`` is the signature the C entry point really has (after any shim);
    ``c_params`` the ctypes types of its parameters (without the result pointer);
    ``c_result`` the by-value result type (``None`` for none or via pointer);
    ``result_struct`` the struct written through the first-parameter pointer, if any.
    """

    signature: Signature
    boundary: Signature
    needs_shim: bool
    c_params: tuple[Any, ...]
    c_result: Any
    result_struct: Any

    @property
    def results_via_pointer(self) -> bool:
        return self.result_struct is not None


@functools.lru_cache(maxsize=256)
def boundary_abi(signature: Signature) -> BoundaryABI:
    """Derive the boundary ABI of ``signature`` (cached: signatures are values); a
    function with sparse tensors has its wrapper's (:mod:`pymlirjit.boundary.sparse`)."""
    if has_sparse(signature):
        return boundary_abi(flat_signature(signature))
    params: list[Type] = []
    for t in signature.param_types:
        params.extend(_param_boundary_types(t))
    results = list(signature.results)
    if len(results) == 1 and isinstance(results[0], ScalarType) and len(results[0].boundary) == 1:
        results = [results[0].boundary[0]]
    needs_shim = tuple(params) != signature.param_types or tuple(results) != signature.results
    boundary = Signature.of(params, results)
    c_params = tuple(
        _memory_ctype(t) if isinstance(t, ScalarType) else ctypes.c_void_p for t in params
    )
    c_result = None
    result_struct = None
    if len(results) == 1 and isinstance(results[0], ScalarType) and len(results[0].boundary) == 1:
        c_result = results[0].ctype
    elif results:
        fields = [(f"r{i}", _memory_ctype(t)) for i, t in enumerate(results)]
        result_struct = type("Results", (ctypes.Structure,), {"_fields_": fields})
    return BoundaryABI(signature, boundary, needs_shim, c_params, c_result, result_struct)


def _plain_scalar(t: Type) -> bool:
    """A scalar native code converts itself: it crosses as itself, or i1 as i8."""
    return isinstance(t, ScalarType) and t.crossing in ("value", "widened")


def native_kernel_supported(signature: Signature) -> bool:
    """Whether a native kernel entry (:mod:`pymlirjit.boundary.native`) can serve this function:
    bool/int/f16/bf16/f32/f64/complex and ranked memref or tensor parameters and results
    (several as a tuple). Not the f8 types (taken by the Python path: no native rounding
    to them yet) nor unranked memrefs."""
    return all(_plain_scalar(t) or _complex(t) or _rounded_natively(t)
               or isinstance(t, (MemRefType, TensorType))
               for t in (*signature.param_types, *signature.results))


def _complex(t: Type) -> bool:
    """A complex scalar: it crosses as (re, im) parameters, and as a {re, im} struct in
    the results written through a pointer."""
    return isinstance(t, ScalarType) and t.crossing == "pair"


def native_callback_supported(signature: Signature) -> bool:
    """Whether a native trampoline (:mod:`pymlirjit.boundary.native`) can serve this callback:
    bool/int/f16/bf16/f32/f64/complex and ranked or unranked memref parameters; no
    result or one bool/int/f16/bf16/f32/f64 result, or a ranked memref whose layout has no static
    stride (a callback's array result is copied to fresh contiguous memory)."""
    results = signature.results
    return (all(_plain_scalar(t) or isinstance(t, (MemRefType, UnrankedMemRefType))
                or _boxed_natively(t) for t in signature.param_types)
            and (not results or (len(results) == 1 and (_plain_scalar(results[0])
                                                         or _rounded_natively(results[0])
                                                         or _copied_natively(results[0])))))


def _rounded_natively(t: Type) -> bool:
    """A callback result a trampoline rounds to its bits itself: f16, bf16."""
    return isinstance(t, ScalarType) and t.mlir in ("f16", "bf16")


def _copied_natively(t: Type) -> bool:
    """A callback result a trampoline copies to fresh memory: a ranked memref whose
    layout has no static stride (see :func:`pymlirjit.boundary.memref.result_array`)."""
    return isinstance(t, MemRefType) and (t.strides is None
                                          or all(s is None for s in t.strides))


def _boxed_natively(t: Type) -> bool:
    """A callback parameter a trampoline boxes from its crossing: complex (a pair) and
    f16/bf16 (bits)."""
    return isinstance(t, ScalarType) and (t.crossing == "pair" or t.mlir in ("f16", "bf16"))


def _convert(value: str, out: str, source: Type, target: Type) -> tuple[list[str], str]:
    """MLIR ops converting ``value`` between a boundary type and an inner type."""
    if source == target:
        return [], value
    if isinstance(target, ScalarType) and target.crossing == "widened":
        return [f"{out} = arith.trunci {value} : {source.mlir} to {target.mlir}"], out
    if isinstance(source, ScalarType) and source.crossing == "widened":
        return [f"{out} = arith.extui {value} : {source.mlir} to {target.mlir}"], out
    # f16/bf16/f8 <-> the integer of their width: the same bits, so no conversion
    # routine (libcall) is needed.
    return [f"{out} = arith.bitcast {value} : {source.mlir} to {target.mlir}"], out


def _types(types: tuple[Type, ...]) -> str:
    return ", ".join(t.mlir for t in types)


def _result_list(types: tuple[Type, ...]) -> str:
    return types[0].mlir if len(types) == 1 else f"({_types(types)})"


def _call_and_return(callee: str, args: list[str], arg_types: tuple[Type, ...],
                     results: tuple[Type, ...], returned_types: tuple[Type, ...]) -> list[str]:
    call = f"call @{callee}({', '.join(args)}) : ({_types(arg_types)}) -> {_result_list(results)}"
    if not results:
        return [call, "return"]
    lines = [f"%r:{len(results)} = {call}"]
    returned = []
    for i, (source, target) in enumerate(zip(results, returned_types)):
        ops, value = _convert(f"%r#{i}", f"%ret{i}", source, target)
        lines += ops
        returned.append(value)
    lines.append(f"return {', '.join(returned)} : {_types(returned_types)}")
    return lines


def declaration(name: str, signature: Signature) -> str:
    """A private ``func.func`` declaration of ``@name``."""
    return (f"func.func private @{name}({_types(signature.param_types)}) -> "
            f"{_result_list(signature.results)}\n")


def kernel_shim(name: str, entry: str, signature: Signature) -> str:
    """``func.func @entry`` taking boundary types and calling ``@name``.

    The text declares ``@name`` too, so that it parses on its own; drop that
    declaration when merging the shim into the module that defines ``@name``.
    """
    abi = boundary_abi(signature)
    boundary_types = abi.boundary.param_types
    boundary_args = [f"%b{i}" for i in range(len(boundary_types))]
    lines: list[str] = []
    inner_args: list[str] = []
    position = 0
    for i, t in enumerate(signature.param_types):
        if isinstance(t, ScalarType) and t.crossing == "pair":
            re, im = boundary_args[position], boundary_args[position + 1]
            lines.append(f"%z{i} = complex.create {re}, {im} : {t.mlir}")
            inner_args.append(f"%z{i}")
            position += 2
            continue
        ops, value = _convert(boundary_args[position], f"%z{i}", boundary_types[position], t)
        lines += ops
        inner_args.append(value)
        position += 1
    lines += _call_and_return(name, inner_args, signature.param_types, signature.results,
                              abi.boundary.results)
    header = ", ".join(f"{a}: {t.mlir}" for a, t in zip(boundary_args, boundary_types))
    body = "\n    ".join(lines)
    return (f"func.func @{entry}({header}) -> {_result_list(abi.boundary.results)} "
            f"attributes {{llvm.emit_c_interface}} {{\n    {body}\n}}\n"
            + declaration(name, signature))


def callback_shim(name: str, symbol: str, signature: Signature) -> str:
    """A definition of ``@name`` that widens its values and calls ``@symbol``.

    ``@symbol`` is declared with the boundary signature and ``llvm.emit_c_interface``:
    the Python callback is registered under ``_mlir_ciface_<symbol>``.
    """
    abi = boundary_abi(signature)
    params = [f"%a{i}" for i in range(len(signature.params))]
    lines: list[str] = []
    boundary_values: list[str] = []
    for i, (value, t) in enumerate(zip(params, signature.param_types)):
        if isinstance(t, ScalarType) and t.crossing == "pair":
            lines.append(f"%re{i} = complex.re {value} : {t.mlir}")
            lines.append(f"%im{i} = complex.im {value} : {t.mlir}")
            boundary_values += [f"%re{i}", f"%im{i}"]
            continue
        ops, converted = _convert(value, f"%w{i}", t, _param_boundary_types(t)[0])
        lines += ops
        boundary_values.append(converted)
    boundary = abi.boundary
    lines += _call_and_return(symbol, boundary_values, boundary.param_types, boundary.results,
                              signature.results)
    header = ", ".join(f"{a}: {t.mlir}" for a, t in zip(params, signature.param_types))
    body = "\n    ".join(lines)
    return (f"func.func private @{name}({header}) -> {_result_list(signature.results)} {{\n"
            f"    {body}\n}}\n"
            f"func.func private @{symbol}({_types(boundary.param_types)}) -> "
            f"{_result_list(boundary.results)} attributes {{llvm.emit_c_interface}}\n")


_SYMBOL_REFERENCE = re.compile(r'@(?:"((?:[^"\\]|\\.)*)"|([\w$.-]+))')


def symbol_references(text: str) -> Counter[str]:
    """How often MLIR ``text`` names each symbol (``@name`` or ``@"quoted name"``),
    declarations and definitions included; read from the text, without parsing it."""
    return Counter(m.group(1) or m.group(2) for m in _SYMBOL_REFERENCE.finditer(text))


def c_interface_wrapper(entry: str, signature: Signature) -> tuple[str, str]:
    """An ``llvm.func @_mlir_ciface_<entry>`` calling ``@entry`` with the same scalars,
    and the declaration of ``@entry`` it needs to verify alone."""
    def llvm(t: Any) -> str:
        return "i64" if t.mlir == "index" else str(t.mlir)  # index lowered to i64 here

    params = [llvm(t) for t in signature.param_types]
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(params))
    values = ", ".join(f"%a{i}" for i in range(len(params)))
    result = llvm(signature.results[0]) if signature.results else "()"
    call_type = f"({', '.join(params)}) -> {result}"
    returns = f" -> {result}" if signature.results else ""
    declaration = f"llvm.func @{entry}({', '.join(params)}){returns}"
    if signature.results:
        return declaration, (
            f"llvm.func @{CIFACE_PREFIX}{entry}({args}) -> {result} {{\n"
            f"  %r = llvm.call @{entry}({values}) : {call_type}\n"
            f"  llvm.return %r : {result}\n}}")
    return declaration, (f"llvm.func @{CIFACE_PREFIX}{entry}({args}) {{\n"
                         f"  llvm.call @{entry}({values}) : {call_type}\n  llvm.return\n}}")
