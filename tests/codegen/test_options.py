"""Compile options have one home: every option of ``mlir_kernel`` is an OptionOverrides
field, reaches the session's CompileOptions, the cache key, generic kernels' bindings and
kernels pickled by value."""

from __future__ import annotations

import dataclasses
import inspect
import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.options import FLAGS, CompileOptions, OptionOverrides
from pymlirjit.lowering.pipeline import DEFAULT_PIPELINE, normalize_pipeline

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = [f.name for f in dataclasses.fields(OptionOverrides)]
#: A value other than the default for each option.
SET = {"pipeline": [*DEFAULT_PIPELINE, "canonicalize"], "opt_level": 3, "shared_libs": (),
       "fastmath": True, "parallel": True, "boundscheck": True, "error_model": "numpy"}


def test_every_option_is_a_keyword_of_each_entry_point() -> None:
    assert sorted(SET) == sorted(OPTIONS)
    for entry in (mlir_kernel, Session.compile, Session.__init__):
        params = inspect.signature(entry).parameters
        missing = [name for name in OPTIONS if name not in params]
        assert not missing, f"{entry.__qualname__} lacks {missing}"
    assert set(FLAGS) <= set(OPTIONS)


def test_overrides_apply_checked_and_leave_the_rest() -> None:
    base = CompileOptions.make()
    assert base.overridden(OptionOverrides()) is base
    changed = base.overridden(OptionOverrides.of(**SET))
    assert changed.pipeline == normalize_pipeline(SET["pipeline"])
    assert (changed.opt_level, changed.fastmath, changed.parallel, changed.boundscheck,
            changed.error_model) == (3, True, True, True, "numpy")
    assert base.overridden(OptionOverrides(fastmath=True)).opt_level == base.opt_level
    assert base.replace(boundscheck=True) == base.overridden(OptionOverrides(boundscheck=True))
    for flag in FLAGS:
        with pytest.raises(TypeError, match=f"{flag} must be True or False"):
            base.overridden(OptionOverrides(**{flag: 1}))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        base.overridden(OptionOverrides(opt_level=7))
    with pytest.raises(ValueError, match="error_model must be one of 'python', 'numpy'"):
        base.overridden(OptionOverrides(error_model="c"))


def test_every_flag_is_in_the_cache_key() -> None:
    plain = CompileOptions.make().pipeline_key
    for flag in FLAGS:
        key = CompileOptions.make(**{flag: True}).resolved().pipeline_key
        assert key != plain and f"+{flag}" in key
    assert CompileOptions.make(error_model="numpy").pipeline_key == plain + " +numpy-errors"


def test_a_kernel_pickled_by_value_keeps_every_option(tmp_path: Path) -> None:
    # Made in __main__ of another process, so that it pickles by value and unpickles
    # here as a kernel of its own (not the original, interned in its process).
    code = f"""
        import pickle, sys
        import numpy as np
        from pymlirjit import mlir_kernel
        @mlir_kernel(source='''
        func.func @get(%a: memref<?xf64>, %i: index) -> f64 {{
          %x = memref.load %a[%i] : memref<?xf64>
          return %x : f64
        }}''', **{SET!r})
        def get(a: np.ndarray, i: int) -> float: ...
        sys.stdout.buffer.write(pickle.dumps(get))
        """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          timeout=120, env=env, cwd=tmp_path, check=True)
    back = pickle.loads(done.stdout)
    assert back._overrides == OptionOverrides.of(**SET)
    assert back(np.arange(3.0), 2) == 2.0
    chosen = back._options  # what it compiled with
    assert chosen is not None and chosen.opt_level == 3
    assert all(getattr(chosen, flag) for flag in FLAGS)
    with pytest.raises(IndexError, match="@get"):  # boundscheck came along
        back(np.arange(3.0), 5)


def test_a_generic_kernels_bindings_keep_every_option() -> None:
    @mlir_kernel(source="""
    func.func @twice(%x: !T) -> !T {
      %r = arith.addf %x, %x : !T
      return %r : !T
    }""", fastmath=True, boundscheck=True, opt_level=3)
    def twice(x: float) -> float: ...

    bound = twice.specialize(T="f32")
    assert bound._overrides == OptionOverrides(opt_level=3, fastmath=True, boundscheck=True)
    assert bound(1.5) == 3.0


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("shared_libs", "mlir_c_runner_utils", "got str 'mlir_c_runner_utils'; pass "
                                           "['mlir_c_runner_utils']"),
    ("shared_libs", Path("libmine.so"), "got PosixPath"),
    ("shared_libs", [5], "got an item 5 of type int"),
    ("pipeline", 5, "got int 5"),
    ("pipeline", ["convert-func-to-llvm", 1], "got an item 1 of type int"),
])
def test_one_string_or_a_wrong_item_for_a_list_option_is_a_type_error_naming_it(
        keyword: str, value: object, message: str) -> None:
    # A string iterated would give its characters ('m' is not an MLIR runtime library).
    source = "func.func @f(%x: f64) -> f64 { return %x : f64 }"
    for make in (lambda: Session(**{keyword: value}),
                 lambda: Session().compile(source, **{keyword: value})):
        with pytest.raises(TypeError, match=rf"^{keyword} must be .*{re.escape(message)}"):
            make()
