"""numba-examples' histogram: bin edges and counts of a sample, checked against
``np.histogram``. The helpers are plain functions: ``@jit`` compiles them into the same
module as the kernel that calls them.

Run: ``python examples/jit_histogram.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import jit


def get_bin_edges(a, bins):
    bin_edges = np.zeros((bins + 1,), dtype=np.float64)
    a_min = a[0]
    a_max = a[0]
    for x in a:
        a_min = min(a_min, x)
        a_max = max(a_max, x)
    delta = (a_max - a_min) / bins
    for i in range(bin_edges.shape[0]):
        bin_edges[i] = a_min + i * delta
    bin_edges[-1] = a_max  # avoid roundoff error on the last point
    return bin_edges


def compute_bin(x, bin_edges):
    n = bin_edges.shape[0] - 1
    a_min = bin_edges[0]
    a_max = bin_edges[-1]
    if x == a_max:  # the right edge is in the last bin, as numpy's
        return n - 1
    bin = int(n * (x - a_min) / (a_max - a_min))
    if bin < 0 or bin >= n:
        return None
    else:
        return bin


@jit
def histogram(a, bins):
    hist = np.zeros((bins,), dtype=np.int64)
    bin_edges = get_bin_edges(a, bins)
    for x in a:
        bin = compute_bin(x, bin_edges)
        if bin is not None:
            hist[int(bin)] += 1
    return hist, bin_edges


def main() -> None:
    a = np.random.default_rng(1).normal(size=100_000)
    hist, edges = histogram(a, 20)
    want_hist, want_edges = np.histogram(a, 20)
    np.testing.assert_allclose(edges, want_edges, rtol=1e-12)
    assert np.abs(hist - want_hist).max() <= 1 and hist.sum() == a.size  # edge roundoff
    print("counts:", hist.tolist())
    print("OK")


if __name__ == "__main__":
    main()
