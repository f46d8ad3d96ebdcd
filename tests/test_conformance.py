"""Conformance with mlir-runner on pymlirjit's own runner tests (tests/data/runner).

The files are mlir-runner tests in upstream's RUN-line format, written for pymlirjit.

Each RUN line runs three ways against the wheel's ``mlir-opt | mlir-runner`` as the
reference: ``pymlirjit run`` on the file mlir-opt lowered, on the original file with the
RUN line's passes as ``--pipeline``, and on the original file with the default pipeline.
Stdout must match the reference (addresses blanked) and pass the file's CHECK lines
(the wheel's FileCheck). Everything runs in subprocesses, as mlir-runner would.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import mlir
import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).parent / "data" / "runner"
MLIR_ROOT = Path(mlir.__path__[0])
FILECHECK = Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                 "site-packages", "llvm", "bin", "FileCheck")
FAST = {"global-constructors.mlir", "bare-ptr-call-conv.mlir", "memref-copy-layouts.mlir",
        "vector-broadcast.mlir", "async-execute.mlir", "f8-arithmetic.mlir",
        "transform-schedule.mlir", "memref-realloc.mlir", "two-step-compile.mlir",
        "linalg-pack-unpack.mlir", "sparse-sort-memref.mlir"}
WAYS = ("lowered", "passes", "default")


#: lit substitutions of upstream's runner tests, as the wheel's files.
_SUBSTITUTIONS = {"%mlir_c_runner_utils": "libmlir_c_runner_utils.so",
                  "%mlir_runner_utils": "libmlir_runner_utils.so",
                  "%mlir_async_runtime": "libmlir_async_runtime.so",
                  "%mlir_float16_utils": "libmlir_float16_utils.so",
                  "%mlir_apfloat_wrappers": "libmlir_apfloat_wrappers.so"}


def _substitute(command: str, path: Path, defines: dict[str, str],
                workdir: Path | None) -> str:
    for _ in range(5):  # a definition may use another one
        for key, value in defines.items():
            command = command.replace(key, value)
    if workdir is not None:
        # lit's temporary names: %t a file, %T a directory, both in the case's workdir.
        tmp = workdir / f"{path.name}.tmp"
        command = command.replace("%basename_t", tmp.name).replace("%t", str(tmp))
        command = command.replace("%T", str(workdir))
    command = command.replace("%S", str(path.parent)).replace("%p", str(path.parent))
    lib = MLIR_ROOT / "lib"
    for key, name in _SUBSTITUTIONS.items():
        command = command.replace(key, str(lib / name))
    for key in ("%mlir_lib_dir", "%mlir_integration_test_dir"):
        command = command.replace(key, str(lib))
    command = command.replace("%shlibext", ".so")
    # Input data (upstream's mlir/test/Integration/data, named by %mlir_src_dir/test/...):
    # the copy's folder that holds Integration/ stands for mlir/test.
    test_root = next((p.parent for p in path.parents if p.name == "Integration"), None)
    if test_root is not None:
        command = command.replace("%mlir_src_dir/test", str(test_root))
    # lit conditionals (%if target=... %{ ... %}) hold options of other targets only.
    command = re.sub(r"%if\s+\S+\s+%\{.*?%\}", "", command).replace("2>&1", "")
    return command.replace("%s", str(path))


def run_lines(path: Path, workdir: Path | None = None) -> list[str]:
    """The RUN commands of ``path``, continuation lines joined, substitutions made
    (lit's ``DEFINE:``/``REDEFINE:`` ones too, in file order); ``%t`` and ``%T`` name
    paths in ``workdir`` (without one they stay as written)."""
    commands: list[str] = []
    defines: dict[str, str] = {}
    kind, current = "", ""
    for line in path.read_text().splitlines():
        match = re.match(r"\s*// (RUN|DEFINE|REDEFINE):(.*)$", line)
        if not match:
            continue
        kind = kind or match.group(1)
        part = match.group(2).strip()
        current += " " + part.removesuffix("\\")
        if part.endswith("\\"):
            continue
        if kind == "RUN":
            commands.append(_substitute(current.strip(), path, defines, workdir))
        else:
            name, _, value = current.partition("=")
            defines[name.strip()] = value.strip()
        kind, current = "", ""
    return commands


#: mlir-opt's test-only pipeline (mlir/test/lib/Dialect/LLVM/TestLowerToLLVM.cpp), which
#: the wheel's mlir-opt does not register, spelled as the passes it adds; with
#: convert-cf-to-llvm, since MLIR 22's convert-func-to-llvm no longer lowers cf, and
#: convert-ub-to-llvm, since MLIR 22's vector lowering makes ub.poison (without it the
#: reference fails, and such RUN lines were skipped instead of compared).
TEST_LOWER_TO_LLVM = (
    "func.func(convert-vector-to-scf,convert-linalg-to-loops),lower-affine,convert-scf-to-cf,"
    "canonicalize,cse,convert-vector-to-llvm{OPTIONS},func.func(convert-math-to-llvm),"
    "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-func-to-llvm,"
    "convert-cf-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,convert-ub-to-llvm,"
    "reconcile-unrealized-casts"
)


def _stages(command: str) -> tuple[list[list[str]], list[str], list[str]]:
    """(the arguments of each mlir-opt stage, of mlir-runner, of FileCheck) of a RUN command;
    mlir-cpu-runner is mlir-runner's former name."""
    opts: list[list[str]] = []
    runner: list[str] = []
    filecheck: list[str] = []
    for stage in command.split("|"):
        words = _without_env(shlex.split(stage))[1]
        if words and words[0] == "mlir-opt":
            opts.append(words[1:])
        elif words and words[0] in ("mlir-runner", "mlir-cpu-runner"):
            runner = words[1:]
        elif words and words[0] == "FileCheck":
            filecheck = words[1:]
    return opts, runner, filecheck


def _without_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the variables, the command) of a stage that may start with ``env NAME=VALUE...``
    (upstream's sparse tests run ``env %{env} mlir-runner ...``) or, as the shell allows,
    with bare ``NAME=VALUE`` words (older ones run ``TENSOR0=... mlir-cpu-runner ...``)."""
    variables: dict[str, str] = {}
    if words[:1] == ["env"]:
        words = words[1:]
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        variables[name] = value
    return variables, words


def _runner_env(command: str) -> dict[str, str]:
    """The variables ``env`` sets for the mlir-runner stage of ``command``."""
    for stage in command.split("|"):
        variables, words = _without_env(shlex.split(stage))
        if words[:1] in (["mlir-runner"], ["mlir-cpu-runner"]):
            return variables
    return {}


#: mlir-opt options that name no pass.
_NOT_PASSES = {"o", "split-input-file", "allow-unregistered-dialect", "verify-each"}
#: A test-only pass the wheel's mlir-opt lacks (TestTransformDialectExtension.cpp): it
#: erases the transform ops. For the reference it is done here between mlir-opt runs;
#: pymlirjit drops the transform script itself, so its pipeline leaves it out.
ERASE_SCHEDULE = "test-transform-dialect-erase-schedule"


def _erase_schedule(text: str) -> str:
    """``text`` without its transform ops, as ``-test-transform-dialect-erase-schedule``."""
    from mlir import ir

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name.startswith("transform."):
                found.append(op)
                return ir.WalkResult.SKIP
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        for op in found:
            op.erase()
        return str(module)


def _segments(opt: list[str]) -> list[list[str]]:
    """One mlir-opt stage's arguments, split where the schedule is erased."""
    segments: list[list[str]] = [[]]
    for word in opt:
        if word.lstrip("-") == ERASE_SCHEDULE:
            segments.append([])
        else:
            segments[-1].append(word)
    return segments
#: Passes of later MLIR than the wheel's, as MLIR 22 spells them: upstream split
#: convert-vector-to-llvm's vector-to-vector lowerings off after MLIR 22 and named the
#: plain conversion naive-convert-vector-to-llvm.
_RENAMED = {"naive-convert-vector-to-llvm": "convert-vector-to-llvm"}
_TEST_LOWER = re.compile(r"test-lower-to-llvm(?:\{([^}]*)\})?")


def _test_lower_to_llvm(match: re.Match[str]) -> str:
    flags = match.group(1)
    return TEST_LOWER_TO_LLVM.replace("{OPTIONS}", f"{{{flags}}}" if flags else "")


def _passes(opt: list[str]) -> str:
    """The passes of one mlir-opt stage as the inside of a ``builtin.module(...)``."""
    parts: list[str] = []
    for word in opt:
        if not word.startswith("-"):
            continue
        name, _, options = word.lstrip("-").partition("=")
        if name == "pass-pipeline":
            inner = options.strip()
            inner = (inner.removeprefix("builtin.module(").removesuffix(")")
                     if inner.startswith("builtin.module(") else inner)
            parts.append(_TEST_LOWER.sub(_test_lower_to_llvm, inner))
        elif name.startswith("test-lower-to-llvm"):
            flags = name.removeprefix("test-lower-to-llvm").strip("{}") or options
            parts.append(TEST_LOWER_TO_LLVM.replace("{OPTIONS}", f"{{{flags}}}" if flags else ""))
        elif name in _NOT_PASSES or name == ERASE_SCHEDULE or name.startswith("mlir-"):
            continue
        else:
            name = _RENAMED.get(name, name)
            spec = f"{name}{{{options}}}" if options else name
            parts.append(f"func.func({spec})" if _function_only(name) else spec)
    return ",".join(parts)


@functools.cache
def _function_only(name: str) -> bool:
    """Whether mlir-opt's pass ``name`` runs only on ``func.func``: its command line nests
    such a pass, a ``builtin.module(...)`` pipeline must say ``func.func(...)``."""
    tried = _run([str(MLIR_ROOT / "bin" / "mlir-opt"), "-",
                  f"--pass-pipeline=builtin.module({name})"], stdin="")
    return "restricted to 'func.func'" in tried.stderr


def _pipeline(opts: list[list[str]]) -> str | None:
    """Every mlir-opt stage's passes as one pipeline, in order."""
    passes = [p for p in (_passes(opt) for opt in opts) if p]
    return f"builtin.module({','.join(passes)})" if passes else None


def _blank(output: str, clock: bool = False) -> str:
    """``output`` with addresses blanked, and, for a module that reads the clock
    (``@rtclock``), every line that is one number alone (the timings it prints)."""
    output = re.sub(r"Current thread id: \S+", "Current thread id: ?", output)
    if clock:
        output = re.sub(r"(?m)^-?[0-9.]+(?:e[-+]?[0-9]+)?$", "<number>", output)
    return re.sub(r"0x[0-9a-f]+", "0x?", output)


def _run(args: list[str], stdin: str | None = None, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def _check(filecheck: list[str], output: str) -> subprocess.CompletedProcess[str]:
    if not filecheck:  # a RUN line without FileCheck: only mlir-runner's success counts
        return subprocess.CompletedProcess([], 0, "", "")
    return _run([str(FILECHECK), *filecheck], stdin=output)


@dataclass(frozen=True)
class Outcome:
    """How one way of one RUN line went: ``status`` is ``"pass"``, ``"fail"``, ``"abort"``
    (pymlirjit died of a signal) or ``"skip"`` (the wheel's mlir-opt or mlir-runner fails
    the RUN line itself); ``detail`` says why when it is not a pass."""

    status: str
    detail: str = ""


_RUNNERS = {"mlir-runner", "mlir-cpu-runner"}
_TOOLS = {"mlir-opt", "FileCheck", *_RUNNERS}
#: The passes a RUN line names that the wheel's mlir-opt lacks (lit's test-only ones).
_TEST_ONLY = re.compile(r"(?<![\w-])test-[\w-]+")


def _tools(command: str) -> set[str]:
    return {(_without_env(shlex.split(stage))[1] or ["env"])[0]
            for stage in command.split("|") if stage.strip()}


def _parts(command: str) -> list[str]:
    """The commands of one RUN line joined by ``&&``, up to the last that runs mlir-runner
    (a fresh working directory needs no ``rm -f %t``)."""
    parts = [part.strip() for part in command.split("&&")]
    parts = [part for part in parts if shlex.split(part)[:1] != ["rm"]]
    last = max((i for i, part in enumerate(parts) if _tools(part) & _RUNNERS), default=None)
    return parts if last is None else parts[:last + 1]


def _output(opt: list[str]) -> str | None:
    """The file an mlir-opt stage writes (``-o FILE``), if any."""
    for i, word in enumerate(opt):
        if word in ("-o", "--o") and i + 1 < len(opt):
            return opt[i + 1]
        if word.startswith(("-o=", "--o=")):
            return word.partition("=")[2]
    return None


@dataclass(frozen=True)
class _Made:
    """A file an earlier RUN line wrote: the original file and the mlir-opt stages it
    went through."""

    origin: Path
    opts: list[list[str]]


def _lower(source: Path, opts: list[list[str]], workdir: Path,
           tag: str) -> Path | subprocess.CompletedProcess[str]:
    """``source`` through the wheel's mlir-opt stages ``opts`` (the schedule erased where
    a stage asks): the file written, or the failed run."""
    for i, opt in enumerate(opts):
        for j, segment in enumerate(_segments(opt)):
            if j:  # the schedule is erased before the passes after the test-only pass
                erased = workdir / f"erased{tag}{i}-{j}.mlir"
                erased.write_text(_erase_schedule(source.read_text()))
                source = erased
            # Each stage as one --pass-pipeline, so that test-only pipelines can be spelled.
            lowered = _run([str(MLIR_ROOT / "bin" / "mlir-opt"), str(source),
                            f"--pass-pipeline=builtin.module({_passes(segment)})"], cwd=workdir)
            if lowered.returncode != 0:
                return lowered
            source = workdir / f"lowered{tag}{i}-{j}.mlir"
            source.write_text(lowered.stdout)
    return source


def _test_only(opts: list[list[str]]) -> Outcome | None:
    """Why the reference fails if mlir-opt stages ``opts`` name a test-only pass."""
    names = sorted({name for stage in opts for name in _TEST_ONLY.findall(
        _passes([word for segment in _segments(stage) for word in segment]))})
    return Outcome("skip", f"needs mlir-opt's test-only {', '.join(names)}, which the "
                           f"wheel's mlir-opt lacks") if names else None


def _earlier_outputs(commands: list[str], path: Path,
                     workdir: Path) -> dict[str, _Made] | Outcome:
    """Run the RUN lines in ``commands`` that only run mlir-opt into a file (``-o %t``,
    read by a later line) or copy the test file (``cp %s %t``), in order in ``workdir``:
    what each wrote, by name, or why the reference fails."""
    made: dict[str, _Made] = {}
    for n, command in enumerate(commands):
        words = shlex.split(command)
        if len(words) == 3 and words[0] == "cp":  # `cp %s %t`: the test file, renamed
            shutil.copyfile(words[1], words[2])
            made[words[2]] = made.get(words[1], _Made(path, []))
            continue
        opts = _stages(command)[0]
        target = _output(opts[-1]) if opts else None
        if _tools(command) != {"mlir-opt"} or target is None:
            continue
        origin, before = path, []
        if (given := _input(opts[0], path, made)) in made:
            origin, before = made[given].origin, made[given].opts
        if (test_only := _test_only(before + opts)) is not None:
            return test_only
        result = _lower(Path(given) if given in made else path, opts, workdir, f"-{n}-")
        if not isinstance(result, Path):
            return Outcome("skip", f"the wheel's mlir-opt fails the RUN line writing "
                                   f"{Path(target).name}: {result.stderr[:200]}")
        Path(target).write_text(result.read_text())
        made[target] = _Made(origin, before + opts)
    return made


def _input(words: list[str], path: Path, made: dict[str, _Made]) -> str:
    """The file a stage reads: an earlier line's output it names, or the test file."""
    return next((word for word in words if word in made), str(path))


@dataclass(frozen=True)
class _Reference:
    """What the wheel's ``mlir-opt | mlir-runner`` made of one RUN line."""

    lowered: Path
    origin: Path
    opts: list[str]
    runner_args: list[str]
    env: dict[str, str]
    filecheck: list[str]
    stdout: str


def _reference(path: Path, index: int, workdir: Path) -> _Reference | Outcome:
    """Run RUN line ``index`` of ``path`` with the wheel's tools in ``workdir`` (lit's
    ``%t``), the RUN lines before it that write a file for later lines first; a skip
    :class:`Outcome` says why the line is not compared."""
    commands = run_lines(path, workdir)
    # lit runs `a && b` as two commands: `rm -f %t && mlir-opt ... -o %t && mlir-runner %t`.
    *before, command = _parts(commands[index]) or [commands[index]]
    steps = [part for line in commands[:index] for part in _parts(line)] + before
    tools = _tools(command)
    others = sorted(tools - _TOOLS)
    if others or not tools & _RUNNERS:
        return Outcome("skip", f"not an mlir-opt | mlir-runner | FileCheck line: "
                               f"{' '.join(others) or 'no mlir-runner'}")
    made = _earlier_outputs(steps, path, workdir)
    if isinstance(made, Outcome):
        return made
    opts, runner, filecheck = _stages(command)
    given = _input(opts[0] if opts else runner, path, made)
    origin, before = (made[given].origin, made[given].opts) if given in made else (path, [])
    if (test_only := _test_only(before + opts)) is not None:
        return test_only
    lowered = _lower(Path(given), opts, workdir, "")
    if not isinstance(lowered, Path):
        return Outcome("skip", f"the wheel's mlir-opt fails this RUN line: "
                               f"{lowered.stderr[:200]}")
    runner_args = [a for a in runner if a not in (str(path), given)]
    env = _runner_env(command)
    reference = _run([str(MLIR_ROOT / "bin" / "mlir-runner"), str(lowered), *runner_args],
                     cwd=workdir, env=env)
    if reference.returncode != 0:
        return Outcome("skip", f"the wheel's mlir-runner fails this RUN line: "
                               f"{reference.stderr[:200]}")
    if _check(filecheck, reference.stdout).returncode != 0:
        return Outcome("skip", "the wheel's mlir-runner output fails the CHECK lines")
    return _Reference(lowered, origin, before + opts, runner_args, env, filecheck,
                      reference.stdout)


def _same_as_another_line(path: Path, index: int, reference: _Reference, output: str,
                          workdir: Path, clock: bool) -> bool:
    """Whether ``output`` (the default pipeline's, on ``path``) is what the wheel prints
    for another RUN line of ``path`` run with the same runner arguments. The default
    pipeline is one pipeline per file: where a file's RUN lines choose options that change
    what is printed (the sparsifier's ``vl=2 reassociate-fp-reductions=true`` reorders a
    bf16 sum; the runtime library fills a storage slot that inline code leaves 0), its
    output can equal only the lines that chose as it does."""
    for other in range(len(run_lines(path))):
        if other == index:
            continue
        (workdir / f"line{other}").mkdir(exist_ok=True)
        theirs = _reference(path, other, workdir / f"line{other}")
        if (isinstance(theirs, _Reference) and theirs.runner_args == reference.runner_args
                and theirs.env == reference.env
                and _blank(theirs.stdout, clock) == _blank(output, clock)):
            return True
    return False


def _reference_varies(reference: _Reference, workdir: Path, clock: bool) -> bool:
    """Whether the wheel's mlir-runner, run again on the same lowered file, prints
    something else: the test reads memory it never wrote (upstream's sparse_pack prints
    the unwritten last row of a disassembled ``tensor.empty``, its CHECK line says
    ``{{.*}}``), and only the CHECK lines can judge the output."""
    for _ in range(2):
        again = _run([str(MLIR_ROOT / "bin" / "mlir-runner"), str(reference.lowered),
                      *reference.runner_args], cwd=workdir, env=reference.env)
        if _blank(again.stdout, clock) != _blank(reference.stdout, clock):
            return True
    return False


def run_case(path: Path, index: int, way: str, workdir: Path) -> Outcome:
    """Run RUN line ``index`` of ``path`` one ``way`` (:data:`WAYS`) against the wheel's
    ``mlir-opt | mlir-runner``, in ``workdir`` (lit's ``%t``): the RUN lines before it that
    write a file for later lines (``mlir-opt %s ... -o %t``) run first, in order. The
    default way passes if its output passes the line's CHECK lines and equals the wheel's
    output for this line or, failing that, for another RUN line of the file. Where the
    wheel's own output changes from run to run, only the CHECK lines judge."""
    reference = _reference(path, index, workdir)
    if isinstance(reference, Outcome):
        return reference
    ours_input = reference.lowered if way == "lowered" else reference.origin
    extra: list[str] = []
    if way == "passes" and reference.opts:
        pipeline = _pipeline(reference.opts)
        assert pipeline is not None
        extra = ["--pipeline", pipeline]
    # This checkout's pymlirjit, though the working directory is elsewhere.
    path_env = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    ours = _run([sys.executable, "-m", "pymlirjit", "run", str(ours_input),
                 *reference.runner_args, *extra], cwd=workdir,
                env={**reference.env, "PYTHONPATH": path_env})
    if ours.returncode < 0:
        return Outcome("abort", f"signal {-ours.returncode}: {ours.stderr[-300:]}")
    if ours.returncode != 0:
        return Outcome("fail", ours.stderr.strip()[-300:])
    clock = "@rtclock" in path.read_text()
    if (_blank(ours.stdout, clock) != _blank(reference.stdout, clock)
            and not (way == "default" and _same_as_another_line(
                path, index, reference, ours.stdout, workdir, clock))
            and not _reference_varies(reference, workdir, clock)):
        return Outcome("fail", f"stdout differs from mlir-runner's:\n{ours.stdout[:300]}\n"
                               f"---\n{reference.stdout[:300]}")
    checked = _check(reference.filecheck, ours.stdout)
    if checked.returncode != 0:
        return Outcome("fail", f"FileCheck: {checked.stderr[:300]}")
    return Outcome("pass")


def runner_files(folder: Path) -> list[Path]:
    """The ``.mlir`` files under ``folder`` (recursively) that have RUN lines."""
    return [p for p in sorted(folder.rglob("*.mlir")) if run_lines(p)]


def _cases(folder: Path) -> list[object]:
    cases = []
    for path in runner_files(folder):
        name = path.relative_to(folder).with_suffix("").as_posix()
        for i, _ in enumerate(run_lines(path)):
            for way in WAYS:
                # Another folder (--runner-dir) is opted into as a whole: no slow marks.
                marks = [] if path.name in FAST or folder != RUNNER else [pytest.mark.slow]
                cases.append(pytest.param(path, i, way, marks=marks, id=f"{name}-{i}-{way}"))
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize :func:`test_run_line` over tests/data/runner, or over the folder that
    ``--runner-dir`` names (such as upstream's runner tests, kept outside the repository)."""
    if "way" in metafunc.fixturenames:
        folder = metafunc.config.getoption("runner_dir", None)
        metafunc.parametrize(("path", "index", "way"),
                             _cases(Path(folder) if folder else RUNNER))


def test_run_line(path: Path, index: int, way: str, tmp_path: Path,
                  request: pytest.FixtureRequest) -> None:
    in_repo = path.is_relative_to(RUNNER)
    if (in_repo and path.name not in FAST
            and "slow" not in (request.config.option.markexpr or "")):
        # pyproject's addopts does not deselect slow tests: opt in with -m slow.
        pytest.skip("slow conformance case: run with -m slow")
    outcome = run_case(path, index, way, tmp_path)
    if outcome.status == "skip":
        pytest.skip(outcome.detail)
    assert outcome.status == "pass", outcome.detail


def test_runner_files_are_ours_and_fast_cases_exist() -> None:
    """Every file says what it checks and has a RUN line; the default subset names files
    that exist (a renamed file would otherwise drop out of the default suite silently)."""
    paths = sorted(RUNNER.glob("*.mlir"))
    assert len(paths) >= 15
    for path in paths:
        assert path.read_text().startswith("// pymlirjit's own runner test: "), path.name
        assert run_lines(path), path.name
    assert FAST.issubset(path.name for path in paths)


TWO_STEP = RUNNER / "two-step-compile.mlir"


@pytest.mark.parametrize("how", WAYS)
def test_a_later_run_line_runs_what_an_earlier_one_wrote(how: str, tmp_path: Path) -> None:
    """The second RUN line runs the file the first wrote to %t: every way passes."""
    assert "mlir-runner" not in run_lines(TWO_STEP)[0]
    assert run_case(TWO_STEP, 1, how, tmp_path) == Outcome("pass")


def test_percent_t_writes_only_into_the_workdir(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """%t and %T name paths in the case's working directory; nothing lands in the
    current directory or next to the test file."""
    source = tmp_path / "source"
    source.mkdir()
    test_file = source / TWO_STEP.name
    test_file.write_text(TWO_STEP.read_text())
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    workdir = tmp_path / "work"
    workdir.mkdir()
    commands = run_lines(test_file, workdir)
    assert f"-o {workdir / (TWO_STEP.name + '.tmp')}" in commands[0]
    assert "%t" not in " ".join(commands) and "%T" not in " ".join(commands)
    assert run_case(test_file, 1, "lowered", workdir) == Outcome("pass")
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in source.iterdir()] == [TWO_STEP.name]
    assert (workdir / f"{TWO_STEP.name}.tmp").is_file()


def test_a_test_only_pass_is_named_as_why_the_reference_fails(tmp_path: Path) -> None:
    """A RUN line that needs one of mlir-opt's test-only passes counts as the reference
    failing, and says which pass."""
    test_file = tmp_path / "assert.mlir"
    test_file.write_text(
        "// RUN: mlir-opt %s -test-cf-assert -convert-func-to-llvm | mlir-runner -e main"
        " -entry-point-result=void | FileCheck %s\n"
        "func.func @main() {\n  return\n}\n")
    outcome = run_case(test_file, 0, "lowered", tmp_path)
    assert outcome.status == "skip"
    assert "test-only test-cf-assert" in outcome.detail


def test_data_files_are_named_under_the_copy(tmp_path: Path) -> None:
    """Upstream's sparse tests read Integration/data through %mlir_src_dir/test: a copy
    kept as <folder>/Integration/... reads <folder>/Integration/data."""
    path = tmp_path / "Integration" / "Dialect" / "X" / "CPU" / "read.mlir"
    path.parent.mkdir(parents=True)
    path.write_text("// RUN: mlir-opt %s | env T=%mlir_src_dir/test/Integration/data/a.mtx "
                    "mlir-runner -e main\n")
    assert run_lines(path) == [f"mlir-opt {path} | env T={tmp_path}/Integration/data/a.mtx "
                               f"mlir-runner -e main"]


def test_a_bare_assignment_before_the_runner_sets_its_environment(tmp_path: Path) -> None:
    """Older upstream RUN lines set the runner's variables the shell's way, without ``env``
    (``TENSOR0=... mlir-cpu-runner``): still a runner line, with those variables."""
    test_file = tmp_path / "bare_env.mlir"
    test_file.write_text(
        "// RUN: mlir-opt %s -convert-vector-to-llvm -convert-func-to-llvm"
        " -convert-arith-to-llvm | GREETING=hi mlir-runner -e main -entry-point-result=void"
        " -shared-libs=%mlir_c_runner_utils | FileCheck %s\n"
        "// CHECK: 7\n"
        "func.func @main() {\n  %c = arith.constant 7 : i64\n"
        "  vector.print %c : i64\n  return\n}\n")
    assert _runner_env(run_lines(test_file)[0]) == {"GREETING": "hi"}
    for way in WAYS:
        (tmp_path / way).mkdir()
        assert run_case(test_file, 0, way, tmp_path / way) == Outcome("pass"), way


_LOOSE = """\
// RUN: mlir-opt %s --sparsifier="enable-runtime-library=true" | mlir-runner -e main \
-entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s
// RUN: mlir-opt %s --sparsifier="enable-runtime-library=false" | mlir-runner -e main \
-entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s
// CHECK: pos[1] : ( 0, 1, 1, 2, {{.*}} )
// CHECK: values : ( 1, 2 )
#Loose = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : loose_compressed) }>
func.func @main() {
  %d = arith.constant dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf64>
  %s = sparse_tensor.convert %d : tensor<2x2xf64> to tensor<2x2xf64, #Loose>
  sparse_tensor.print %s : tensor<2x2xf64, #Loose>
  bufferization.dealloc_tensor %s : tensor<2x2xf64, #Loose>
  return
}
"""


def test_the_default_way_may_print_what_another_run_line_of_the_file_prints(
        tmp_path: Path) -> None:
    """The default pipeline is one per file: where RUN lines choose options that change
    the output (the runtime library fills the spare position slot of a loose_compressed
    level, inline code leaves it 0), it passes a line whose CHECK lines it passes if it
    prints what the wheel prints for another line of the file."""
    test_file = tmp_path / "loose.mlir"
    test_file.write_text(_LOOSE)
    outputs = []
    for index in (0, 1):
        (tmp_path / f"ref{index}").mkdir()
        reference = _reference(test_file, index, tmp_path / f"ref{index}")
        assert isinstance(reference, _Reference)
        outputs.append(reference.stdout)
    assert outputs[0] != outputs[1]
    for index in (0, 1):
        (tmp_path / f"default{index}").mkdir()
        assert run_case(test_file, index, "default", tmp_path / f"default{index}") == \
            Outcome("pass")


_UNWRITTEN = """\
// RUN: mlir-opt %s -finalize-memref-to-llvm -convert-vector-to-llvm -convert-func-to-llvm \
-convert-arith-to-llvm -reconcile-unrealized-casts | mlir-runner -e main \
-entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s
// CHECK: {{[0-9]+}}
func.func @main() {
  %buffer = memref.alloc() : memref<4096xi8>
  %address = memref.extract_aligned_pointer_as_index %buffer : memref<4096xi8> -> index
  vector.print %address : index
  memref.dealloc %buffer : memref<4096xi8>
  return
}
"""


def test_output_the_wheel_itself_does_not_repeat_is_judged_by_the_check_lines(
        tmp_path: Path) -> None:
    """A test whose printed values change from run to run (here an address, as when a test
    reads memory it never wrote) passes on its CHECK lines alone."""
    test_file = tmp_path / "address.mlir"
    test_file.write_text(_UNWRITTEN)
    for way in WAYS:
        (tmp_path / way).mkdir()
        assert run_case(test_file, 0, way, tmp_path / way) == Outcome("pass"), way
