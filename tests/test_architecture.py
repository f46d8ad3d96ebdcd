"""The package's layout (docs/architecture.md): imports flow one way, lazy ones included,
and no module grows past what one reader holds in mind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pymlirjit"

#: The folders from the ground up (docs/architecture.md): a module imports only modules of
#: its own folder or of a folder below. The ground modules import no pymlirjit module; the
#: public modules are the package's own files (the decorators, the session, ...).
GROUND = {"errors", "_version"}
FOLDERS = ["ground", "boundary", "lowering", "codegen", "runtime", "frontend", "public", "cli",
           "roof"]
ROOF = {"__init__", "__main__"}
MAX_LINES = 500


def folder_of(name: str) -> str:
    if name in GROUND:
        return "ground"
    if name in ROOF:
        return "roof"
    head = name.split(".")[0]
    return head if head in FOLDERS else "public"


def level(name: str) -> int:
    return FOLDERS.index(folder_of(name))


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every pymlirjit module ``name`` imports, at the top or inside a function."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            module = ".".join([*base, *([node.module] if node.module else [])])
            candidates = [module] if node.module else []
            candidates += [f"{module}.{alias.name}".lstrip(".") for alias in node.names]
            for candidate in candidates:
                if candidate in known:
                    found.add(candidate)
            if not node.module and not any(c in known for c in candidates):
                found.add("__init__")  # `from . import x` of a name of the package root
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pymlirjit"):
            found.add(node.module.removeprefix("pymlirjit").lstrip(".") or "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pymlirjit"):
                    found.add(alias.name.removeprefix("pymlirjit").lstrip(".") or "__init__")
    found.discard(name)
    return found


def test_every_folder_is_known() -> None:
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders <= set(FOLDERS), f"folders missing from FOLDERS: {folders - set(FOLDERS)}"


def test_ground_modules_import_nothing_of_the_package() -> None:
    modules = _modules()
    for name in GROUND:
        assert not _imports(name, modules[name], set(modules)), name


def test_imports_flow_down_only() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for imported in _imports(name, path, set(modules)):
            if level(imported) > level(name):
                upward.append(f"{name} ({folder_of(name)}/) imports {imported} "
                              f"({folder_of(imported)}/)")
    assert not upward, "\n".join(upward)


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = [*trail[trail.index(name):], name]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        state[name] = 1
        for imported in sorted(graph.get(name, ())):
            visit(imported, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        visit(name, [])


def test_engine_depends_on_no_decorator_session_or_kernel_module() -> None:
    modules = _modules()
    imported = _imports("runtime.engine", modules["runtime.engine"], set(modules))
    assert not imported & {"callbacks", "session", "kernel", "runtime.function",
                           "runtime.module"}, imported


def test_modules_stay_small() -> None:
    large = {name: n for name, path in _modules().items()
             if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not large, f"modules over {MAX_LINES} lines: {large}"


def test_every_subpackage_is_installed() -> None:
    # setuptools installs only the packages pyproject.toml lists: a subpackage missing
    # there works from a checkout and fails once installed.
    listed = re.search(r"^packages = \[(.*?)\]", (PACKAGE.parent / "pyproject.toml").read_text(),
                       re.MULTILINE | re.DOTALL)
    assert listed is not None
    packages = set(re.findall(r'"([\w.]+)"', listed.group(1)))
    found = {".".join(path.parent.relative_to(PACKAGE.parent).parts)
             for path in PACKAGE.rglob("__init__.py")}
    assert found == packages, f"pyproject.toml lists {sorted(packages)}; the tree has {found}"


def test_every_module_is_named_in_the_architecture_page() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    diagram = page.split("```text", 1)[1].split("```", 1)[0]
    words = set(re.findall(r"[\w.]+", diagram))
    unnamed = [name for name in _modules() if name not in words
               and name.split(".")[-1] not in words and name.split(".")[-1] + ".py" not in words]
    assert not unnamed, f"docs/architecture.md's diagram does not name {unnamed}"
