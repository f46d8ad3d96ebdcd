"""Random numbers in ``@jit`` code, as numba offers them: which functions of
``np.random`` and ``random`` compile, and their result types.

The generator is xoshiro256** (:mod:`.emit_random` writes it in MLIR), with one state
per thread kept natively (:mod:`pymlirjit.boundary.native.randomstate`), separate for
``np.random`` and ``random``, seeded independently of numpy's and Python's own global
generators: ``np.random.seed(n)`` inside a kernel seeds the calling thread's state only.

>>> result_type("np.randint", [Scalar("int", 64, True)])
weak int
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .jtypes import WEAK_FLOAT, WEAK_INT, JType, NoneT, Scalar

__all__ = ["STATE_SYMBOL", "functions", "result_type"]

#: The native function returning the calling thread's state (declared by the modules
#: that draw; pymlirjit.jit links it as an extern).
STATE_SYMBOL = "pymlirjit_random_state"

#: (arguments allowed, result) of each operation; ``np.*`` use the first four state
#: words, ``py.*`` the next four.
_SIGNATURES: dict[str, tuple[tuple[int, int], str]] = {
    "np.random": ((0, 0), "float"), "np.uniform": ((0, 2), "float"),
    "np.normal": ((0, 2), "float"), "np.randint": ((1, 2), "int"), "np.seed": ((1, 1), "none"),
    "py.random": ((0, 0), "float"), "py.uniform": ((2, 2), "float"),
    "py.normal": ((0, 2), "float"), "py.randint": ((2, 2), "int"), "py.seed": ((1, 1), "none"),
}


def functions() -> list[tuple[Any, str]]:
    """The callables compiled, with their operation (for :mod:`.intrinsics`)."""
    r = np.random
    return [(r.random, "np.random"), (r.random_sample, "np.random"), (r.rand, "np.random"),
            (r.uniform, "np.uniform"), (r.normal, "np.normal"),
            (r.standard_normal, "np.normal"), (r.randn, "np.normal"),
            (r.randint, "np.randint"), (r.seed, "np.seed"),
            (random.random, "py.random"), (random.uniform, "py.uniform"),
            (random.gauss, "py.normal"), (random.normalvariate, "py.normal"),
            (random.randint, "py.randint"), (random.seed, "py.seed")]


def result_type(op: str, args: list[JType]) -> JType | str:
    """The result of a draw (a str: why the call is wrong)."""
    (least, most), result = _SIGNATURES[op]
    if not least <= len(args) <= most:
        count = f"{least} argument" + ("" if least == 1 else "s") if least == most else \
            f"{least} to {most} arguments"
        if op == "np.random" or (op == "np.normal" and len(args) > 2):
            return f"takes {count} here (size= is not supported: fill an array in a loop)"
        return f"takes {count} here"
    for a in args:
        if not isinstance(a, Scalar) or a.kind == "complex":
            return f"takes real numbers, got {a}"
        if result in ("int", "none") and not (a.is_int or a.kind == "bool"):
            return f"takes integers, got {a}"
    if result == "none":
        return NoneT()
    return WEAK_FLOAT if result == "float" else WEAK_INT
