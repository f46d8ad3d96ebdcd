"""Conformance with mlir-runner on pymlirjit's own runner tests (tests/data/runner).

The files are mlir-runner tests in upstream's RUN-line format, written for pymlirjit.

Each RUN line runs three ways against the wheel's ``mlir-opt | mlir-runner`` as the
reference: ``pymlirjit run`` on the file mlir-opt lowered, on the original file with the
RUN line's passes as ``--pipeline``, and on the original file with the default pipeline.
Stdout must match the reference (addresses blanked) and pass the file's CHECK lines
(the wheel's FileCheck). Everything runs in subprocesses, as mlir-runner would.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import mlir
import pytest

RUNNER = Path(__file__).parent / "data" / "runner"
MLIR_ROOT = Path(mlir.__path__[0])
FILECHECK = Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                 "site-packages", "llvm", "bin", "FileCheck")
FAST = {"global-constructors.mlir", "bare-ptr-call-conv.mlir", "memref-copy-layouts.mlir",
        "vector-broadcast.mlir", "async-execute.mlir"}
WAYS = ("lowered", "passes", "default")


def run_lines(path: Path) -> list[str]:
    """The RUN commands of ``path``, continuation lines joined, substitutions made."""
    text, commands, current = path.read_text(), [], ""
    for line in text.splitlines():
        match = re.match(r"\s*// RUN:(.*)$", line)
        if not match:
            continue
        part = match.group(1).strip()
        current += " " + part.removesuffix("\\")
        if not part.endswith("\\"):
            commands.append(current.strip())
            current = ""
    lib = MLIR_ROOT / "lib"
    names = {"%mlir_c_runner_utils": "libmlir_c_runner_utils.so",
             "%mlir_runner_utils": "libmlir_runner_utils.so",
             "%mlir_async_runtime": "libmlir_async_runtime.so"}
    result = []
    for command in commands:
        for key, name in names.items():
            command = command.replace(key, str(lib / name))
        result.append(command.replace("%s", str(path)))
    return result


#: mlir-opt's test-only pipeline (mlir/test/lib/Dialect/LLVM/TestLowerToLLVM.cpp), which
#: the wheel's mlir-opt does not register, spelled as the passes it adds; with
#: convert-cf-to-llvm, since MLIR 22's convert-func-to-llvm no longer lowers cf.
TEST_LOWER_TO_LLVM = (
    "func.func(convert-vector-to-scf,convert-linalg-to-loops),lower-affine,convert-scf-to-cf,"
    "canonicalize,cse,convert-vector-to-llvm{OPTIONS},func.func(convert-math-to-llvm),"
    "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-func-to-llvm,"
    "convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts"
)


def _stages(command: str) -> tuple[list[list[str]], list[str], list[str]]:
    """(the arguments of each mlir-opt stage, of mlir-runner, of FileCheck) of a RUN command;
    mlir-cpu-runner is mlir-runner's former name."""
    opts: list[list[str]] = []
    runner: list[str] = []
    filecheck: list[str] = []
    for stage in command.split("|"):
        words = shlex.split(stage)
        if words and words[0] == "mlir-opt":
            opts.append(words[1:])
        elif words and words[0] in ("mlir-runner", "mlir-cpu-runner"):
            runner = words[1:]
        elif words and words[0] == "FileCheck":
            filecheck = words[1:]
    return opts, runner, filecheck


def _passes(opt: list[str]) -> str:
    """The passes of one mlir-opt stage as the inside of a ``builtin.module(...)``."""
    parts: list[str] = []
    for word in opt:
        if not word.startswith("-"):
            continue
        name, _, options = word.lstrip("-").partition("=")
        if name == "pass-pipeline":
            inner = options.strip()
            parts.append(inner.removeprefix("builtin.module(").removesuffix(")")
                         if inner.startswith("builtin.module(") else inner)
        elif name.startswith("test-lower-to-llvm"):
            flags = name.removeprefix("test-lower-to-llvm").strip("{}") or options
            parts.append(TEST_LOWER_TO_LLVM.replace("{OPTIONS}", f"{{{flags}}}" if flags else ""))
        else:
            parts.append(f"{name}{{{options}}}" if options else name)
    return ",".join(parts)


def _pipeline(opts: list[list[str]]) -> str | None:
    """Every mlir-opt stage's passes as one pipeline, in order."""
    passes = [p for p in (_passes(opt) for opt in opts) if p]
    return f"builtin.module({','.join(passes)})" if passes else None


def _blank(output: str) -> str:
    output = re.sub(r"Current thread id: \S+", "Current thread id: ?", output)
    return re.sub(r"0x[0-9a-f]+", "0x?", output)


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300,
                          env={**os.environ})


def _check(filecheck: list[str], output: str) -> subprocess.CompletedProcess[str]:
    return _run([str(FILECHECK), *filecheck], stdin=output)


def _cases() -> list[object]:
    cases = []
    for path in sorted(RUNNER.glob("*.mlir")):
        for i, _ in enumerate(run_lines(path)):
            for way in WAYS:
                marks = [] if path.name in FAST else [pytest.mark.slow]
                cases.append(pytest.param(path, i, way, marks=marks,
                                          id=f"{path.stem}-{i}-{way}"))
    return cases


@pytest.mark.parametrize(("path", "index", "way"), _cases())
def test_run_line(path: Path, index: int, way: str, tmp_path: Path,
                  request: pytest.FixtureRequest) -> None:
    if path.name not in FAST and "slow" not in (request.config.option.markexpr or ""):
        # pyproject's addopts does not deselect slow tests: opt in with -m slow.
        pytest.skip("slow conformance case: run with -m slow")
    opts, runner, filecheck = _stages(run_lines(path)[index])
    source = path
    for i, opt in enumerate(opts):
        # Each stage as one --pass-pipeline, so that test-only pipelines can be spelled out.
        lowered = _run([str(MLIR_ROOT / "bin" / "mlir-opt"), str(source),
                        f"--pass-pipeline=builtin.module({_passes(opt)})"])
        if lowered.returncode != 0:
            pytest.skip(f"the wheel's mlir-opt fails this RUN line: {lowered.stderr[:200]}")
        source = tmp_path / f"lowered{i}.mlir"
        source.write_text(lowered.stdout)
    runner_args = [a for a in runner if a != str(path)]
    reference = _run([str(MLIR_ROOT / "bin" / "mlir-runner"), str(source), *runner_args])
    if reference.returncode != 0:
        pytest.skip(f"the wheel's mlir-runner fails this RUN line: {reference.stderr[:200]}")
    ours_input = source if way == "lowered" else path
    extra: list[str] = []
    if way == "passes" and opts:
        pipeline = _pipeline(opts)
        assert pipeline is not None
        extra = ["--pipeline", pipeline]
    ours = _run([sys.executable, "-m", "pymlirjit", "run", str(ours_input), *runner_args,
                 *extra])
    assert ours.returncode == 0, ours.stderr
    assert _blank(ours.stdout) == _blank(reference.stdout)
    checked = _check(filecheck, ours.stdout)
    assert checked.returncode == 0, checked.stderr


def test_runner_files_are_ours_and_fast_cases_exist() -> None:
    """Every file says what it checks and has a RUN line; the default subset names files
    that exist (a renamed file would otherwise drop out of the default suite silently)."""
    paths = sorted(RUNNER.glob("*.mlir"))
    assert len(paths) >= 15
    for path in paths:
        assert path.read_text().startswith("// pymlirjit's own runner test: "), path.name
        assert run_lines(path), path.name
    assert FAST.issubset(path.name for path in paths)
