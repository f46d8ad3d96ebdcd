"""Every ```python block in README.md and docs/*.md runs without raising.

The blocks of one file run in order in one namespace (later blocks may use what earlier
ones defined), each file in its own fresh interpreter; a test per block reports which
block failed. Use ```text or ```bash fences for snippets that are not meant to run.

A block right after an HTML comment ``<!-- xfail: reason -->`` documents behaviour the
package does not have yet (a known bug): it is expected to raise (strict xfail), and a
failure there does not stop the blocks after it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import skip_unless_ndarray_is_generic_with_defaults

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"(?:<!--\s*xfail:\s*(?P<reason>.*?)\s*-->[ \t]*\n)?"
    r"^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

# Runs the blocks of one file cumulatively; prints, as JSON on the last line of stdout,
# the traceback of each block that raised (None for those that ran), stopping at the
# first failure of a block not marked xfail.
RUNNER = r"""
import json, linecache, sys, traceback
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
errors = []
for label, code, xfail in blocks:
    # Its source where inspect finds it, as a notebook's cells (@jit reads functions' source).
    linecache.cache[label] = (len(code), None, code.splitlines(True), label)
    try:
        exec(compile(code, label, "exec"), namespace)
        errors.append(None)
    except BaseException:
        errors.append(traceback.format_exc())
        if not xfail:
            break
sys.stdout.flush()
print("\n" + json.dumps(errors))
"""


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    xfail: str | None


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of ``path``, with their first line and xfail reason."""
    text = path.read_text()
    return [Block(text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("reason"))
            for m in FENCE.finditer(text)]


@cache
def run_file(path: Path) -> tuple[str | None, ...]:
    """Run the python blocks of ``path`` in one fresh interpreter: one entry per block
    that ran, None if it ran cleanly, else its traceback."""
    blocks = [(f"{path.name}:line {b.line}", "\n" * (b.line - 1) + b.code, b.xfail is not None)
              for b in python_blocks(path)]
    result = subprocess.run(
        [sys.executable, "-c", RUNNER], input=json.dumps(blocks), cwd=ROOT,
        capture_output=True, text=True, timeout=300,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        crash = (f"the interpreter exited with {result.returncode}\n"
                 f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}")
        return (crash,)
    return tuple(json.loads(lines[-1]))


CASES = [(path, i) for path in DOC_FILES for i in range(len(python_blocks(path)))]


def test_docs_found() -> None:
    assert (ROOT / "README.md") in DOC_FILES and len(DOC_FILES) > 1
    assert CASES, "no ```python block found in README.md or docs/"


@pytest.mark.parametrize("path, index", CASES,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i in CASES])
def test_doc_block_runs(path: Path, index: int) -> None:
    block = python_blocks(path)[index]
    errors = run_file(path)
    where = f"{path.name} block #{index} (line {block.line})"
    if index >= len(errors):
        pytest.fail(f"{where} did not run: block #{len(errors) - 1} failed before it:\n"
                    f"{errors[-1]}")
    error = errors[index]
    if block.xfail is not None:
        if error is None:
            pytest.fail(f"{where} is marked xfail ({block.xfail}) but ran cleanly: "
                        f"remove the mark")
        pytest.xfail(block.xfail)
    if error is not None:
        pytest.fail(f"{where} raised:\n{error}")


# -- links ----------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
# An absolute local path in prose or a code span (a link to a file on one machine).
LOCAL_PATH = re.compile(r"(?<![\w.:/])/(?:work|home|tmp|Users|root)/[\w./-]+")


CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.MULTILINE | re.DOTALL)


def _links(path: Path) -> list[tuple[int, str]]:
    # Code is blanked out (keeping its newlines, for line numbers): `f(a)[i](x)` is no link.
    text = CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), path.read_text())
    return [(text.count("\n", 0, m.start()) + 1, m.group("target")) for m in LINK.finditer(text)]


@pytest.mark.parametrize("path", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_relative_links_resolve_to_files_in_the_repository(path: Path) -> None:
    broken = []
    for line, target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor in the same file
        file_part = target.split("#", 1)[0]
        resolved = (path.parent / file_part).resolve()
        if target.startswith("/") or not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"line {line}: {target}")
    assert not broken, f"{path.name}: links to no file of the repository: {broken}"


