"""The ctypes prototypes: each one called for real (libc, pthread, CPython, MLIR's C API)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymlirjit.boundary import ffi
from tests.threads import run_in_threads

FFI_PATH = Path(ffi.__file__)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_importing_ffi_loads_no_mlir_and_no_llvm() -> None:
    # Loaded on its own (the package's __init__ imports MLIR for other reasons).
    result = _run(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ffi_alone', {str(FFI_PATH)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('mlir', 'llvmlite', 'pymlirjit'))),"
        " 'libMLIRPythonCAPI' in maps, 'libLLVM' in maps)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "False", "False"]


def test_malloc_and_free_round_trip() -> None:
    address = ffi.malloc(64)
    assert isinstance(address, int) and address != 0
    try:
        ctypes.memmove(address, b"pymlirjit" * 7, 63)
        assert ctypes.string_at(address, 9) == b"pymlirjit"
    finally:
        ffi.free(address)
    ffi.free(None)  # free(NULL) is a no-op


def test_fflush_puts_c_output_before_later_python_output() -> None:
    # stdout is a pipe, so C buffers printf: without the flush its line would come last.
    result = _run(
        "import ctypes, os, sys\n"
        f"sys.path.insert(0, {str(FFI_PATH.parents[2])!r})\n"
        "from pymlirjit.boundary import ffi\n"
        "ctypes.CDLL(None).printf(b'from C\\n')\n"
        "ffi.fflush(None)\n"
        "os.write(1, b'from Python\\n')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["from C", "from Python"]


def test_a_pthread_key_holds_one_value_per_thread() -> None:
    key = ctypes.c_uint(0)
    assert ffi.pthread_key_create(ctypes.byref(key), None) == 0
    assert ffi.pthread_setspecific(key, 0x1234) == 0
    seen = run_in_threads(lambda _: ffi.pthread_getspecific(key), range(1))
    assert seen == [None]  # NULL in a thread that set nothing
    assert ffi.pthread_getspecific(key) == 0x1234
    assert ffi.pthread_setspecific(key, None) == 0
    assert ffi.pthread_getspecific(key) is None


def test_capsule_pointer_reads_a_capsule_under_its_own_or_a_given_name() -> None:
    from mlir import ir

    with ir.Context() as context:
        capsule = context._CAPIPtr
        own = ffi.capsule_pointer(capsule)
        assert own != 0
        assert ffi.capsule_pointer(capsule, b"mlir.ir.Context._CAPIPtr") == own
        with pytest.raises(ValueError):
            ffi.capsule_pointer(capsule, b"some.other.name")
    # numpy's C API table: a capsule without a name.
    core = getattr(np, "_core", None) or np.core
    assert ffi.capsule_pointer(core._multiarray_umath._ARRAY_API) != 0
    with pytest.raises(ValueError):
        ffi.capsule_pointer(3)


def test_pass_manager_run_on_op_reports_success_and_failure() -> None:
    from mlir import ir
    from mlir.passmanager import PassManager

    with ir.Context() as context:
        module = ir.Module.parse("func.func @f(%a: f32) -> f32 { return %a : f32 }")
        passes = PassManager.parse("builtin.module(convert-func-to-llvm)")
        assert ffi.pass_manager_run_on_op(ffi.capsule_pointer(passes._CAPIPtr),
                                          ffi.capsule_pointer(module.operation._CAPIPtr))
        assert "llvm.func @f" in str(module)
        # A pass manager anchored on func.func cannot run on the module.
        errors: list[str] = []
        handler = context.attach_diagnostic_handler(lambda d: errors.append(str(d)) or True)
        try:
            misplaced = PassManager.parse("func.func(canonicalize)")
            assert not ffi.pass_manager_run_on_op(ffi.capsule_pointer(misplaced._CAPIPtr),
                                                  ffi.capsule_pointer(module.operation._CAPIPtr))
        finally:
            handler.detach()
        assert errors


def test_execution_engine_lookup_finds_the_c_interface_and_nothing_else() -> None:
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine
    from mlir.passmanager import PassManager

    with ir.Context():
        module = ir.Module.parse(
            "func.func @twice(%a: f64) -> f64 attributes {llvm.emit_c_interface} {\n"
            "  %b = arith.addf %a, %a : f64\n  return %b : f64\n}")
        PassManager.parse("builtin.module(convert-arith-to-llvm,convert-func-to-llvm,"
                          "reconcile-unrealized-casts)").run(module.operation)
        engine = ExecutionEngine(module)
        pointer = ffi.capsule_pointer(engine._CAPIPtr)
        address = ffi.execution_engine_lookup(pointer, "_mlir_ciface_twice")
        assert address != 0
        twice = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(address)
        assert twice(1.25) == 2.5
        assert ffi.execution_engine_lookup(pointer, "_mlir_ciface_nothing") == 0


def test_dlclose_unloads_a_library_loaded_once(tmp_path: Path) -> None:
    compiler = shutil.which("cc")
    if compiler is None:  # pragma: no cover - every machine of the project has one
        pytest.skip("no C compiler to build a library")
    library = tmp_path / "libffi_probe.so"
    source = tmp_path / "probe.c"
    source.write_text("int ffi_probe(void) { return 42; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)],
                   check=True, timeout=120)
    result = _run(
        "import ctypes, sys\n"
        f"sys.path.insert(0, {str(FFI_PATH.parents[2])!r})\n"
        "from pymlirjit.boundary import ffi\n"
        f"library = ctypes.CDLL({str(library)!r})\n"
        "print(library.ffi_probe())\n"
        "print('libffi_probe' in open('/proc/self/maps').read())\n"
        "ffi.dlclose(library._handle)\n"
        "print('libffi_probe' in open('/proc/self/maps').read())\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["42", "True", "False"]


def test_object_base_finds_the_library_holding_an_address() -> None:
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.printf, ctypes.c_void_p).value or 0
    base = ffi.object_base(address)
    assert 0 < base <= address
    assert ffi.object_base(0) == 0


def test_ufunc_from_loops_makes_a_ufunc_that_owns_what_it_is_kept_with() -> None:
    import gc
    import weakref
    from typing import Any

    prototype = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_ssize_t),
                                 ctypes.POINTER(ctypes.c_ssize_t), ctypes.c_void_p)

    def twice(args: Any, dims: Any, steps: Any, data: Any) -> None:  # a loop in Python
        for i in range(dims[0]):
            x = ctypes.c_double.from_address(args[0] + i * steps[0])
            ctypes.c_double.from_address(args[1] + i * steps[1]).value = 2 * x.value

    loop = prototype(twice)
    functions = (ctypes.c_void_p * 1)(ctypes.cast(loop, ctypes.c_void_p).value)
    data = (ctypes.c_void_p * 1)()
    types = ctypes.create_string_buffer(bytes([np.dtype("f8").num] * 2), 2)
    ufunc = ffi.ufunc_from_loops(ctypes.addressof(functions), ctypes.addressof(data),
                                 ctypes.addressof(types), 1, 1, 1, -1, b"twice", b"doc", None,
                                 None)
    assert isinstance(ufunc, np.ufunc) and ufunc.types == ["d->d"]

    class Keep:
        pass

    keep = Keep()
    keep.parts = (loop, functions, data, types)  # type: ignore[attr-defined]
    alive = weakref.ref(keep)
    assert not ffi.ufunc_keep_alive(ufunc, ctypes.addressof(data), ctypes.addressof(data),
                                    ctypes.addressof(types), keep)  # a layout not found
    assert ffi.ufunc_keep_alive(ufunc, ctypes.addressof(functions), ctypes.addressof(data),
                                ctypes.addressof(types), keep)
    assert not ffi.ufunc_keep_alive(ufunc, ctypes.addressof(functions),
                                    ctypes.addressof(data), ctypes.addressof(types), keep)
    del keep, loop, functions, data, types
    gc.collect()
    assert alive() is not None
    assert ufunc(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    del ufunc
    gc.collect()
    assert alive() is None
