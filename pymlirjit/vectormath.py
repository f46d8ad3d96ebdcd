"""Math functions without one libm call per element: inline code, and glibc's vector
math library.

With ``fastmath=True``, :func:`use_vector_library` rewrites a module's ``math`` ops on
``f32``/``f64`` (scalars and vectors, :data:`FUNCTIONS`) before it is lowered:

- ``exp`` and ``tanh`` become arith and math ops (:func:`_inline_exp`,
  :func:`_inline_tanh`; under 1 ulp measured) that LLVM vectorizes and keeps in
  registers, with no call at all;
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
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


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
        ops: list[Any] = []

        def visit(op: Any) -> Any:
            if op.name in FUNCTIONS:
                ops.append(op)
            return self.ir.WalkResult.ADVANCE

        self.module.operation.walk(visit)
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


# -- exp, inline: faster than a call of libmvec's, and as accurate -------------------------

#: Per element width: the range outside which exp is 0 or inf, ln 2 in two parts (the first
#: with enough trailing zeros that k * ln2_hi is exact), the degree of the polynomial
#: (:func:`_exp_coefficients`; error < 0.1 ulp on |r| <= ln(2)/2), the exponent's bias
#: and where it starts.
_EXP = {64: (-746.0, 710.0, 6.93147180369123816490e-01, 1.90821492927058770002e-10, 11,
             1023, 52),
        32: (-104.0, 89.0, 0.693359375, -2.12194440054690583e-4, 7, 127, 23)}


def _inline_exp(x: Any, bits: int) -> Any:
    """exp(x) (f32/f64, scalar or vector) in arith and math ops that LLVM vectorizes
    and keeps in registers: k = round(x / ln 2), r = x - k ln 2 (Cody and Waite, with
    FMAs), exp(r) by a polynomial (:func:`_exp_coefficients`), times 2^k: on an
    AVX-512 host by ``ldexp`` (one ``vscalefpd``), elsewhere (and on MLIR vectors) by
    multiplying by 2^k built from bits in two halves; either way results down to the
    subnormals round once. Without fast-math flags: the reduction must not be
    reassociated."""
    from mlir import ir
    from mlir.dialects import arith
    from mlir.dialects import math as ops

    low, high, ln2_hi, ln2_lo, degree, bias, mantissa = _EXP[bits]
    float_type = x.type
    integer = ir.IntegerType.get_signless(bits)
    int_type = (ir.VectorType.get(float_type.shape, integer)
                if isinstance(float_type, ir.VectorType) else integer)

    def f(value: float) -> Any:
        return _constant(float_type, value)

    def i(value: int) -> Any:
        return _constant(int_type, value)

    ordered = arith.CmpFPredicate
    nan = arith.cmpf(ordered.UNO, x, x)
    # NaN compares false: clamped to `low`, so k stays finite; the result is x then.
    clamped = arith.select(arith.cmpf(ordered.OGE, x, f(low)), x, f(low))
    clamped = arith.select(arith.cmpf(ordered.OLE, clamped, f(high)), clamped, f(high))
    k = ops.roundeven(arith.mulf(clamped, f(1 / math.log(2))))
    minus_k = arith.negf(k)
    r = ops.fma(minus_k, f(ln2_lo), ops.fma(minus_k, f(ln2_hi), clamped))
    coefficients = _exp_coefficients(degree)
    p = f(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        p = ops.fma(p, r, f(coefficient))
    if "avx512f" in _cpu_flags() and not isinstance(float_type, ir.VectorType):
        scaled = _scale_by_power_of_two(p, k)
    else:
        whole = arith.fptosi(int_type, k)
        half = arith.shrsi(whole, i(1))
        scaled = p
        for part in (half, arith.subi(whole, half)):
            biased = arith.shli(arith.addi(part, i(bias)), i(mantissa))
            scaled = arith.mulf(scaled, arith.bitcast(float_type, biased))
    return arith.select(nan, x, scaled)


def _scale_by_power_of_two(value: Any, power: Any) -> Any:
    """``value * 2^power`` (scalars; ``power`` a whole float) rounded once: LLVM's
    ``ldexp``, which AVX-512 computes in one instruction (``vscalefpd``) in the loops
    LLVM vectorizes; on other hosts it would be a libm call per element. (MLIR's
    ``llvm.intr.ldexp`` takes no vector of exponents.)"""
    from mlir import ir
    from mlir.dialects import arith, llvm

    i32 = ir.IntegerType.get_signless(32)
    return llvm.intr_ldexp(value.type, value, arith.fptosi(i32, power))


#: |r| after the reduction is at most ln(2)/2 (and a hair, from rounding).
_EXP_REDUCED = 0.35


@functools.cache
def _exp_coefficients(degree: int) -> tuple[float, ...]:
    """Coefficients of r^0 .. r^degree of a polynomial close to the minimax one for exp
    on |r| <= :data:`_EXP_REDUCED`: exp's Taylor series, 8 terms longer, economized with
    Chebyshev polynomials (each term above ``degree`` traded for lower ones at a cost
    of (|r|/2)^n / n!, not |r|^n / n!), in exact rationals. Degree 11 stays under
    1e-17 (relative) where the Taylor series needs degree 13."""
    from fractions import Fraction

    top = degree + 8
    scale = Fraction(_EXP_REDUCED)
    # In t = r / scale, so that |t| <= 1, Chebyshev's range.
    series = [Fraction(1, math.factorial(n)) * scale**n for n in range(top + 1)]
    chebyshev = [[Fraction(1)], [Fraction(0), Fraction(1)]]  # T_n's powers of t
    while len(chebyshev) <= top:
        last, before = chebyshev[-1], chebyshev[-2]
        padded = [*before, Fraction(0), Fraction(0)]
        chebyshev.append([2 * (last[i - 1] if i else Fraction(0)) - padded[i]
                          for i in range(len(last) + 1)])
    for n in range(top, degree, -1):
        lead = series[n] / chebyshev[n][n]
        series = [c - lead * chebyshev[n][i] if i <= n else c for i, c in enumerate(series)]
    return tuple(float(series[n] / scale**n) for n in range(degree + 1))


def _constant(type_: Any, value: float) -> Any:
    """A constant of ``type_`` (a float or integer type, or a vector of one: a splat)."""
    from mlir import ir
    from mlir.dialects import arith

    element = type_.element_type if isinstance(type_, ir.VectorType) else type_
    attribute = (ir.FloatAttr.get(element, value)
                 if isinstance(element, ir.F32Type | ir.F64Type)
                 else ir.IntegerAttr.get(element, int(value)))
    if isinstance(type_, ir.VectorType):
        attribute = ir.DenseElementsAttr.get_splat(type_, attribute)
    return arith.constant(type_, attribute)


#: Below this |x|, tanh is its Taylor series; above, 1 - 2 / (exp(2|x|) + 1) loses no
#: digit (the fraction is at most 1/2).
_TANH_SERIES_BELOW = 0.55
#: Terms of the series after x, per element width: the first left out is < 0.1 ulp.
_TANH_TERMS = {64: 17, 32: 7}


@functools.cache
def _tanh_coefficients(terms: int) -> tuple[float, ...]:
    """tanh's Taylor coefficients of x^3, x^5, ...: 2^2n (2^2n - 1) B_2n / (2n)!."""
    from fractions import Fraction

    bernoulli = [Fraction(1)]  # B_0, B_1, ... (B_1 = -1/2)
    for m in range(1, 2 * terms + 3):
        total = sum((math.comb(m + 1, j) * bernoulli[j] for j in range(m)), Fraction(0))
        bernoulli.append(-total / (m + 1))
    return tuple(float(Fraction(4**n * (4**n - 1)) * bernoulli[2 * n]
                       / math.factorial(2 * n)) for n in range(2, terms + 2))


