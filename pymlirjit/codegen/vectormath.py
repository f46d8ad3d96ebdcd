"""Math functions without one libm call per element: inline code, and glibc's vector
math library.

With ``fastmath=True``, :func:`use_vector_library` rewrites a module's ``math`` ops on
``f32``/``f64`` (scalars and vectors, :data:`FUNCTIONS`) before it is lowered:

- ``exp`` and ``tanh`` become arith and math ops (:mod:`pymlirjit.codegen.inlinemath`; under
  1 and 2 ulp measured) that LLVM vectorizes and keeps in registers, with no call at
  all;
- the others (``log``, ``sin``, ``erf``, ``pow``, ...) use glibc's ``libmvec`` where it
  serves them (glibc documents at most 4 ulp of error). On a vector
  (``vector<13xf64>``): a call of the widest variant the host runs (AVX-512
  ``_ZGVeN8v_sin``, AVX2 ``_ZGVdN4v_sin``, SSE ``_ZGVbN2v_sin``) per chunk of lanes,
  instead of LLVM scalarizing the op into a libm call per lane; lanes left over (fewer
  than the narrowest variant takes) call libm. On a scalar: a call of libm's function
  whose declaration names its vector variants (LLVM's ``vector-function-abi-variant``
  attribute), so that LLVM's loop vectorizer calls them in the loops it vectorizes.

A function with such code prefers 512-bit vectors on an AVX-512 host (LLVM prefers 256
bits there, and so would run half as wide).

``libmvec.so.1`` is found by the dynamic loader, and loaded with its symbols global
(the JIT and cached modules resolve them through the process). Where it is missing
(not glibc, not x86-64), only ``exp`` and ``tanh`` are rewritten.
"""
from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..lowering.walk import operations
from .inlinemath import INLINE as _INLINE
from .inlinemath import cpu_flags as _cpu_flags

__all__ = ["FUNCTIONS", "LIBRARY", "VectorLibrary", "cache_tag", "library",
           "load_for", "use_vector_library"]

#: The library's name, as the dynamic loader finds it.
LIBRARY = "libmvec.so.1"

#: ``math`` op -> (libm's f64 function, number of operands). libm's f32 function adds
#: ``f`` (``expf``).
FUNCTIONS: dict[str, tuple[str, int]] = {
    **{f"math.{name}": (name, 1) for name in (
        "exp", "exp2", "expm1", "log", "log10", "log1p", "log2", "sin", "cos", "tan",
        "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erf",
        "erfc", "cbrt")},
    "math.atan2": ("atan2", 2),
    "math.powf": ("pow", 2),
}

#: The x86-64 vector ABI's ISA letters, narrowest first: (letter, bits, CPU flag).
_ISAS = (("b", 128, None), ("d", 256, "avx2"), ("e", 512, "avx512f"))

#: What LLVM may assume of a libm function here: it reads and writes no memory (no errno:
#: as LLVM's own math intrinsics), does not unwind and returns.
_PURE = ("memory_effects = #llvm.memory_effects<other = none, argMem = none, "
         "inaccessibleMem = none, errnoMem = none, targetMem0 = none, targetMem1 = none>, "
         "no_unwind, will_return")


