"""16-bit floats in generated code, without libcalls (the code is for a generic x86-64,
without F16C): f16 bits to f32, and f64 to f16/bf16 bits rounded as numpy rounds."""

from __future__ import annotations

from llvmlite import ir

from .builder import _float, _i32, _i64


def _half_to_float(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The f32 of the f16 whose bits are ``bits`` (an i32 holding 16), exactly: no
    libcall (the generated code is for a generic x86-64, without F16C). Rebias the
    exponent; infinities and NaNs get the f32 maximum exponent; subnormals are
    renormalised by an exact float subtraction."""
    def const(value: int) -> ir.Constant:
        return ir.Constant(_i32, value)

    shifted = b.shl(b.and_(bits, const(0x7FFF)), const(13))
    exponent = b.and_(shifted, const(0x7C00 << 13))
    normal = b.add(shifted, const((127 - 15) << 23))
    special = b.add(normal, const((128 - 16) << 23))
    tiny = b.bitcast(b.fsub(b.bitcast(b.add(normal, const(1 << 23)), _float),
                            b.bitcast(const(113 << 23), _float)), _i32)
    magnitude = b.select(b.icmp_unsigned("==", exponent, const(0x7C00 << 13)), special,
                         b.select(b.icmp_unsigned("==", exponent, const(0)), tiny, normal))
    sign = b.shl(b.and_(bits, const(0x8000)), const(16))
    return b.bitcast(b.or_(magnitude, sign), _float)


def _bits_to_double(b: ir.IRBuilder, bits: ir.Value, mlir_type: str) -> ir.Value:
    """The double of the f16 or bf16 (``mlir_type``) whose bits are ``bits`` (an i16),
    exactly: what ``float()`` of the numpy (ml_dtypes) scalar gives."""
    wide = b.zext(bits, _i32)
    if mlir_type == "bf16":  # the top half of an f32
        single = b.bitcast(b.shl(wide, ir.Constant(_i32, 16)), _float)
    else:
        assert mlir_type == "f16", mlir_type
        single = _half_to_float(b, wide)
    # A NaN's payload moved in integers: fpext would set its quiet bit (numpy's
    # conversion keeps a signaling NaN signaling).
    raw = b.zext(b.bitcast(single, _i32), _i64)
    nan = b.or_(b.or_(b.shl(b.and_(raw, ir.Constant(_i64, 1 << 31)), ir.Constant(_i64, 32)),
                      ir.Constant(_i64, 0x7FF << 52)),
                b.shl(b.and_(raw, ir.Constant(_i64, (1 << 23) - 1)), ir.Constant(_i64, 29)))
    is_nan = b.fcmp_unordered("uno", single, single)
    return b.select(is_nan, b.bitcast(nan, ir.DoubleType()), b.fpext(single, ir.DoubleType()))


# The layouts of the floats results cross as bits: (exponent bits, mantissa bits,
# whether a NaN keeps the top of its payload: numpy's float16 does, ml_dtypes' bfloat16
# makes every NaN the quiet one of its sign).
_BITS_LAYOUTS = {"f16": (5, 10, True), "bf16": (8, 7, False)}


def _double_to_bits(b: ir.IRBuilder, value: ir.Value, exponent_bits: int,
                    mantissa_bits: int, nan_payload: bool) -> ir.Value:
    """The bits (an i16) of the 16-bit float nearest ``value`` (a double), rounded once,
    to nearest even, as numpy (ml_dtypes for bf16) converts a float: overflow to
    infinity, underflow to subnormals and signed zeros, NaN kept a NaN (see
    :data:`_BITS_LAYOUTS`). Integer arithmetic only (no libcall: the code is for a
    generic x86-64)."""
    def const(n: int) -> ir.Constant:
        return ir.Constant(_i64, n)

    bias = (1 << (exponent_bits - 1)) - 1
    lowest = 1 - bias  # the exponent of the smallest normal number
    infinity = ((1 << exponent_bits) - 1) << mantissa_bits
    drop = 52 - mantissa_bits  # the double's significand bits a normal result drops
    bits = b.bitcast(value, _i64)
    magnitude = b.and_(bits, const((1 << 63) - 1))
    sign = b.and_(b.lshr(bits, const(48)), const(0x8000))
    exponent = b.sub(b.lshr(magnitude, const(52)), const(1023))
    fraction = b.and_(magnitude, const((1 << 52) - 1))
    normal = b.icmp_signed(">=", exponent, const(lowest))
    # Normal: rebias the exponent, keep the top of the fraction. Subnormal: shift the
    # whole significand (implicit bit included) to units of the smallest subnormal.
    subnormal_shift = b.sub(const(52 + lowest - mantissa_bits), exponent)
    in_range = b.and_(b.icmp_signed(">=", subnormal_shift, const(drop + 1)),
                      b.icmp_signed("<=", subnormal_shift, const(53)))
    shift = b.select(normal, const(drop), b.select(in_range, subnormal_shift, const(53)))
    significand = b.select(normal, fraction, b.or_(fraction, const(1 << 52)))
    base = b.lshr(significand, shift)
    base = b.select(normal, b.or_(b.shl(b.add(exponent, const(bias)), const(mantissa_bits)),
                                  base), base)
    remainder = b.and_(significand, b.sub(b.shl(const(1), shift), const(1)))
    halfway = b.shl(const(1), b.sub(shift, const(1)))
    up = b.or_(b.icmp_unsigned(">", remainder, halfway),
               b.and_(b.icmp_unsigned("==", remainder, halfway),
                      b.trunc(b.and_(base, const(1)), ir.IntType(1))))
    rounded = b.add(base, b.zext(up, _i64))  # a carry may reach the exponent: right
    result = b.select(b.icmp_signed("<", subnormal_shift, const(drop + 1)), rounded,
                      b.select(in_range, rounded, const(0)))
    result = b.select(b.icmp_signed(">", exponent, const(bias)), const(infinity), result)
    if nan_payload:
        nan = b.add(const(infinity), b.lshr(fraction, const(drop)))
        nan = b.select(b.icmp_unsigned("==", nan, const(infinity)), const(infinity + 1), nan)
    else:
        nan = const(infinity | 1 << (mantissa_bits - 1))
    special = b.icmp_unsigned(">=", magnitude, const(0x7FF << 52))
    is_nan = b.icmp_unsigned(">", magnitude, const(0x7FF << 52))
    result = b.select(special, b.select(is_nan, nan, const(infinity)), result)
    return b.trunc(b.or_(result, sign), ir.IntType(16))
