"""What a non-editable install (`pip install '.[test]'`, as CI does) ships: every folder
of the package, since pyproject.toml lists them by name and a folder missing from the list
installs without it (tests run from the repository still pass; anything importing the
installed copy, as child processes outside the repository do, fails)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listed_packages() -> list[str]:
    # No tomllib on Python 3.10: the one list, read as a Python literal.
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r"^packages = (\[.*?\])", text, re.MULTILINE | re.DOTALL)
    assert found is not None, "pyproject.toml lists no packages under [tool.setuptools]"
    packages = ast.literal_eval(found.group(1))
    assert isinstance(packages, list)
    return packages


def test_every_folder_of_the_package_is_listed_and_a_package() -> None:
    folders = sorted(path.parent for path in (ROOT / "pymlirjit").rglob("*.py")
                     if "__pycache__" not in path.parts)
    names = sorted({".".join(folder.relative_to(ROOT).parts) for folder in folders})
    assert sorted(listed_packages()) == names
    assert [n for n in names if not (ROOT / n.replace(".", "/") / "__init__.py").exists()] == []