@dataclass(frozen=True)
class VectorLibrary:
    """``libmvec`` as this host uses it: the ISA letters it runs (narrowest first, with
    their widths in bits) and the f64 functions it has a variant of for each."""

    isas: tuple[tuple[str, int], ...]
    functions: frozenset[str]
    glibc: str

    def lanes(self, bits: int) -> list[tuple[str, int]]:
        """(ISA letter, lanes) of each variant for elements of ``bits``, widest first."""
        return [(letter, width // bits) for letter, width in reversed(self.isas)]

    def variant(self, function: str, letter: str, lanes: int, operands: int,
                bits: int) -> str:
        """The vector variant's symbol, such as ``_ZGVeN8v_exp`` or ``_ZGVdN8vv_powf``."""
        return f"_ZGV{letter}N{lanes}{'v' * operands}_{_scalar_name(function, bits)}"


def _scalar_name(function: str, bits: int) -> str:
    return function + ("f" if bits == 32 else "")


@functools.cache
def library() -> VectorLibrary | None:
    """``libmvec`` on this host, loaded (symbols global); ``None`` where there is none
    (then only ``exp`` and ``tanh`` are rewritten, inline)."""
    if not hasattr(os, "uname") or os.uname().machine != "x86_64" or not hasattr(os, "confstr"):
        return None
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
        handle = ctypes.CDLL(LIBRARY, mode=ctypes.RTLD_GLOBAL)
    except (OSError, ValueError):
        return None
    flags = _cpu_flags()
    isas = tuple((letter, bits) for letter, bits, flag in _ISAS if flag is None or flag in flags)
    candidate = VectorLibrary(isas, frozenset(), glibc)
    functions = frozenset(
        name for name, operands in FUNCTIONS.values()
        if all(hasattr(handle, candidate.variant(name, letter, lanes, operands, bits))
               for bits in (32, 64) for letter, lanes in candidate.lanes(bits)))
    return VectorLibrary(isas, functions, glibc) if functions else None


def cache_tag() -> str:
    """What of ``libmvec`` decides the code :func:`use_vector_library` makes (part of a
    cache key): its glibc, the ISAs and functions used; empty where there is none."""
    found = library()
    if found is None:
        return ""
    return (f" +libmvec({found.glibc};{''.join(letter for letter, _ in found.isas)};"
            f"{','.join(sorted(found.functions))})")


def load_for(symbols: Iterable[str]) -> None:
    """Load ``libmvec`` (symbols global) if any of ``symbols`` is one of its variants:
    code compiled elsewhere, linked in this process, resolves them through it."""
    if any(symbol.startswith("_ZGV") for symbol in symbols):
        library()


# -- the rewrite ---------------------------------------------------------------------------

def use_vector_library(module: Any) -> int:
    """Rewrite ``module``'s math ops (parsed, not lowered) into inline code or calls of
    ``libmvec``, as the module docstring says; return how many ops were rewritten."""
    return _Rewriter(module, library()).run()


class _Rewriter:
    def __init__(self, module: Any, found: VectorLibrary | None) -> None:
        from mlir import ir

        self.ir = ir
        self.module = module
        self.found = found
        self.symbols = ir.SymbolTable(module.operation)
        self.declared: set[str] = set()  # symbols this rewrite declared
        self.variants: list[str] = []  # vector variants to keep alive for the vectorizer
        self.wide_callers: list[Any] = []  # functions to prefer 512-bit vectors in

    def run(self) -> int:
        ops = operations(self.module, names=FUNCTIONS)
        count = 0
        with self.module.context, self.ir.Location.unknown():
            for op in ops:
                count += self._rewrite(op)
            self._keep_variants_alive()
            self._prefer_wide_vectors()
        return count

    def _rewrite(self, op: Any) -> int:
        ir = self.ir
        name, operands = FUNCTIONS[op.name]
        inline = name in _INLINE
        if not inline and (self.found is None or name not in self.found.functions):
            return 0
        result = op.results[0].type
        if isinstance(result, ir.VectorType):
            element = result.element_type
            if result.rank == 0 or any(result.scalable_dims) or not result.has_static_shape:
                return 0
        else:
            element = result
        if not isinstance(element, ir.F32Type | ir.F64Type):
            return 0
        bits = 32 if isinstance(element, ir.F32Type) else 64
        if inline:
            with ir.InsertionPoint(op), op.location:
                computed = _INLINE[name](op.operands[0], bits)
            op.results[0].replace_all_uses_with(computed)
            self._note_caller(op)
            op.erase()
            return 1
        if isinstance(result, ir.VectorType):
            return self._rewrite_vector(op, name, operands, result, bits)
        return self._rewrite_scalar(op, name, operands, bits)

    # A scalar op: a call of libm's function, whose declaration names the variants.
    def _rewrite_scalar(self, op: Any, name: str, operands: int, bits: int) -> int:
        scalar = self._scalar_function(name, operands, bits)
        if scalar is None:
            return 0
        call = self._call(op, scalar, list(op.operands), op.results[0].type)
        op.results[0].replace_all_uses_with(call)
        self._note_caller(op)
        op.erase()
        return 1

    def _scalar_function(self, name: str, operands: int, bits: int) -> str | None:
        """libm's function for ``name``, declared with its vector variants; None if the
        module has a symbol of that name already (which the call would reach instead)."""
        scalar = _scalar_name(name, bits)
        if scalar in self.declared:
            return scalar
        assert self.found is not None  # only functions libmvec has get here
        variants = [(self.found.variant(name, letter, lanes, operands, bits), lanes)
                    for letter, lanes in reversed(self.found.lanes(bits))]
        # The variants must stay declared (see _keep_variants_alive), through a global
        # of that name: a module with its own keeps libm's calls.
        if scalar in self.symbols or any(v in self.symbols for v, _ in variants) or (
                "llvm.compiler.used" in self.symbols):
            return None
        mappings = ",".join(f"_ZGV_LLVM_N{lanes}{'v' * operands}_{scalar}({variant})"
                            for variant, lanes in variants)
        types = ", ".join([f"f{bits}"] * operands)
        self._insert(f'llvm.func @{scalar}({types}) -> f{bits} attributes {{{_PURE}, '
                     f'passthrough = [["vector-function-abi-variant", "{mappings}"]]}}')
        self.declared.add(scalar)
        for variant, lanes in variants:
            self._declare(variant, operands, f"vector<{lanes}xf{bits}>")
            self.variants.append(variant)
        return scalar

    def _declare(self, symbol: str, operands: int, type_: str) -> bool:
        """Declare the pure function ``symbol`` of ``operands`` values of ``type_``; False
        if the module has another symbol of that name."""
        if symbol in self.declared:
            return True
        if symbol in self.symbols:
            return False
        types = ", ".join([type_] * operands)
        self._insert(f"llvm.func @{symbol}({types}) -> {type_} attributes {{{_PURE}}}")
        self.declared.add(symbol)
        return True

    def _insert(self, text: str) -> None:
        parsed = self.ir.Module.parse(text)  # owns the op until it moves
        declaration = parsed.body.operations[0]
        declaration.operation.detach_from_parent()
        self.module.body.append(declaration)
        self.symbols.insert(declaration)

    def _call(self, at: Any, symbol: str, values: list[Any], type_: Any) -> Any:
        from mlir.dialects import llvm

        with self.ir.InsertionPoint(at), at.location:
            return llvm.call(type_, values, [], [], callee=symbol)

    def _note_caller(self, op: Any) -> None:
        if "avx512f" not in _cpu_flags():
            return
        parent = op.operation.parent
        while parent is not None and parent.name not in ("func.func", "llvm.func"):
            parent = parent.parent
        if parent is not None and all(parent != p for p in self.wide_callers):
            self.wide_callers.append(parent)

    # A vector op: the widest variant per chunk of lanes, the lanes left over scalar.
    def _rewrite_vector(self, op: Any, name: str, operands: int, type_: Any,
                        bits: int) -> int:
        from mlir.dialects import arith, vector

        ir = self.ir
        assert self.found is not None  # only functions libmvec has get here
        element = type_.element_type
        count = 1
        for size in type_.shape:
            count *= size
        flat = ir.VectorType.get([count], element)
        chunks: list[tuple[int, int, str]] = []  # (offset, lanes, variant)
        offset = 0
        for letter, lanes in self.found.lanes(bits):
            while count - offset >= lanes:
                variant = self.found.variant(name, letter, lanes, operands, bits)
                if not self._declare(variant, operands, f"vector<{lanes}xf{bits}>"):
                    return 0
                chunks.append((offset, lanes, variant))
                offset += lanes
        with ir.InsertionPoint(op), op.location:
            values = [v if type_.rank == 1 else vector.shape_cast(flat, v) for v in op.operands]
            result = arith.constant(flat, ir.DenseElementsAttr.get_splat(
                flat, ir.FloatAttr.get(element, 0.0)))
            for start, lanes, variant in chunks:
                part = ir.VectorType.get([lanes], element)
                pieces = [vector.extract_strided_slice(part, v, [start], [lanes], [1])
                          for v in values]
                called = self._call(op, variant, pieces, part)
                result = vector.insert_strided_slice(called, result, [start], [1])
            scalar = self._scalar_function(name, operands, bits) if offset < count else None
            for lane in range(offset, count):
                scalars = [vector.extract(v, [], [lane]) for v in values]
                computed = (self._call(op, scalar, scalars, element) if scalar is not None
                            else ir.Operation.create(op.name, [element], scalars).result)
                result = vector.insert(computed, result, [], [lane])
            if type_.rank != 1:
                result = vector.shape_cast(type_, result)
        op.results[0].replace_all_uses_with(result)
        op.erase()
        return 1

    def _keep_variants_alive(self) -> None:
        """List the variants in ``llvm.compiler.used``: LLVM drops declarations nothing
        calls, and its vectorizer calls only variants the module declares."""
        if not self.variants:
            return
        n = len(self.variants)
        lines = [f"llvm.mlir.global appending @llvm.compiler.used() "
                 f'{{section = "llvm.metadata"}} : !llvm.array<{n} x ptr> {{',
                 f"  %a = llvm.mlir.undef : !llvm.array<{n} x ptr>"]
        for i, variant in enumerate(self.variants):
            lines += [f"  %p{i} = llvm.mlir.addressof @{variant} : !llvm.ptr",
                      f"  %a{i} = llvm.insertvalue %p{i}, %a{'' if i == 0 else i - 1}[{i}]"
                      f" : !llvm.array<{n} x ptr>"]
        lines += [f"  llvm.return %a{n - 1} : !llvm.array<{n} x ptr>", "}"]
        # Parsed beside declarations of the variants: the parser resolves the symbols.
        declarations = "".join(f"llvm.func @{v}()\n" for v in self.variants)
        parsed = self.ir.Module.parse(declarations + "\n".join(lines))
        global_op = parsed.body.operations[n]
        global_op.operation.detach_from_parent()
        self.module.body.append(global_op)

    def _prefer_wide_vectors(self) -> None:
        ir = self.ir
        for function in self.wide_callers:
            attributes = function.attributes
            entries = (list(ir.ArrayAttr(attributes["passthrough"]))
                       if "passthrough" in attributes else [])
            if any("prefer-vector-width" in str(e) for e in entries):
                continue
            entries.append(ir.ArrayAttr.get([ir.StringAttr.get("prefer-vector-width"),
                                             ir.StringAttr.get("512")]))
            attributes["passthrough"] = ir.ArrayAttr.get(entries)
