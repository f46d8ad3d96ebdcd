"""The type aliases of generic kernels: how calls bind them, and the exact argument types
a binding's native entry takes (pure Python: tests/test_generic.py runs the entries)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from pymlirjit.boundary.aliases import Binder, ExactTypes

PAIR = "func.func @pair(%a: !T, %b: complex<!T>, %n: i32) -> !T"
MIXED = "func.func @mixed(%x: memref<?x!E>, %e: !E, %k: !K, %j: !K) -> !E"

# A value of every scalar type whose instances bind by type alone, and some that bind
# nothing (np.uint8, a str, an int subclass counts as int).
VALUES: list[Any] = [True, 3, 2.5, 1j, np.bool_(False), np.int8(1), np.int32(1),
                     np.int64(1), np.uint8(1), np.float16(1), np.float32(1), np.float64(1),
                     np.complex64(1), np.complex128(1), "s"]


def takes(exact: ExactTypes, types: tuple[type, ...]) -> bool:
    """What an entry built with ``exact`` decides for arguments of these exact types."""
    def holds(allowed: Any, required: Any) -> bool:
        return (all(types[p] in ts for p, ts in allowed)
                and (not required or any(types[p] in ts for p, ts in required)))
    return all(any(holds(*route) for route in group) for group in exact)


def outcome(binder: Binder, args: tuple[Any, ...]) -> dict[str, str] | None:
    try:
        return binder.bind(args, {})
    except TypeError:
        return None


@pytest.mark.parametrize("text, name, arity", [(PAIR, "pair", 3), (MIXED, "mixed", 4)])
def test_exact_types_take_the_calls_bind_gives_the_binding(text: str, name: str,
                                                           arity: int) -> None:
    binder = Binder(text, name, None)
    array = np.ones(2, np.float32)
    combos = [args for args in itertools.product(VALUES, repeat=arity)
              if name != "mixed" or args[0] is VALUES[0]]
    calls = [(array, *args[1:]) if name == "mixed" else args for args in combos]
    outcomes = [outcome(binder, args) for args in calls]
    bindings = {tuple(b.items()) for b in outcomes if b is not None}
    assert len(bindings) > 3
    for key in bindings:
        exact = binder.exact_types(dict(key))
        assert exact is not None
        for args, bound in zip(calls, outcomes):
            types = tuple(type(a) for a in args)
            assert takes(exact, types) == (bound == dict(key)), (dict(key), types)


def test_nothing_to_test_and_nothing_to_take() -> None:
    axpy = Binder("func.func @axpy(%a: !T, %x: memref<?x!T>, %y: memref<?x!T>)", "axpy",
                  ["a", "x", "y"])
    assert axpy.exact_types({"T": "f32"}) == ()  # the array decides: the entry checks dtypes
    assert axpy.arrays == [1, 2]
    pair = Binder(PAIR, "pair", None)
    assert pair.exact_types({"T": "bf16"}) is None  # no scalar binds bf16
    unbound = Binder("func.func @f(%a: i32) -> !T", "f", None)
    assert unbound.aliases == ("T",) and unbound.exact_types({"T": "f32"}) is None
    with pytest.raises(TypeError, match="no argument binds !T"):
        unbound.bind((1,), {})
