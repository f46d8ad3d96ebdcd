"""The package's layout (docs/architecture.md): imports flow one way, lazy ones included,
and no module grows past what one reader holds in mind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pymlirjit"

#: From the ground up: a module imports only modules of its own floor or below.
FLOORS: list[set[str]] = [
    {"errors", "typeparser", "types", "_version", "ffi", "callframe", "vectorcall", "pickling",
     "stderrcapture"},
    {"typing", "signature", "pipeline", "optimize", "linalg_schedules", "linalg_rewrites",
     "microkernels",
     "linalg_tensors",
     "convert", "memref", "abi", "relocation",
     "privatefiles", "llvmir", "llvmoptions", "sourcelines", "vectormath", "inlinemath",
     "checks", "options",
     "scheduling", "parallel", "transformscripts", "passguards", "loweringchecks", "packlowering",
     "deepinput",
     "subbyte",
     "vectorscan",
     "cprototype", "ufunc_loops",
     "failures", "aliases",
     "frontend", "frontend.source", "frontend.syntax", "frontend.defined", "frontend.resolve",
     "frontend.jtypes", "frontend.intrinsics", "frontend.infer", "frontend.calls",
     "frontend.emit", "frontend.emit_base", "frontend.emit_ops", "frontend.emit_arrays",
     "frontend.emit_loops", "frontend.emit_calls", "frontend.emit_parallel",
     "frontend.diagnostics", "frontend.program", "frontend.infer_calls", "frontend.host",
     "frontend.arguments", "frontend.ownership", "frontend.infer_arrays",
     "frontend.emit_elementwise"},
    {"native", "native.batch", "native.builder", "native.entry", "native.guard",
     "native.halffloat", "native.results", "native.trampoline", "native.allocations",
     "native.unwindarea", "native.wrapper", "native.trackedcalls"},
    {"engine", "asyncruntime", "objectfile", "sharedlib"},
    {"cache"},
    {"callbacks", "function", "prepare", "module", "externs"},
    {"session", "generic"},
    {"kernel", "ufunc", "jit"},
    {"cli", "cli_values", "cli_loading", "cli_check", "demo"},
    {"__init__", "__main__"},
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}
MAX_LINES = 500


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


def test_every_module_has_a_floor() -> None:
    unplaced = sorted(set(_modules()) - set(FLOOR))
    assert not unplaced, f"modules on no floor of FLOORS (and of docs/architecture.md): {unplaced}"


def test_imports_flow_down_only() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for imported in _imports(name, path, set(modules)):
            if FLOOR.get(imported, 99) > FLOOR.get(name, -1):
                upward.append(f"{name} (floor {FLOOR.get(name)}) imports {imported} "
                              f"(floor {FLOOR.get(imported)})")
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
    imported = _imports("engine", modules["engine"], set(modules))
    assert not imported & {"callbacks", "session", "kernel", "function", "module"}, imported


def test_modules_stay_small() -> None:
    large = {name: n for name, path in _modules().items()
             if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not large, f"modules over {MAX_LINES} lines: {large}"


def test_every_subpackage_is_installed() -> None:
    # setuptools installs only the packages pyproject.toml lists: a subpackage missing
    # there works from a checkout and fails once installed.
    listed = re.search(r"^packages = \[(.*?)\]", (PACKAGE.parent / "pyproject.toml").read_text(),
                       re.MULTILINE)
    assert listed is not None
    packages = set(re.findall(r'"([\w.]+)"', listed.group(1)))
    found = {".".join(path.parent.relative_to(PACKAGE.parent).parts)
             for path in PACKAGE.rglob("__init__.py")}
    assert found == packages, f"pyproject.toml lists {sorted(packages)}; the tree has {found}"


def test_every_module_is_named_in_the_architecture_page() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    diagram = page.split("```text", 1)[1].split("```", 1)[0]
    words = set(re.findall(r"[\w.]+", diagram))
    unnamed = [name for name in FLOOR if name not in words and name.split(".")[-1] not in words]
    assert not unnamed, f"docs/architecture.md's floors do not name {unnamed}"
