"""Shared fixtures: a fresh Session per test, and the test data folder."""

from __future__ import annotations

from pathlib import Path

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
