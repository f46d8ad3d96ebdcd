"""The seed round trip: compiled MLIR calls a type-annotated Python function.

``@callback`` turns ``scale`` into the runtime symbol ``@scale`` with the MLIR signature
``(f32, i32) -> f32`` read from its annotations; ``@mlir_kernel`` compiles ``@add``
(on first call) and links its ``func.func private @scale`` declaration to the callback.

Run: ``python examples/seed_round_trip.py``
"""

from __future__ import annotations

from pymlirjit import callback, f32, i32, mlir_kernel

calls: list[tuple[float, int]] = []


@callback
def scale(x: f32, k: i32) -> f32:
    """Called from compiled code with an f32 and an i32; returns an f32."""
    calls.append((x, k))
    return x / 2 + k / 2


@mlir_kernel(source="""
func.func @add(%a: f32, %b: i32) -> f32 {
  %r = call @scale(%a, %b) : (f32, i32) -> f32
  return %r : f32
}
func.func private @scale(f32, i32) -> f32
""")
def add(a: f32, b: i32) -> f32: ...


def main() -> None:
    print(f"callback: {scale!r}")
    print("calling the MLIR function @add(42.0, 2), which calls back into Python @scale ...")
    result = add(42.0, 2)
    print(f"add(42.0, 2) = {result!r}; Python saw the arguments {calls}")
    assert result == 22.0, result
    assert calls == [(42.0, 2)], calls
    assert isinstance(result, float)

    # The callback is still an ordinary Python function.
    assert scale(42.0, 2) == 22.0
    print(f"kernel signature: {add.signature}")
    print("OK")


if __name__ == "__main__":
    main()
