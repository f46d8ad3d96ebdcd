"""A failing callback with a memref result, in code that cannot unwind (a parallel loop,
a module with shared libraries): the code runs on with an allocated empty array of the
declared layout (never a NULL descriptor), and the call raises the callback's error.
Each case in a child process: without the fix, it dies of SIGSEGV."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pymlirjit.boundary.native.failedresults import failed_layout
from pymlirjit.boundary.signature import as_signature


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr
    return done.stdout


# The callback's declared result, and the code using it (loads inside the declared
# static sizes, the first element of a dynamic one, a dim, a dealloc).
RESULTS = {
    # a trampoline
    "dynamic": ("memref<?xf64>", "%x = memref.load %m[%c0] : memref<?xf64>"),
    "static": ("memref<4xf64>", "%x = memref.load %m[%c3] : memref<4xf64>"),
    "rank2": ("memref<3x?xf64>", "%x = memref.load %m[%c2, %c0] : memref<3x?xf64>"),
    # a ctypes entry behind its native wrapper (a static stride)
    "strided": ("memref<4x3xf64, strided<[5, 1], offset: 2>>",
                "%x = memref.load %m[%c3, %c2] : memref<4x3xf64, strided<[5, 1], offset: 2>>"),
}

CHILD = """
    import numpy as np
    from pymlirjit import Session, callback

    session = Session()
    boom = ValueError("no array today")
    calls = []

    @callback("(index) -> {result}", name="make", session=session)
    def make(n):
        calls.append(n)
        raise boom

    body = '''
        %m = func.call @make(%n) : (index) -> {result}
        {use}
        memref.store %x, %out[%i] : memref<?xf64>
        memref.dealloc %m : {result}
    '''
    header = '''
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %n = memref.dim %out, %c0 : memref<?xf64>
    '''
    tail = '''
    func.func private @make(index) -> {result}
    '''
    if "{where}" == "parallel":
        source = ('func.func @k(%out: memref<?xf64>) {{' + header +
                  'scf.parallel (%i) = (%c0) to (%n) step (%c1) {{' + body +
                  'scf.reduce\\n}}\\nreturn\\n}}' + tail)
        kernel = session.compile(source, parallel=True).k
    else:
        source = ('func.func @k(%out: memref<?xf64>) {{' + header +
                  '%i = arith.constant 0 : index\\n' + body + 'return\\n}}' + tail)
        kernel = session.compile(source, shared_libs=["mlir_c_runner_utils"]).k
    out = np.full(64, -1.0)
    for attempt in range(3):
        try:
            kernel(out)
        except ValueError as error:
            assert error is boom, error
        else:
            raise AssertionError("no exception")
    assert calls, calls
    print("raised", set(out.tolist()) <= {{-1.0, 0.0}})
"""


@pytest.mark.parametrize("where", ["parallel", "shared_libs"])
@pytest.mark.parametrize("kind", RESULTS)
def test_a_failed_array_result_is_an_allocated_empty_array(where: str, kind: str) -> None:
    result, use = RESULTS[kind]
    code = CHILD.format(result=result, use=use, where=where)
    assert run_python(code).split() == ["raised", "True"]


def test_the_failed_layout_keeps_what_the_type_declares() -> None:
    (t,) = as_signature("() -> memref<4x?x3xf32, strided<[?, 7, 1], offset: ?>>").results
    assert failed_layout(t) == ([4, 0, 3], [7, 7, 1], 0)  # type: ignore[arg-type]
    (t,) = as_signature("() -> memref<2x?xf64>").results
    assert failed_layout(t) == ([2, 0], [1, 1], 0)  # type: ignore[arg-type]
    (t,) = as_signature("() -> memref<2x3xf64, strided<[3, 1], offset: 5>>").results
    assert failed_layout(t) == ([2, 3], [3, 1], 5)  # type: ignore[arg-type]


LINKED = """
    import numpy as np
    from pymlirjit import Session, callback, mlir_kernel

    session = Session()
    boom = ValueError("no array today")

    @callback("(index) -> memref<?xf64>", name="make", session=session)
    def make(n):
        raise boom

    @mlir_kernel(session=session, source='''
    func.func @inner(%n: index) -> memref<?xf64> {
      %m = call @make(%n) : (index) -> memref<?xf64>
      return %m : memref<?xf64>
    }
    func.func private @make(index) -> memref<?xf64>
    ''')
    def inner(n: int) -> np.ndarray: ...

    @mlir_kernel(session=session, callbacks=[inner], shared_libs=["mlir_c_runner_utils"],
                 source='''
    func.func @outer(%out: memref<?xf64>) {
      %c0 = arith.constant 0 : index
      %c3 = arith.constant 3 : index
      %m = call @inner(%c3) : (index) -> memref<?xf64>
      %x = memref.load %m[%c0] : memref<?xf64>
      memref.store %x, %out[%c0] : memref<?xf64>
      memref.dealloc %m : memref<?xf64>
      return
    }
    func.func private @inner(index) -> memref<?xf64>
    ''')
    def outer(out: np.ndarray) -> None: ...

    out = np.full(4, -1.0)
    for _ in range(3):
        try:
            outer(out)
        except ValueError as error:
            assert error is boom, error
        else:
            raise AssertionError("no exception")
    print("raised", out.tolist())
"""


def test_a_failed_linked_kernel_gives_its_caller_an_allocated_array() -> None:
    """A linked kernel's guard fails the caller's call, which cannot unwind (shared
    libraries), and gives it an array to run on."""
    assert run_python(LINKED).strip() == "raised [0.0, -1.0, -1.0, -1.0]"
