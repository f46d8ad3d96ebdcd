"""Every script in examples/ runs to completion in a fresh interpreter and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pymlirjit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def example_env() -> dict[str, str]:
    """The examples import the pymlirjit under test (the repository's, as this process
    does), not whatever copy is installed: a non-editable install from an older tree, or
    an editable one of another work tree."""
    root = str(Path(pymlirjit.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def test_examples_exist() -> None:
    assert EXAMPLES, "examples/ holds no scripts"


def test_examples_import_the_package_under_test() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import os, pymlirjit; print(os.path.realpath(pymlirjit.__file__))"],
        cwd=ROOT / "examples", env=example_env(), capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == str(Path(pymlirjit.__file__).resolve()), result.stderr


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=example_env(),
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, (
        f"{script.name} exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    assert "OK" in result.stdout.splitlines()[-1:], result.stdout
