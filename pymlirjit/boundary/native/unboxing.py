"""Python -> C ABI: how a kernel entry unboxes its scalar arguments (exact Python and
numpy scalars; anything else goes, untouched, to the Python path, which converts or
raises the precise error)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..types import ScalarType
from .builder import OB_TYPE, SCALAR_VALUE, _double, _float, _i8, _i32, _i64
from .halffloat import _BITS_LAYOUTS, _double_to_bits
from .results import _ResultsBuilder

# The numpy integer scalar types entries unbox (others, such as np.longlong, go to the
# Python path).
_NUMPY_INTEGERS: tuple[type[Any], ...] = (np.int64, np.int32, np.int16, np.int8, np.uint64,
                                         np.uint32, np.uint16, np.uint8)
# Every type of scalar argument an entry unboxes (for some parameter type).
_UNBOXED: tuple[type, ...] = (float, int, bool, complex, np.float64, np.float32, np.float16,
                              np.bool_, np.complex128, np.complex64, *_NUMPY_INTEGERS)
#: A Python complex's value (Py_complex cval: two doubles) follows the object header.
_COMPLEX_VALUE = 16
#: The largest magnitude below f32's rounding boundary (rounding at or past it overflows).
_F32_LIMIT = float.fromhex("0x1.ffffffp127")


class _ArgumentsBuilder(_ResultsBuilder):
    """The part of an entry (:class:`pymlirjit.boundary.native.entry._EntryBuilder`) that
    reads its scalar arguments; a call it cannot take goes to :attr:`fallback`."""

    fallback: ir.Block

    def check(self, condition: ir.Value, label: str) -> None:
        """Continue if ``condition`` holds, else hand the call to the Python path."""
        ok = self.function.append_basic_block(label)
        self.builder.cbranch(condition, ok, self.fallback)
        self.builder.position_at_end(ok)

    def field(self, obj: ir.Value, offset: int, field_type: ir.Type) -> ir.Value:
        b = self.builder
        address = b.gep(obj, [ir.Constant(_i64, offset)])
        return b.load(b.bitcast(address, field_type.as_pointer()))

    def type_is(self, obj: ir.Value, py_type: object, label: str) -> None:
        b = self.builder
        actual = self.field(obj, OB_TYPE, _i64)
        self.check(b.icmp_unsigned("==", actual, self.object_id(py_type)), label)

    def by_type(self, obj: ir.Value, cases: Sequence[tuple[type[Any], Callable[[], ir.Value]]],
                label: str) -> ir.Value:
        """The value ``read()`` gives for the first case whose type is exactly ``obj``'s
        (each may hand the call over in turn); the Python path if none is."""
        b = self.builder
        actual = self.field(obj, OB_TYPE, _i64)
        done = self.function.append_basic_block(f"{label}_read")
        incoming: list[tuple[ir.Value, ir.Block]] = []
        for n, (py_type, read) in enumerate(cases):
            match = self.function.append_basic_block(f"{label}_{n}")
            last = n == len(cases) - 1
            other = self.fallback if last else self.function.append_basic_block(
                f"{label}_not_{n}")
            b.cbranch(b.icmp_unsigned("==", actual, self.object_id(py_type)), match, other)
            b.position_at_end(match)
            incoming.append((read(), b.block))
            b.branch(done)
            if not last:
                b.position_at_end(other)
        b.position_at_end(done)
        value = b.phi(incoming[0][0].type)
        for v, block in incoming:
            value.add_incoming(v, block)
        return value

    def numpy_value(self, obj: ir.Value, scalar_type: type[Any]) -> ir.Value:
        """The value of a numpy scalar of ``scalar_type``: a double for a floating type,
        else an i64 (signed or zero-extended as the type is)."""
        dtype = np.dtype(scalar_type)
        if dtype.kind == "f":
            raw = self.field(obj, SCALAR_VALUE, _double if dtype.itemsize == 8 else _float)
            return raw if dtype.itemsize == 8 else self.builder.fpext(raw, _double)
        raw = self.field(obj, SCALAR_VALUE, ir.IntType(8 * dtype.itemsize))
        if dtype.itemsize == 8:
            return raw
        extend = self.builder.sext if dtype.kind == "i" else self.builder.zext
        return extend(raw, _i64)

    def scalar(self, obj: ir.Value, t: ScalarType, i: int) -> ir.Value:
        """The C value of argument ``i``: exact Python floats, ints and bools (an int
        for a float parameter where it is exactly representable), and numpy scalars of
        the types the Python path converts exactly as done here (anything else goes to
        the Python path)."""
        b = self.builder
        if t.kind == "float":
            # Converted as the Python path converts kernel arguments (see
            # pymlirjit.boundary.types.to_python_scalar, exact=True): a Python float rounds to f32
            # unless it overflows; a numpy scalar converts only where exact. Anything in
            # doubt goes to the Python path, which raises or converts.
            def read_float() -> ir.Value:
                value = b.call(self.api["PyFloat_AsDouble"], [obj])
                if t.bits == 32:  # |value| below f32's rounding boundary (or a NaN)
                    limit = ir.Constant(_double, float.fromhex("0x1.ffffffp127"))
                    self.check(b.and_(b.fcmp_unordered("<", value, limit),
                                      b.fcmp_unordered(">", value, b.fneg(limit))),
                               f"f32_range{i}")
                return value

            def read_numpy(scalar_type: type[Any]) -> Callable[[], ir.Value]:
                def read() -> ir.Value:
                    dtype = np.dtype(scalar_type)
                    value = self.numpy_value(obj, scalar_type)
                    if dtype.kind == "f":
                        if dtype.itemsize * 8 > t.bits:  # exact (or NaN) only
                            narrowed = b.fpext(b.fptrunc(value, _float), _double)
                            self.check(b.fcmp_unordered("==", narrowed, value), f"exact{i}")
                        return value
                    mantissa = 53 if t.bits == 64 else 24
                    if 8 * dtype.itemsize - (dtype.kind == "i") > mantissa:
                        self.check(self.int_is_exact(value, dtype.kind == "u", t.bits),
                                   f"exact{i}")
                    if dtype.kind == "u" and dtype.itemsize == 8:
                        return b.uitofp(value, _double)
                    return b.sitofp(value, _double)
                return read

            def read_int_as_float() -> ir.Value:  # exactly representable only
                overflow = b.alloca(_i32)
                number = b.call(self.api["PyLong_AsLongLongAndOverflow"], [obj, overflow])
                self.check(b.icmp_signed("==", b.load(overflow), ir.Constant(_i32, 0)),
                           f"fits{i}")
                self.check(self.int_is_exact(number, False, t.bits), f"exact{i}")
                return b.sitofp(number, _double)

            numpy_types: tuple[type[Any], ...] = (np.float64, np.float32, *_NUMPY_INTEGERS)
            value = self.by_type(obj, [(float, read_float), (int, read_int_as_float)] + [
                (st, read_numpy(st)) for st in numpy_types], f"float{i}")
            return b.fptrunc(value, ir.FloatType()) if t.bits == 32 else value
        if t.kind == "bool":
            address = b.ptrtoint(obj, _i64)
            is_true = b.or_(b.icmp_unsigned("==", address, self.object_id(True)),
                            b.icmp_unsigned("==", address, self.object_id(np.True_)))
            is_false = b.or_(b.icmp_unsigned("==", address, self.object_id(False)),
                             b.icmp_unsigned("==", address, self.object_id(np.False_)))
            self.check(b.or_(is_true, is_false), f"bool{i}")
            return b.zext(is_true, _i8)

        def read_int() -> ir.Value:
            overflow = b.alloca(_i32)
            value = b.call(self.api["PyLong_AsLongLongAndOverflow"], [obj, overflow])
            self.check(b.icmp_signed("==", b.load(overflow), ir.Constant(_i32, 0)),
                       f"fits{i}")
            return value

        def read_integer(scalar_type: type[Any]) -> Callable[[], ir.Value]:
            def read() -> ir.Value:
                value = self.numpy_value(obj, scalar_type)
                if scalar_type is np.uint64 and t.bits < 64:
                    # Above 2**63 its i64 is negative: in no smaller type's range.
                    self.check(b.icmp_signed(">=", value, ir.Constant(_i64, 0)),
                               f"unsigned{i}")
                return value
            return read

        value = self.by_type(obj, [(int, read_int)] + [
            (st, read_integer(st)) for st in _NUMPY_INTEGERS], f"int{i}")
        if t.bits < 64:
            low = ir.Constant(_i64, -(1 << (t.bits - 1)))
            high = ir.Constant(_i64, (1 << t.bits) - 1)
            in_range = b.and_(b.icmp_signed(">=", value, low), b.icmp_signed("<=", value, high))
            self.check(in_range, f"range{i}")
            return b.trunc(value, ir.IntType(t.bits))
        return value

    def complex_parts(self, obj: ir.Value, t: ScalarType, i: int) -> list[ir.Value]:
        """The C values (re, im) of a ``complex<f32>``/``complex<f64>`` argument ``i``,
        converted as the Python path converts them (exact=True): an exact Python
        ``complex`` or ``float`` rounds each part to f32 unless it overflows; numpy's
        complex scalars only where exact. Anything else goes to the Python path."""
        b = self.builder
        single = t.bits == 64
        pair = ir.LiteralStructType([_double, _double])

        def made(re: ir.Value, im: ir.Value) -> ir.Value:
            return b.insert_value(b.insert_value(ir.Constant(pair, None), re, 0), im, 1)

        def in_f32(value: ir.Value, label: str) -> None:
            if single:  # |value| below f32's rounding boundary, or infinite, or a NaN
                limit = ir.Constant(_double, _F32_LIMIT)
                infinity = ir.Constant(_double, float("inf"))
                within = b.and_(b.fcmp_unordered("<", value, limit),
                                b.fcmp_unordered(">", value, b.fneg(limit)))
                infinite = b.or_(b.fcmp_ordered("==", value, infinity),
                                 b.fcmp_ordered("==", value, b.fneg(infinity)))
                self.check(b.or_(within, infinite), label)

        def read_complex() -> ir.Value:
            re = self.field(obj, _COMPLEX_VALUE, _double)
            im = self.field(obj, _COMPLEX_VALUE + 8, _double)
            in_f32(re, f"re_range{i}")
            in_f32(im, f"im_range{i}")
            return made(re, im)

        def read_float() -> ir.Value:
            value = b.call(self.api["PyFloat_AsDouble"], [obj])
            in_f32(value, f"range{i}")
            return made(value, ir.Constant(_double, 0.0))

        def read_numpy(narrow: bool) -> Callable[[], ir.Value]:
            def read() -> ir.Value:
                part = _float if narrow else _double
                re, im = (self.field(obj, SCALAR_VALUE + n * (4 if narrow else 8), part)
                          for n in (0, 1))
                if narrow:
                    return made(b.fpext(re, _double), b.fpext(im, _double))
                if single:  # exact (or NaN) only
                    for n, value in enumerate((re, im)):
                        narrowed = b.fpext(b.fptrunc(value, _float), _double)
                        self.check(b.fcmp_unordered("==", narrowed, value), f"exact{i}_{n}")
                return made(re, im)
            return read

        value = self.by_type(obj, [(complex, read_complex), (float, read_float),
                                   (np.complex128, read_numpy(False)),
                                   (np.complex64, read_numpy(True))], f"complex{i}")
        parts = [b.extract_value(value, 0), b.extract_value(value, 1)]
        return [b.fptrunc(p, _float) for p in parts] if single else parts

    def half_bits(self, obj: ir.Value, t: ScalarType, i: int) -> ir.Value:
        """The bits (an i16) of an f16 or bf16 argument ``i``, converted as the Python path
        converts it (exact=True): an exact Python ``float`` rounds to nearest even, as
        numpy (ml_dtypes) does, unless a finite value overflows; an ``np.float16`` for
        f16 is taken as it is. Anything else goes to the Python path."""
        b = self.builder
        exponent_bits, mantissa_bits, payload = _BITS_LAYOUTS[t.mlir]
        infinity = ((1 << exponent_bits) - 1) << mantissa_bits
        short = ir.IntType(16)

        def read_float() -> ir.Value:
            value = b.call(self.api["PyFloat_AsDouble"], [obj])
            bits = _double_to_bits(b, value, exponent_bits, mantissa_bits, payload)
            overflowed = b.icmp_unsigned("==", b.and_(bits, ir.Constant(short, 0x7FFF)),
                                         ir.Constant(short, infinity))
            was_infinite = b.fcmp_ordered("==", b.call(self._fabs(), [value]),
                                          ir.Constant(_double, float("inf")))
            self.check(b.or_(b.not_(overflowed), was_infinite), f"half_range{i}")
            return bits

        cases: list[tuple[type[Any], Callable[[], ir.Value]]] = [(float, read_float)]
        if t.mlir == "f16":
            cases.append((np.float16, lambda: self.field(obj, SCALAR_VALUE, short)))
        return self.by_type(obj, cases, f"half{i}")

    def _fabs(self) -> ir.Function:
        module = self.function.module
        existing = module.globals.get("llvm.fabs.f64")
        if isinstance(existing, ir.Function):
            return existing
        return ir.Function(module, ir.FunctionType(_double, [_double]), "llvm.fabs.f64")

    def int_is_exact(self, value: ir.Value, unsigned: bool, bits: int) -> ir.Value:
        """Whether the i64 ``value`` (unsigned or signed) is exactly a float of ``bits``
        bits: converted there and back (saturating), it is unchanged."""
        b = self.builder
        target = _float if bits == 32 else _double
        suffix = f"{'u' if unsigned else 's'}.sat.i64.{'f32' if bits == 32 else 'f64'}"
        name = f"llvm.fpto{'u' if unsigned else 's'}i{suffix[1:]}"
        module = self.function.module
        back = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(_i64, [target]), name)
        converted = (b.uitofp if unsigned else b.sitofp)(value, target)
        # Rounded up to 2**64 (2**63), it saturates back to the largest integer: not exact.
        limit = ir.Constant(target, 2.0 ** (64 if unsigned else 63))
        return b.and_(b.fcmp_ordered("<", converted, limit),
                      b.icmp_unsigned("==", b.call(back, [converted]), value))
