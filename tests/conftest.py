"""Shared fixtures: a fresh Session per test, and the test data folder."""

from __future__ import annotations

import os
from pathlib import Path

# OpenBLAS (numpy's BLAS) starts a worker thread per core when numpy is imported and
# joins it in a fork handler. The kernel may still count that thread for a moment after
# the join, so Python 3.12 sometimes warns that a forked process "is multi-threaded" on
# stderr (seen in CI). One BLAS thread in this process and every script the tests start
# leaves only pymlirjit's own threads for the tests that fork to check.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
# The tests compile their microkernels, in this process and in every script they start:
# none is loaded from what an earlier run kept on disk (tests/runtime/test_microkernelstore.py
# keeps them in folders of its own).
os.environ["PYMLIRJIT_MICROKERNEL_CACHE"] = "0"

import pytest

from pymlirjit import Session

DATA = Path(__file__).parent / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runner-dir", metavar="FOLDER", default=None,
                     help="run test_conformance.py on the mlir-runner tests under FOLDER "
                          "(such as a checkout of upstream's, never committed here) "
                          "instead of tests/data/runner")


def rss_bytes() -> int:
    """This process's resident memory, from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")  # pragma: no cover


@pytest.fixture
def session() -> Session:
    """A fresh session with its own callback registry and cache."""
    return Session()


@pytest.fixture
def data_dir() -> Path:
    return DATA


def skip_unless_ndarray_is_generic_with_defaults() -> None:
    """Skip a ``mypy --strict`` test where numpy's stubs give ``np.ndarray`` no default
    type arguments (numpy before 2.3, the newest Python 3.10 has): ``--strict`` rejects a
    bare ``np.ndarray`` there, and ``a *= 2`` on an ndarray subclass."""
    import numpy as np

    if np.lib.NumpyVersion(np.__version__) < "2.3.0":
        pytest.skip(f"numpy {np.__version__}'s stubs: a bare np.ndarray is an error under "
                    f"mypy --strict (the examples are typed for numpy 2.3 and later)")