def _inline_tanh(x: Any, bits: int) -> Any:
    """tanh(x) (f32/f64, scalar or vector) in arith and math ops: x + x^3 P(x^2) near 0,
    else 1 - 2 / (exp(2|x|) + 1) (:func:`_inline_exp`), with the sign of x. NaN and
    the infinities come out of the second form."""
    from mlir.dialects import arith
    from mlir.dialects import math as ops

    float_type = x.type

    def f(value: float) -> Any:
        return _constant(float_type, value)

    magnitude = ops.absf(x)
    grown = _inline_exp(arith.addf(magnitude, magnitude), bits)
    far = arith.subf(f(1.0), arith.divf(f(2.0), arith.addf(grown, f(1.0))))
    square = arith.mulf(x, x)
    coefficients = _tanh_coefficients(_TANH_TERMS[bits])
    p = f(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        p = ops.fma(p, square, f(coefficient))
    near = ops.fma(arith.mulf(x, square), p, x)
    is_near = arith.cmpf(arith.CmpFPredicate.OLT, magnitude, f(_TANH_SERIES_BELOW))
    # The sign of x on both (the series gives +0 for -0).
    return ops.copysign(arith.select(is_near, near, far), x)


#: Functions computed inline rather than by libmvec (where there is none, too).
_INLINE = {"exp": _inline_exp, "tanh": _inline_tanh}