@pytest.mark.parametrize("path", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_no_absolute_local_path_outside_examples_of_output(path: Path) -> None:
    # Sample output may show a user's folder (/home/me/...); nothing may point at a file
    # of the machine the docs were written on.
    found = [(path.read_text().count("\n", 0, m.start()) + 1, m.group())
             for m in LOCAL_PATH.finditer(path.read_text())
             if not m.group().startswith("/home/me/")]
    assert not found, f"{path.name}: absolute local paths: {found}"


# -- mypy --strict on the examples that claim to be typed -----------------------------------

#: The pages whose python blocks pass ``mypy --strict`` as written (the README, the pages
#: a new user starts from, and the cookbook, which says so).
TYPED_DOCS = [ROOT / "README.md", ROOT / "docs" / "index.md",
              ROOT / "docs" / "getting-started.md", ROOT / "docs" / "cookbook.md"]


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """``mypy --strict``'s errors for each typed page: its blocks, in order, make one
    module whose lines are the page's (so errors carry the page's line numbers)."""
    pytest.importorskip("mypy")
    skip_unless_ndarray_is_generic_with_defaults()
    tmp = tmp_path_factory.mktemp("mypy-docs")
    return _mypy_errors(tmp)


def _mypy_errors(tmp: Path) -> dict[str, list[str]]:
    modules = {}
    for path in TYPED_DOCS:
        lines: list[str] = []
        for block in python_blocks(path):
            lines += [""] * (block.line - 1 - len(lines))
            lines += block.code.splitlines()
        module = "doc_" + re.sub(r"\W", "_", path.stem.lower())
        (tmp / f"{module}.py").write_text("\n".join(lines) + "\n")
        modules[module] = path.name
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.10",
         "--cache-dir", str(tmp / ".mypy_cache"), *(f"{m}.py" for m in modules)],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    errors: dict[str, list[str]] = {name: [] for name in modules.values()}
    for line in result.stdout.splitlines():
        module, _, rest = line.partition(".py:")
        if module in modules and ": error:" in rest:
            errors[modules[module]].append(f"{modules[module]}:{rest}")
    if result.returncode not in (0, 1) or (result.returncode == 1 and not any(errors.values())):
        pytest.fail(f"mypy did not run: {result.stdout}\n{result.stderr}")
    return errors


@pytest.mark.parametrize("path", TYPED_DOCS, ids=[p.name for p in TYPED_DOCS])
def test_typed_examples_pass_mypy_strict(path: Path, mypy_errors: dict[str, list[str]]) -> None:
    assert not mypy_errors[path.name], "\n".join(mypy_errors[path.name])


SIGNATURE_LINES = [("docs/kernels.md", "mlir_kernel(", "mlir_kernel"),
                   ("docs/sessions.md", "Session(", "Session"),
                   ("docs/sessions.md", "Session.compile(", "Session.compile"),
                   ("docs/callbacks.md", "@callback(", "callback"),
                   ("docs/ufuncs.md", "mlir_ufunc(", "mlir_ufunc")]


@pytest.mark.parametrize(("page", "start", "name"), SIGNATURE_LINES,
                         ids=[line[2] for line in SIGNATURE_LINES])
def test_signature_lines_list_every_option(page: str, start: str, name: str) -> None:
    import inspect
    import re

    import pymlirjit

    target = pymlirjit
    for part in name.split("."):
        target = getattr(target, part)
    text = (ROOT / page).read_text()
    at = end = text.index("\n" + start) + len(start)
    depth = 1
    while depth:  # to the parenthesis closing the signature
        end += 1
        depth += {"(": 1, ")": -1}.get(text[end], 0)
    line = text[at + 1:end + 1]
    documented = set(re.findall(r"(\w+)\s*[=,)]", line))
    wanted = [p for p in inspect.signature(target).parameters
              if p not in ("self", "function")]
    missing = [p for p in wanted if p not in documented]
    assert not missing, f"{page}: the signature line of {name} lacks {missing}"
