"""The Monte Carlo estimate of pi from numba's front page, drawing its random numbers
through a Python callback: ``draw`` is a plain annotated function, which ``@jit`` calls
as a typed callback (it uses Python's ``random`` module, which is not compiled).

Run: ``python examples/jit_monte_carlo.py``
"""

from __future__ import annotations

import math
import random

from pymlirjit import jit

rng = random.Random()


def draw() -> float:
    """One uniform number in [0, 1), from Python (called from the compiled loop)."""
    return rng.random()


@jit
def monte_carlo_pi(nsamples):
    acc = 0
    for _ in range(nsamples):
        x = draw()
        y = draw()
        if (x ** 2 + y ** 2) < 1.0:
            acc += 1
    return 4.0 * acc / nsamples


def main() -> None:
    rng.seed(2026)
    estimate = monte_carlo_pi(200_000)
    rng.seed(2026)
    assert estimate == monte_carlo_pi.py_func(200_000)  # the same draws, the same answer
    assert abs(estimate - math.pi) < 0.02, estimate
    print(f"pi ~ {estimate:.5f} from 200000 samples")
    print("OK")


if __name__ == "__main__":
    main()
