"""Shared fixtures: a fresh Session per test, and the test data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlirjit import Session

DATA = Path(__file__).parent / "data"


@pytest.fixture
def session() -> Session:
    """A fresh session with its own callback registry and cache."""
    return Session()


@pytest.fixture
def data_dir() -> Path:
    return DATA
