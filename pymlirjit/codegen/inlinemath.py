"""exp and tanh (f32, f64, scalars and vectors) as arith and math ops that LLVM vectorizes
and keeps in registers: faster than a call of ``libmvec``'s, and as accurate (under 1
and 2 ulp measured). :mod:`pymlirjit.codegen.vectormath` puts them in place of ``math.exp``
and ``math.tanh`` with ``fastmath=True`` (:data:`INLINE`)."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

__all__ = ["INLINE", "cpu_flags"]


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The host CPU's flags as Linux lists them (empty where it does not)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()



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
    if "avx512f" in cpu_flags() and not isinstance(float_type, ir.VectorType):
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
INLINE: dict[str, Callable[[Any, int], Any]] = {"exp": _inline_exp, "tanh": _inline_tanh}
