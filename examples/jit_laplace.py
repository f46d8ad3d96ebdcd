"""Jacobi iterations of Laplace's equation on a grid (numba's Laplace example), with the
two grids swapped each sweep (``u, v = v, u``: the loop carries both arrays).

Run: ``python examples/jit_laplace.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import jit


@jit(fastmath=True)
def jacobi(u, v, sweeps):
    n, m = u.shape
    for _ in range(sweeps):
        for i in range(1, n - 1):
            for j in range(1, m - 1):
                v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        u, v = v, u
    delta = 0.0
    for i in range(n):
        for j in range(m):
            delta = max(delta, abs(u[i, j] - v[i, j]))
    return u, delta


def reference(u: np.ndarray, v: np.ndarray, sweeps: int) -> np.ndarray:
    for _ in range(sweeps):
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u, v = v, u
    return u


def main() -> None:
    grid = np.zeros((40, 40))
    grid[0, :] = 1.0  # a hot edge
    u, delta = jacobi(grid.copy(), grid.copy(), 500)
    want = reference(grid.copy(), grid.copy(), 500)
    np.testing.assert_allclose(u, want, rtol=1e-12, atol=1e-12)
    assert 0 < delta < 1e-3, delta
    print(f"centre temperature {u[20, 20]:.4f}, last change {delta:.2e}")
    print("OK")


if __name__ == "__main__":
    main()
