"""CPython's ZeroDivisionError messages, read from the running interpreter: they differ
between versions (``1 % 0`` says "integer division or modulo by zero" on 3.10 and
"integer modulo by zero" from 3.11; ``1.0 % 0.0`` says "float modulo" before 3.13 and
"float modulo by zero" from it), and a compiled kernel says what its Python would."""

from __future__ import annotations

import ast
from collections.abc import Callable

__all__ = ["COMPLEX_DIVISION", "FLOAT_BY_OPERATOR", "INT_DIVISION", "INT_MODULO"]


def _python_says(divide: Callable[[], object]) -> str:
    try:
        divide()
    except ZeroDivisionError as error:
        return str(error)
    raise AssertionError("a division by zero did not raise")  # pragma: no cover


_zero, _float_zero = 0, 0.0  # names, so that no constant folding sees the division

#: ``a / b`` of two ints.
INT_DIVISION = _python_says(lambda: 1 / _zero)
#: ``a % b`` of two ints.
INT_MODULO = _python_says(lambda: 1 % _zero)
#: ``a / b`` with a complex operand.
COMPLEX_DIVISION = _python_says(lambda: 1j / _zero)
#: A float ``/``, ``//`` or ``%`` by zero, by operator.
FLOAT_BY_OPERATOR: dict[type[ast.operator], str] = {
    ast.Div: _python_says(lambda: 1.0 / _float_zero),
    ast.FloorDiv: _python_says(lambda: 1.0 // _float_zero),
    ast.Mod: _python_says(lambda: 1.0 % _float_zero),
}
