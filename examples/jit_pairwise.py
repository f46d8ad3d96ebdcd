"""Pairwise Euclidean distances (numba-examples' pairwise benchmark), checked against
numpy's broadcasting.

Run: ``python examples/jit_pairwise.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import jit


@jit
def pairwise(X, D):
    M, N = X.shape
    for i in range(M):
        for j in range(M):
            d = 0.0
            for k in range(N):
                tmp = X[i, k] - X[j, k]
                d += tmp * tmp
            D[i, j] = np.sqrt(d)


def main() -> None:
    X = np.random.default_rng(0).random((200, 3))
    D = np.empty((200, 200))
    pairwise(X, D)
    want = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(D, want, rtol=1e-12, atol=1e-12)
    X32 = X.astype(np.float32)  # another specialization: float32 all through
    D32 = np.empty((200, 200), np.float32)
    pairwise(X32, D32)
    np.testing.assert_allclose(D32, want, rtol=1e-5, atol=1e-5)
    print(f"{len(pairwise.signatures)} specializations; mean distance {D.mean():.4f}")
    print("OK")


if __name__ == "__main__":
    main()
