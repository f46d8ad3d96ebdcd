"""asyncruntime: MLIR's async runtime has one owner per process, which gives engines its
symbols and counts its tasks (the engines' behaviour is tested in test_engine.py)."""

from __future__ import annotations

import ctypes

from pymlirjit.asyncruntime import AsyncRuntime, has_hooks
from pymlirjit.pipeline import runtime_library


def test_only_the_async_runtime_gets_an_owner() -> None:
    utils = ctypes.CDLL(runtime_library("libmlir_c_runner_utils.so"))
    assert AsyncRuntime.get(runtime_library("libmlir_c_runner_utils.so"), utils) is None
    assert not has_hooks(ctypes.CDLL(None))


def test_one_owner_per_library_gives_its_symbols_and_counts_its_tasks() -> None:
    path = runtime_library("libmlir_async_runtime.so")
    library = ctypes.CDLL(path)
    assert has_hooks(library)
    owner = AsyncRuntime.get(path, library)
    assert owner is not None and AsyncRuntime.get(path, library) is owner
    assert owner.address("mlirAsyncRuntimeCreateToken") != 0
    # The schedulers are the counting shims, not the library's own functions.
    shim = owner.address("mlirAsyncRuntimeExecute")
    assert shim != 0 and shim != ctypes.cast(library.mlirAsyncRuntimeExecute,
                                             ctypes.c_void_p).value
    assert owner.address("printf") == 0  # the process's, not the library's
    assert owner.in_flight() == 0
