"""pymlirjit.runtime.objectfile: object code linked in this process with llvmlite."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlirjit import LinkError
from pymlirjit.runtime.module import build_engine
from pymlirjit.runtime.objectfile import ObjectEngine, check_object_file
from pymlirjit.runtime.prepare import CompileOptions, lower, prepare

SOURCE = """
func.func @twice(%x: f64) -> f64 {
  %r = arith.addf %x, %x : f64
  return %r : f64
}
"""


@pytest.fixture(scope="module")
def object_code(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    options = CompileOptions.make()
    engine = build_engine(lower(prepare(SOURCE, options, lambda name: None), options),
                          options)
    engine.function_address("_mlir_ciface_twice")  # generates the code dumped next
    path = Path(tmp_path_factory.mktemp("objectfile"), "module.o")
    engine.dump_to_object_file(str(path))
    return path.read_bytes()


def test_object_code_runs_through_its_address(object_code: bytes) -> None:
    import ctypes

    engine = ObjectEngine(object_code, {})
    twice = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
        engine.function_address("_mlir_ciface_twice"))
    assert twice(21.0) == 42.0


def test_unknown_functions_raise_link_error(object_code: bytes) -> None:
    engine = ObjectEngine(object_code, {})
    with pytest.raises(LinkError, match="no_such_function"):
        engine.function_address("no_such_function")


def test_undefined_symbols_are_refused_before_llvm_sees_them(object_code: bytes) -> None:
    # LLVM would abort the process on a symbol it cannot resolve.
    with pytest.raises(LinkError, match="pymlirjit_test_undefined") as info:
        ObjectEngine(object_code, {}, needed=["pymlirjit_test_undefined"])
    assert info.value.missing == ("pymlirjit_test_undefined",)


@pytest.mark.parametrize("damage", ["empty", "garbage", "header only", "half", "one byte short",
                                    "another class", "shared object", "another machine"])
def test_what_is_not_an_object_file_here_is_refused_before_llvm_sees_it(
        object_code: bytes, damage: str) -> None:
    # LLVM crashed the process on garbage handed to it as an object file.
    code = {"empty": b"", "garbage": b"garbage", "header only": object_code[:64],
            "half": object_code[:len(object_code) // 2],
            "one byte short": object_code[:-1],
            "another class": object_code[:4] + b"\x01" + object_code[5:],
            "shared object": object_code[:16] + b"\x03\x00" + object_code[18:],
            "another machine": object_code[:18] + b"\xb7\x00" + object_code[20:],
            }[damage]
    with pytest.raises(LinkError, match=r"ELF|empty"):
        ObjectEngine(code, {})
    with pytest.raises(LinkError, match="ELF"):
        ObjectEngine(object_code, {}, objects=[code or b"x"])
    check_object_file(object_code)  # the whole one passes
