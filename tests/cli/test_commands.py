"""The ``pymlirjit`` command line: run, lower, demo, --version, and its error reporting.

Most tests run the command in a subprocess (``python -m pymlirjit``), as a user would;
a few call :func:`pymlirjit.cli.commands.main` in-process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mlir
import numpy as np
import pytest

from pymlirjit.cli import commands as cli
from pymlirjit.cli.arguments import parse_args

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CALLBACKS = str(DATA / "cli_callbacks.py")
MLIR_ROOT = Path(mlir.__path__[0])
RUNNER_LIBS = ("libmlir_runner_utils.so", "libmlir_c_runner_utils.so")


def pymlirjit(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pymlirjit ARGS`` and capture its output: the repository's pymlirjit,
    from any ``cwd`` (not an installed copy, which may be another tree's)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "pymlirjit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit code 1, exactly one stderr line ``pymlirjit: error: ...`` holding ``fragments``."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pymlirjit: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# -- demo and --version -------------------------------------------------------------------

def test_demo_runs() -> None:
    result = pymlirjit("demo")
    assert result.returncode == 0, result.stderr
    assert "add(42.0, 2) -> 22.0" in result.stdout
    assert ("positive mean per row -> [2.0, 0.0, 1.5], 2 rows with one (numpy says "
            "[2.0, 0.0, 1.5])") in result.stdout
    assert "_row_done for rows [0, 1, 2]" in result.stdout
    assert "sum_of_squares([0.0, 1.0, 2.0, 3.0, 4.0]) -> 30.0" in result.stdout


def test_version_names_pymlirjit_mlir_bindings_and_llvmlite() -> None:
    result = pymlirjit("--version")
    assert result.returncode == 0
    for name in ("pymlirjit 0.", "xtc-mlir-python-bindings 22.", "llvmlite "):
        assert name in result.stdout


# -- run ------------------------------------------------------------------------------------

def test_run_with_callback_file_and_scalar_arguments() -> None:
    result = pymlirjit("run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS, "42", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "22.0\n"
    assert result.stderr == ""


def test_run_with_callbacks_given_as_a_module_name() -> None:
    result = pymlirjit("run", "cli_scale.mlir", "--callbacks", "cli_callbacks", "--entry",
                       "main", "-O", "0", "-3.5", "0x10", cwd=DATA)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "6.25\n"


def test_run_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", str(DATA / "cli_scale.mlir"), "--callbacks", CALLBACKS, "1", "2"])
    assert code == 0
    assert capsys.readouterr().out == "1.5\n"


def test_run_with_npy_input_and_output(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    out = tmp_path / "out.npy"
    result = pymlirjit("run", str(DATA / "cli_arrays.mlir"), str(tmp_path / "a.npy"), "2.5",
                       "--output", str(out))
    assert result.returncode == 0, result.stderr
    # The saved array is not printed as well; the scalar result is.
    assert result.stdout.splitlines() == ["15.0"]
    saved = np.load(out)
    assert saved.dtype == np.float32
    assert saved.tolist() == [0.0, 2.5, 5.0, 7.5]


def test_output_is_written_to_the_name_given_and_a_folder_is_an_error(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    arguments = ["run", str(DATA / "cli_arrays.mlir"), str(tmp_path / "a.npy"), "2.5"]
    result = pymlirjit(*arguments, "--output", str(tmp_path / "scaled.bin"))
    assert result.returncode == 0, result.stderr
    assert np.load(tmp_path / "scaled.bin").tolist() == [0.0, 2.5, 5.0, 7.5]
    assert not (tmp_path / "scaled.bin.npy").exists()   # numpy's np.save(name) adds .npy
    (tmp_path / "folder").mkdir()
    assert_one_error_line(pymlirjit(*arguments, "--output", str(tmp_path / "folder")),
                          f"Is a directory: {tmp_path / 'folder'}")
    assert not (tmp_path / "folder.npy").exists()


def test_run_prints_the_arrays_it_does_not_save(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    code = cli.main(["run", str(DATA / "cli_arrays.mlir"), str(tmp_path / "a.npy"), "2.5"])
    assert code == 0
    # Tuple results print one per line: numpy's printing for arrays, plain for scalars.
    assert capsys.readouterr().out.splitlines() == [
        str(np.arange(4, dtype=np.float32) * 2.5), "15.0"]


def test_quiet_prints_no_result_but_still_saves(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    out = tmp_path / "out.npy"
    code = cli.main(["run", str(DATA / "cli_arrays.mlir"), str(tmp_path / "a.npy"), "2.5",
                     "-o", str(out), "--quiet"])
    assert code == 0
    assert capsys.readouterr() == ("", "")
    assert np.load(out).tolist() == [0.0, 2.5, 5.0, 7.5]
    code = cli.main(["run", str(DATA / "cli_scale.mlir"), "--callbacks", CALLBACKS, "-q",
                     "1", "2"])
    assert code == 0
    assert capsys.readouterr() == ("", "")


def test_quiet_still_reports_errors() -> None:
    result = pymlirjit("run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS, "--quiet",
                       "1")
    assert result.stdout == ""
    assert_one_error_line(result)


def test_time_reports_compile_and_run_on_stderr() -> None:
    result = pymlirjit("run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS, "--time",
                       "4", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "2.0\n"
    assert re.search(r"^pymlirjit: compiling .*cli_scale\.mlir\.\.\.$", result.stderr, re.M)
    assert re.search(r"^pymlirjit: compile \(parse\+lower\+JIT\): [\d.]+ ms$",
                     result.stderr, re.M)
    assert re.search(r"^pymlirjit: run: [\d.]+ ms$", result.stderr, re.M)


def test_cache_loads_the_second_run_from_disk(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMLIRJIT_CACHE_DIR", str(tmp_path))
    runs = [pymlirjit("run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS, "--cache",
                      "--time", "4", "0") for _ in range(2)]
    for result in runs:
        assert result.returncode == 0, result.stderr
        assert result.stdout == "2.0\n"
    assert "compile (parse+lower+JIT):" in runs[0].stderr
    assert re.search(r"^pymlirjit: load from the disk cache: [\d.]+ ms$", runs[1].stderr, re.M)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".TAG", ".entry", ".key"]
    without = pymlirjit("run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS, "--time",
                        "4", "0")
    assert "compile (parse+lower+JIT):" in without.stderr
    shown = pymlirjit("cache")
    assert shown.returncode == 0, shown.stderr
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}: 1 module \([\d.]+ KiB\)\n", shown.stdout)
    cleared = pymlirjit("cache", "--clear")
    assert cleared.stdout.startswith(f"{tmp_path}: removed 1 module")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CACHEDIR.TAG", "secret.key"]
    assert pymlirjit("cache").stdout == f"{tmp_path}: 0 modules (0.0 KiB)\n"


# -- the same file with mlir-runner and with pymlirjit ---------------------------------------

def _normalize(output: str) -> str:
    """Drop the buffer address printMemref shows, which differs from run to run."""
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <address>", output)


def test_print_memref_matches_mlir_runner(tmp_path: Path) -> None:
    source = DATA / "cli_print_memref.mlir"
    lowered = pymlirjit("lower", str(source))
    assert lowered.returncode == 0, lowered.stderr
    (tmp_path / "lowered.mlir").write_text(lowered.stdout)
    libs = ",".join(str(MLIR_ROOT / "lib" / name) for name in RUNNER_LIBS)
    reference = subprocess.run(
        [str(MLIR_ROOT / "bin" / "mlir-runner"), str(tmp_path / "lowered.mlir"), "-e", "main",
         "--entry-point-result=void", f"--shared-libs={libs}"],
        capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    ours = pymlirjit("run", str(source), "--shared-libs", RUNNER_LIBS[0],
                     "--shared-libs", RUNNER_LIBS[1])
    assert ours.returncode == 0, ours.stderr
    assert "[[0,   1,   2]," in reference.stdout
    assert _normalize(ours.stdout) == _normalize(reference.stdout)


def test_c_output_comes_before_the_printed_result(tmp_path: Path) -> None:
    source = tmp_path / "print_then_return.mlir"
    source.write_text((DATA / "cli_print_memref.mlir").read_text()
                      .replace("func.func @main() {", "func.func @main() -> i32 {")
                      .replace("  return\n}", "  %r = arith.constant 7 : i32\n"
                                              "  return %r : i32\n}"))
    result = pymlirjit("run", str(source), "--shared-libs",
                       "mlir_runner_utils,mlir_c_runner_utils")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Unranked Memref")
    assert result.stdout.endswith("\n7\n")


# -- lower ----------------------------------------------------------------------------------

def test_lower_prints_the_llvm_dialect() -> None:
    result = pymlirjit("lower", "tests/data/cli_scale.mlir")
    assert result.returncode == 0, result.stderr
    assert "llvm.func @main(" in result.stdout
    assert "func.func" not in result.stdout


def test_lower_with_a_pipeline() -> None:
    result = pymlirjit("lower", "tests/data/cli_scale.mlir", "--pipeline",
                       "convert-func-to-llvm")
    assert result.returncode == 0, result.stderr
    assert "llvm.call @cli_scale" in result.stdout


def test_lower_emits_llvm_ir_and_assembly() -> None:
    llvm = pymlirjit("lower", "tests/data/cli_scale.mlir", "--emit=llvm", "-O", "3")
    assert llvm.returncode == 0, llvm.stderr
    assert "define " in llvm.stdout and "@main(" in llvm.stdout
    asm = pymlirjit("lower", "tests/data/cli_scale.mlir", "--emit", "asm")
    assert asm.returncode == 0, asm.stderr
    assert "main:" in asm.stdout and ".text" in asm.stdout


# -- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "lower"])
def test_a_file_that_is_not_utf8_text_is_one_error_line_naming_it(
        tmp_path: Path, command: str) -> None:
    path = tmp_path / "binary.mlir"
    path.write_bytes(b"\x00\x01\xff\xfe")
    assert_one_error_line(pymlirjit(command, str(path)),
                          f"cannot read MLIR source {path}: it is not UTF-8 text")


ERROR_CASES = {
    "malformed MLIR": (["run", "tests/data/cli_malformed.mlir", "1"],
                       ["tests/data/cli_malformed.mlir:3:23:", "undeclared SSA value"]),
    "missing callback": (["run", "tests/data/cli_missing_callback.mlir"],
                         ["@cli_nowhere", "--callbacks"]),
    "callback raising": (["run", "tests/data/cli_fail.mlir", "--callbacks", CALLBACKS, "1.5"],
                         ["ValueError: cli_fail refuses 1.5", "callback 'cli_fail'"]),
    "wrong argument count": (["run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS,
                              "1"], ["@main takes 2 arguments (f32, i32), got 1"]),
    "missing file": (["run", "tests/data/cli_no_such_file.mlir"],
                     ["no such file: tests/data/cli_no_such_file.mlir"]),
    "folder for a file": (["run", "tests/data"], ["tests/data is a folder, not a file"]),
    "object file not writable": (["run", "tests/data/cli_scale.mlir", "--callbacks",
                                  CALLBACKS, "1", "2", "-dump-object-file",
                                  "-object-filename=cli_no_such_folder/x.o"],
                                 ["No such file or directory: cli_no_such_folder/x.o"]),
    "unparsable argument": (["run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS,
                             "1", "two"], ["argument 2 (i32): cannot parse 'two' as i32"]),
    "argument out of range": (["run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS,
                               "1", "5000000000"], ["argument 2 (i32)", "out of range"]),
    "missing npy file": (["run", "tests/data/cli_arrays.mlir", "cli_no_such.npy", "1"],
                         ["argument 1 (memref<?xf32>)", "cli_no_such.npy"]),
    "missing callback file": (["run", "tests/data/cli_scale.mlir", "--callbacks",
                               "cli_no_such_callbacks.py"], ["no such file"]),
    "missing callback module": (["run", "tests/data/cli_scale.mlir", "--callbacks",
                                 "cli_no_such_module"], ["cli_no_such_module"]),
    "missing shared library": (["run", "tests/data/cli_print_memref.mlir", "--shared-libs",
                                "libcli_no_such.so"], ["libcli_no_such.so"]),
    "bare name of no MLIR library": (["run", "tests/data/cli_scale.mlir", "--shared-libs",
                                      "libm.so.6"],
                                     ["'libm.so.6' is not an MLIR runtime library",
                                      "give another library by its path"]),
    "refused pass": (["lower", "tests/data/cli_scale.mlir", "--pipeline",
                      "convert-func-to-llvm,xegpu-propagate-layout"],
                     ["pass 'xegpu-propagate-layout' is refused"]),
    "not a shared library": (["run", "tests/data/cli_print_memref.mlir", "--shared-libs",
                              "tests/data/cli_malformed.mlir"],
                             ["cannot load shared library tests/data/cli_malformed.mlir"]),
    "not an npy file": (["run", "tests/data/cli_arrays.mlir", "tests/data/cli_scale.mlir",
                         "1"], ["argument 1 (memref<?xf32>)", "is not a .npy file"]),
    "unknown entry": (["run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS,
                       "--entry", "nope"], ["no public function @nope", "it has: @main"]),
    "output without array": (["run", "tests/data/cli_scale.mlir", "--callbacks", CALLBACKS,
                              "1", "2", "--output", "cli_unused.npy"],
                             ["--output given 1 time", "returns 0 arrays"]),
    "lower malformed": (["lower", "tests/data/cli_malformed.mlir"],
                        ["tests/data/cli_malformed.mlir:3:23:"]),
    "bad pipeline": (["lower", "tests/data/cli_scale.mlir", "--pipeline", "no-such-pass"],
                     ["no-such-pass"]),
    "bad pass option value": (["run", "tests/data/cli_scale.mlir", "--pipeline",
                               "builtin.module(canonicalize{max-iterations=x},convert-to-llvm)"],
                              ["failed to add `canonicalize`",
                               "'x' value invalid for long argument"]),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_is_one_clean_line(case: str) -> None:
    args, fragments = ERROR_CASES[case]
    line = assert_one_error_line(pymlirjit(*args), *fragments)
    assert "Traceback" not in line


def test_error_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(DATA / "cli_fail.mlir"), "--callbacks", CALLBACKS, "2"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "pymlirjit: error: ValueError: cli_fail refuses 2.0 "
        "(raised in callback 'cli_fail' called from compiled MLIR code)"]


def test_traceback_flag_shows_the_traceback() -> None:
    result = pymlirjit("run", "tests/data/cli_fail.mlir", "--callbacks", CALLBACKS, "1",
                       "--traceback")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert 'cli_callbacks.py", line' in result.stderr
    assert result.stderr.splitlines()[-1].startswith("pymlirjit: error: ValueError")


def test_usage_errors_keep_argparse_exit_code() -> None:
    assert pymlirjit("run", "tests/data/cli_scale.mlir", "-O", "7").returncode == 2
    assert pymlirjit().returncode == 2
    assert pymlirjit("run").returncode == 2


# -- the examples of docs/cli.md --------------------------------------------------------

SHELL_FENCE = re.compile(r"^```(?:bash|shell)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def test_docs_shell_examples_run(tmp_path: Path) -> None:
    blocks = SHELL_FENCE.findall((ROOT / "docs" / "cli.md").read_text())
    assert blocks
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the examples' paths; files land here
    for block in blocks:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("argv, expected", [
    (["run", "f.mlir", "1", "2", "--time"], ["1", "2"]),
    (["run", "f.mlir", "--time", "1", "2"], ["1", "2"]),
    (["run", "f.mlir", "1", "--entry", "g", "2"], ["1", "2"]),
    (["run", "f.mlir", "-3", "-1e5", "-inf"], ["-3", "-1e5", "-inf"]),
    (["run", "f.mlir", "1", "--", "--time"], ["1", "--time"]),
])
def test_arguments_may_come_anywhere(argv: list[str], expected: list[str]) -> None:
    assert parse_args(argv).args == expected


def test_unknown_option_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["run", "f.mlir", "--no-such-option"])
    assert exit_info.value.code == 2


def test_array_of_the_wrong_dtype_is_one_clean_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "f64.npy", np.arange(3.0))
    code = cli.main(["run", str(DATA / "cli_arrays.mlir"), str(tmp_path / "f64.npy"), "1"])
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "expected a float32 array for memref<?xf32>, got a float64 array" in err[0]


def test_shared_libs_never_load_a_library_planted_in_the_current_folder(tmp_path: Path) -> None:
    """A bare name resolves only in MLIR's lib folder, even with an empty element (the
    current folder) in LD_LIBRARY_PATH."""
    from tests.lowering.test_pipeline import build_planted_library

    build_planted_library(tmp_path, "libmlir_c_runner_utils.so")
    marker = tmp_path / "marker"
    source = tmp_path / "main.mlir"
    source.write_text("func.func @main() -> i32 { %c = arith.constant 3 : i32 "
                      "return %c : i32 }")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PLANTED_MARKER=str(marker),
               LD_LIBRARY_PATH=":" + os.environ.get("LD_LIBRARY_PATH", ""))
    for libs in ("libmlir_c_runner_utils.so", "mlir_runner_utils,libmlir_c_runner_utils.so"):
        done = subprocess.run([sys.executable, "-m", "pymlirjit", "run", str(source),
                               "--shared-libs", libs], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "3\n"
        assert not marker.exists()
    done = subprocess.run([sys.executable, "-m", "pymlirjit", "run", str(source),
                           "--shared-libs", "./libmlir_c_runner_utils.so"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert marker.exists()  # a path is the user's explicit choice


def test_lower_refuses_absurd_nesting_with_its_location(tmp_path: Path) -> None:
    source = tmp_path / "deep.mlir"
    source.write_text("func.func @f() {\n" + "scf.execute_region {\n" * 5000
                      + "scf.yield\n}\n" * 5000 + "return\n}\n")
    assert_one_error_line(pymlirjit("lower", str(source)),
                          f"{source}:1001:20: nested more than 1000 deep")


# -- mlir-runner's spellings and input ------------------------------------------------------

def test_llvm_dialect_file_runs_with_mlir_runner_spellings() -> None:
    """An upstream RUN line with `mlir-runner` replaced by `pymlirjit run`: LLVM-dialect
    input, -e, -entry-point-result, -shared-libs=a,b, -O3, and the global constructor
    and destructor run around the entry as in mlir-runner."""
    libs = ",".join(str(MLIR_ROOT / "lib" / name) for name in RUNNER_LIBS)
    source = str(DATA / "cli_llvm_dialect.mlir")
    reference = subprocess.run(
        [str(MLIR_ROOT / "bin" / "mlir-runner"), source, "-e", "main",
         "-entry-point-result=f32", f"-shared-libs={libs}", "-O3"],
        capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    ours = pymlirjit("run", source, "-e", "main", "-entry-point-result=f32",
                     f"-shared-libs={libs}", "-O3")
    assert ours.returncode == 0, ours.stderr
    assert sorted(ours.stdout.splitlines()) == sorted(reference.stdout.splitlines())
    assert ours.stdout == "1\n2\n4.250000e+01\n3\n"  # constructor, entry, result, destructor


def test_double_dash_opt_level_is_mlir_runners_spelling() -> None:
    """mlir-runner (LLVM's option parser) takes --O3 as well as -O3; after `--` it is an
    argument like any other."""
    assert parse_args(["run", "f.mlir", "--O3"]).opt_level == 3
    assert parse_args(["run", "f.mlir", "--O0", "-e", "g"]).opt_level == 0
    args = parse_args(["run", "f.mlir", "--", "--O1"])
    assert (args.opt_level, args.args) == (2, ["--O1"])


def test_dump_object_file_writes_the_jit_object_code(tmp_path: Path) -> None:
    """mlir-runner's -dump-object-file and -object-filename (default FILE.mlir.o)."""
    source = tmp_path / "seven.mlir"
    source.write_text("llvm.func @main() -> i32 {\n"
                      "  %c = llvm.mlir.constant(7 : i32) : i32\n"
                      "  llvm.return %c : i32\n}\n")
    named = tmp_path / "named.o"
    result = pymlirjit("run", str(source), "-entry-point-result=i32", "-dump-object-file",
                       f"-object-filename={named}")
    assert (result.returncode, result.stdout) == (0, "7\n"), result.stderr
    assert named.read_bytes()[:4] == b"\x7fELF"
    result = pymlirjit("run", str(source), "-entry-point-result=i32", "--dump-object-file")
    assert result.returncode == 0, result.stderr
    assert Path(f"{source}.o").read_bytes()[:4] == b"\x7fELF"


def test_entry_point_result_must_match_the_entry() -> None:
    result = pymlirjit("run", str(DATA / "cli_llvm_dialect.mlir"), "-e", "mi",
                       "-entry-point-result=i64", "-O0", "-shared-libs=mlir_c_runner_utils")
    assert_one_error_line(result, "-entry-point-result=i64", "@mi", "i32")


def test_a_missing_runtime_library_is_named(tmp_path: Path) -> None:
    source = tmp_path / "clock.mlir"
    source.write_text("func.func @main() -> f64 {\n  %t = call @rtclock() : () -> f64\n"
                      "  return %t : f64\n}\nfunc.func private @rtclock() -> f64\n")
    assert_one_error_line(pymlirjit("run", str(source)), "nothing defines @rtclock",
                          "libmlir_c_runner_utils.so defines @rtclock")


def test_print_utilities_need_no_runtime_library() -> None:
    # pymlirjit serves printI64 and printNewline (see pymlirjit.runtime.runnerprint).
    result = pymlirjit("run", str(DATA / "cli_llvm_dialect.mlir"), "-e", "mi",
                       "-entry-point-result=i32")
    assert (result.returncode, result.stdout) == (0, "1\n42\n3\n"), result.stderr


def test_entry_that_cannot_cross_names_its_type(tmp_path: Path) -> None:
    source = tmp_path / "vectors.mlir"
    source.write_text("func.func @main(%a: memref<?xvector<4xf32>>) { return }\n")
    assert_one_error_line(pymlirjit("run", str(source)), "@main", "vector<4xf32>")


# -- check ----------------------------------------------------------------------------------

CHECKED = '''\
from pymlirjit import callback, mlir_kernel, f64

@mlir_kernel(source="""
func.func @good(%a: f64) -> f64 {
  return %a : f64
}""")
def good(a: f64) -> f64: ...

@mlir_kernel(source="""
func.func @bad(%a: f64) -> f64 {
  %r = arith.mulf %a, %undeclared_b : f64
  return %r : f64
}""")
def bad(a: f64) -> f64: ...

@mlir_kernel(source="func.func @stub(%a: f64) -> f64 { return %a : f64 }")
def stub(a: f64, b: f64) -> f64: ...

if __name__ == "__main__":
    raise SystemExit("the main block ran")
'''


def _line_and_column(text: str, marker: str) -> tuple[int, int]:
    for number, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return number, line.index(marker) + 1
    raise AssertionError(marker)


def test_check_compiles_each_kernel_and_reports_errors_on_their_python_lines(
        tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(CHECKED)
    result = pymlirjit("check", "model.py", cwd=tmp_path)
    assert_one_error_line(result, "model.py: 2 of 3 kernels failed to compile")
    good_line = _line_and_column(CHECKED, "@mlir_kernel")[0]
    line, column = _line_and_column(CHECKED, "%undeclared_b")
    stub_line = _line_and_column(CHECKED, '@mlir_kernel(source="func.func @stub')[0]
    assert result.stdout.splitlines() == [
        f"@mlir_kernel 'good' (model.py:{good_line}): ok",
        f"@mlir_kernel 'bad' (model.py:{line}:{column}): use of undeclared SSA value name",
        f"@mlir_kernel 'stub' (model.py:{stub_line}): SignatureError: the stub takes 2 "
        f"parameters, @stub in MLIR takes 1 ((f64) -> f64)",
    ]


def test_check_of_a_clean_file_succeeds_and_lists_only_its_own_kernels(tmp_path: Path) -> None:
    clean = CHECKED.split("@mlir_kernel(source=\"\"\"\nfunc.func @bad")[0]
    (tmp_path / "kernels.py").write_text(clean)
    (tmp_path / "user.py").write_text("from kernels import good\n"
                                      "from pymlirjit import mlir_kernel\n\n"
                                      "@mlir_kernel(source='func.func @own() { return }')\n"
                                      "def own() -> None: ...\n")
    result = pymlirjit("check", "user.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["@mlir_kernel 'own' (user.py:4): ok",
                                          "user.py: 1 kernel compiled"]


def test_check_reports_a_bad_callback_signature_string_at_its_column(tmp_path: Path) -> None:
    text = ("from pymlirjit import callback\n\n"
            "@callback(\"(f64) -> tensor<2xf64>\")\n"
            "def cb(x: float) -> None: ...\n")
    (tmp_path / "cbs.py").write_text(text)
    line, column = _line_and_column(text, '"(f64)')
    assert_one_error_line(pymlirjit("check", "cbs.py", cwd=tmp_path),
                          f"cannot import cbs.py: SignatureError: @callback 'cb' "
                          f"(cbs.py:{line}:{column}):", "is a tensor")


def test_check_of_a_missing_file_is_one_clean_line(tmp_path: Path) -> None:
    assert_one_error_line(pymlirjit("check", "nope.py", cwd=tmp_path), "no such file: nope.py")


def test_check_lists_a_generic_kernel_without_compiling_a_binding(tmp_path: Path) -> None:
    (tmp_path / "generic.py").write_text(
        "from pymlirjit import mlir_kernel\n\n"
        "@mlir_kernel(source='''\n"
        "func.func @twice(%x: !T) -> !T {\n"
        "  %y = arith.addf %x, %x : !T\n"
        "  return %y : !T\n"
        "}''')\n"
        "def twice(x): ...\n")
    result = pymlirjit("check", "generic.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "@mlir_kernel 'twice' (generic.py:3): generic over !T: compiled per binding at call "
        "time (check one with kernel.specialize(...).compile())",
        "generic.py: 0 kernels compiled, 1 generic (bound at call time)"]


def test_check_fails_on_a_generic_kernel_whose_every_binding_fails(tmp_path: Path) -> None:
    # An undefined SSA value: no binding can compile it (it exited 0, "generic").
    (tmp_path / "generic.py").write_text(
        "from pymlirjit import mlir_kernel\n\n"
        "@mlir_kernel(source='''\n"
        "func.func @twice(%x: !T) -> !T {\n"
        "  %r = arith.addf %x, %y : !T\n"
        "  return %r : !T\n"
        "}''')\n"
        "def twice(x): ...\n")
    result = pymlirjit("check", "generic.py", cwd=tmp_path)
    assert_one_error_line(result, "generic.py: 1 of 1 kernel failed to compile")
    assert "use of undeclared SSA value name" in result.stdout, result.stdout
    assert "generic over" not in result.stdout


def test_run_takes_and_saves_sparse_tensors_as_npz(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import scipy.sparse as sp

    a = sp.csr_array(np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 0.5]]))
    sp.save_npz(tmp_path / "a.npz", a)
    out = tmp_path / "squared.npz"
    code = cli.main(["run", str(DATA / "cli_sparse.mlir"), str(tmp_path / "a.npz"),
                     "-o", str(out)])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == ["3"]
    np.testing.assert_array_equal(sp.load_npz(out).toarray(), a.toarray() ** 2)
    code = cli.main(["run", str(DATA / "cli_sparse.mlir"), str(tmp_path / "a.npz")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Compressed Sparse Row sparse array of dtype 'float64'" in printed
    assert printed.splitlines()[-1] == "3"
    np.save(tmp_path / "dense.npy", a.toarray())
    assert_one_error_line(pymlirjit("run", str(DATA / "cli_sparse.mlir"),
                                    str(tmp_path / "dense.npy")),
                          "is not a scipy.sparse .npz file")


JITTED = '''\
from pymlirjit import MemRef, f64, jit


@jit
def scale(a: float, x: MemRef[f64, None]) -> None:
    for i in range(len(x)):
        x[i] *= a


@jit
def untyped(a, x):
    return a * x[0]


@jit
def broken(n: int) -> int:
    total = 0
    for i in range(n):
        total += undefined_name
    return total
'''


def test_check_compiles_annotated_jit_functions_and_reports_errors_at_their_lines(
        tmp_path: Path) -> None:
    (tmp_path / "jitted.py").write_text(JITTED)
    result = pymlirjit("check", "jitted.py", cwd=tmp_path)
    assert_one_error_line(result, "jitted.py: 1 of 3 kernels failed to compile")
    lines = result.stdout.splitlines()
    decorators = [n for n, text in enumerate(JITTED.splitlines(), 1) if text == "@jit"]
    line, column = _line_and_column(JITTED, "undefined_name")
    assert lines[0] == f"@jit 'scale' (jitted.py:{decorators[0]}): ok"
    assert lines[1] == (f"@jit 'untyped' (jitted.py:{decorators[1]}): compiled per argument "
                        f"types at call time (annotate every parameter, e.g. "
                        f"x: MemRef[f64, None], to check it here)")
    assert lines[2].startswith(f"@jit 'broken' (jitted.py:{decorators[2]}): JitTypeError: ")
    assert lines[2].endswith(f"jitted.py:{line}:{column}: name 'undefined_name' is not "
                             f"defined (in @jit function 'broken')")
    assert lines[3].strip() == "total += undefined_name"


def test_check_of_typed_jit_functions_only_succeeds(tmp_path: Path) -> None:
    text = JITTED.split("@jit\ndef untyped")[0]
    (tmp_path / "ok.py").write_text(text)
    result = pymlirjit("check", "ok.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "ok.py: 1 kernel compiled"
