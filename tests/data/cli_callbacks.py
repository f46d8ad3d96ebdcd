"""Python externs for the CLI tests: `pymlirjit run ... --callbacks cli_callbacks.py`."""

from __future__ import annotations

from pymlirjit import callback, f32, f64, i32


@callback
def cli_scale(x: f32, k: i32) -> f32:
    """x / 2 + k / 2, as in the design's seed example."""
    return x / 2 + k / 2


@callback
def cli_fail(x: f64) -> f64:
    """Always raises: the CLI must report it as one clean error line."""
    raise ValueError(f"cli_fail refuses {x}")
