"""Conformance with mlir-runner on upstream's own runner tests (tests/data/upstream).

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

UPSTREAM = Path(__file__).parent / "data" / "upstream"
MLIR_ROOT = Path(mlir.__path__[0])
FILECHECK = Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                 "site-packages", "llvm", "bin", "FileCheck")
FAST = {"global-constructors.mlir", "bare-ptr-call-conv.mlir"}
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


def _stages(command: str) -> tuple[list[str], list[str]]:
    """(mlir-opt arguments or [], mlir-runner arguments) of a RUN command."""
    opt: list[str] = []
    runner: list[str] = []
    for stage in command.split("|"):
        words = shlex.split(stage)
        if words and words[0] == "mlir-opt":
            opt = words[1:]
        elif words and words[0] == "mlir-runner":
            runner = words[1:]
    return opt, runner


def _pipeline(opt: list[str]) -> str | None:
    for word in opt:
        if word.startswith("-pass-pipeline=") or word.startswith("--pass-pipeline="):
            return word.split("=", 1)[1]
    passes = [w.lstrip("-") for w in opt if w.startswith("-") and "=" not in w]
    return ",".join(passes) or None


def _blank(output: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x?", output)


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300,
                          env={**os.environ})


def _check(path: Path, output: str) -> subprocess.CompletedProcess[str]:
    return _run([str(FILECHECK), str(path)], stdin=output)


def _cases() -> list[object]:
    cases = []
    for path in sorted(UPSTREAM.glob("*.mlir")):
        for i, _ in enumerate(run_lines(path)):
            for way in WAYS:
                marks = [] if path.name in FAST else [pytest.mark.slow]
                cases.append(pytest.param(path, i, way, marks=marks,
                                          id=f"{path.stem}-{i}-{way}"))
    return cases


@pytest.mark.parametrize(("path", "index", "way"), _cases())
def test_run_line(path: Path, index: int, way: str, tmp_path: Path) -> None:
    opt, runner = _stages(run_lines(path)[index])
    source = path
    if opt:
        lowered = _run([str(MLIR_ROOT / "bin" / "mlir-opt"), str(path),
                        *(a for a in opt if a != str(path))])
        assert lowered.returncode == 0, lowered.stderr
        source = tmp_path / "lowered.mlir"
        source.write_text(lowered.stdout)
    runner_args = [a for a in runner if a != str(path)]
    reference = _run([str(MLIR_ROOT / "bin" / "mlir-runner"), str(source), *runner_args])
    if reference.returncode != 0:
        pytest.skip(f"the wheel's mlir-runner fails this RUN line: {reference.stderr[:200]}")
    ours_input = source if way == "lowered" else path
    extra: list[str] = []
    if way == "passes" and opt:
        pipeline = _pipeline(opt)
        assert pipeline is not None
        extra = ["--pipeline", pipeline]
    ours = _run([sys.executable, "-m", "pymlirjit", "run", str(ours_input), *runner_args,
                 *extra])
    assert ours.returncode == 0, ours.stderr
    assert _blank(ours.stdout) == _blank(reference.stdout)
    checked = _check(path, ours.stdout)
    assert checked.returncode == 0, checked.stderr
