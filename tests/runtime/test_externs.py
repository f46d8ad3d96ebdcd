"""Native externs (pymlirjit.runtime.externs): declarations linked to native code, kernels
linking kernels, relinking, and the disk cache."""

from __future__ import annotations

import ctypes
import math
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import (
    Callback,
    CallbackRegistry,
    LinkError,
    Session,
    SignatureError,
    callback,
    extern,
    f64,
    mlir_kernel,
)
from pymlirjit.runtime.externs import LinkedExtern, linkable

LIBM = ctypes.CDLL("libm.so.6")
COS_ADDRESS = ctypes.cast(LIBM.cos, ctypes.c_void_p).value or 0

USES_COS = """
func.func private @cos(f64) -> f64
func.func @twice_cos(%x: f64) -> f64 {
  %c = call @cos(%x) : (f64) -> f64
  %r = arith.addf %c, %c : f64
  return %r : f64
}"""

SQ = """
func.func @sq(%x: f64) -> f64 {
  %r = arith.mulf %x, %x : f64
  return %r : f64
}"""

USES_SQ = """
func.func private @sq(f64) -> f64
func.func @sq_plus_one(%x: f64) -> f64 {
  %s = call @sq(%x) : (f64) -> f64
  %one = arith.constant 1.0 : f64
  %r = arith.addf %s, %one : f64
  return %r : f64
}"""


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (a crash cannot take the test run down); its
    stdout, once it exited cleanly and printed nothing on stderr."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", done.stderr
    return done.stdout


# -- extern(): targets and signatures ---------------------------------------------------

def test_signature_from_a_ctypes_function() -> None:
    LIBM.cos.restype, LIBM.cos.argtypes = ctypes.c_double, [ctypes.c_double]
    assert extern("cos", LIBM.cos).signature.mlir == "(f64) -> f64"
    assert extern("cos", COS_ADDRESS, "(f64) -> f64").signature.mlir == "(f64) -> f64"


def test_signature_from_a_numba_cfunc() -> None:
    numba = pytest.importorskip("numba")

    @numba.cfunc("float64(float64, int32, voidptr)")
    def f(x, n, p):  # type: ignore[no-untyped-def]
        return x

    linked = extern("f", f)
    assert linked.signature.mlir == "(f64, i32, !llvm.ptr) -> f64"
    assert linkable(linked).address == f.address


def test_an_address_needs_a_signature() -> None:
    with pytest.raises(TypeError, match="signature="):
        extern("cos", COS_ADDRESS)


@pytest.mark.parametrize("target, error, match", [
    ("cos", TypeError, "or a kernel"),
    (True, TypeError, "extern @f: target: cannot take the native address of True"),
    (0, ValueError, "not a valid address"),
    (-5, ValueError, "not a valid address"),
])
def test_bad_targets(target: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        extern("f", target, "(f64) -> f64")


def test_callbacks_refuse_what_cannot_link(session: Session) -> None:
    with pytest.raises(TypeError, match=r"callbacks must be @callback functions, "
                                        r"pymlirjit\.extern"):
        session.compile(USES_COS, callbacks=[math.cos])  # type: ignore[list-item]


def test_one_callback_not_in_a_list_is_a_type_error_saying_so(session: Session) -> None:
    cos = extern("cos", COS_ADDRESS, "(f64) -> f64")
    message = r"^callbacks must be a list .*; put it in a list: callbacks=\[\.\.\.\]$"
    with pytest.raises(TypeError, match=message):
        session.compile(USES_COS, callbacks=cos)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        @mlir_kernel(source=USES_COS, callbacks="cos")  # type: ignore[arg-type]
        def uses_cos(x: float) -> float: ...
    assert session.compile(USES_COS, callbacks=[cos]) is not None


def test_linked_externs_compare_by_address_and_do_not_pickle() -> None:
    one = linkable(extern("cos", COS_ADDRESS, "(f64) -> f64"))
    two = linkable(extern("cos", LIBM.cos, "(f64) -> f64"))
    assert isinstance(one, LinkedExtern) and one == two and hash(one) == hash(two)
    assert one != linkable(extern("cos", COS_ADDRESS + 16, "(f64) -> f64"))
    with pytest.raises(pickle.PicklingError, match="process-specific address"):
        pickle.dumps(one)


def test_an_extern_pickles_only_with_a_kernel_target(session: Session) -> None:
    with pytest.raises(pickle.PicklingError, match="address of this process"):
        pickle.dumps(extern("cos", COS_ADDRESS, "(f64) -> f64"))

    @mlir_kernel(source=SQ, session=session)
    def sq(x: f64) -> f64: ...

    copy = pickle.loads(pickle.dumps(extern("square", sq, "(f64) -> f64")))
    assert copy.name == "square" and copy.target is sq  # unpickled in-process: the same
    assert copy.signature.mlir == "(f64) -> f64"


def test_a_callback_stays_a_callback() -> None:
    cb = Callback(lambda x: x, "(f64) -> f64", "ident")
    assert linkable(cb) is cb


# -- linking ----------------------------------------------------------------------------

def test_extern_links_a_c_function_with_no_python_between(session: Session) -> None:
    module = session.compile(USES_COS, callbacks=[extern("cos", COS_ADDRESS, "(f64) -> f64")])
    assert module.twice_cos(0.5) == 2 * math.cos(0.5)
    # a module that links no Python callback opens no call record
    assert not module.twice_cos._links_callbacks
    again = session.compile(USES_COS, callbacks=[extern("cos", LIBM.cos, "(f64) -> f64")])
    assert again is module and session.cache_info().hits == 1


def test_signature_mismatch_names_the_extern_and_both_sides(session: Session) -> None:
    with pytest.raises(SignatureError, match=r"extern @cos: its target .* and its MLIR "
                                             r"declaration disagree: argument 1.*f32"):
        session.compile(USES_COS, callbacks=[extern("cos", COS_ADDRESS, "(f32) -> f64")])


def test_a_kernel_links_another_kernel_by_its_name(session: Session) -> None:
    @mlir_kernel(source=SQ, session=session)
    def sq(x: f64) -> f64: ...

    @mlir_kernel(source=USES_SQ, session=session, callbacks=[sq])
    def sq_plus_one(x: f64) -> f64: ...

    assert sq_plus_one(3.0) == 10.0


def test_a_kernel_links_under_another_name_and_its_signature_is_checked(
        session: Session) -> None:
    @mlir_kernel(source=SQ.replace("@sq", "@square"), session=session)
    def square(x: f64) -> f64: ...

    @mlir_kernel(source=USES_SQ, session=session, callbacks=[extern("sq", square)])
    def sq_plus_one(x: f64) -> f64: ...

    assert sq_plus_one(4.0) == 17.0
    with pytest.raises(SignatureError, match=r"extern @sq: its signature and kernel "
                                             r"@square disagree"):
        session.compile(USES_SQ, callbacks=[extern("sq", square, "(f32) -> f32")])


def test_a_kernel_passes_memrefs_to_another_kernel(session: Session) -> None:
    # both sides use the C interface: a memref crosses as a pointer to its descriptor
    @mlir_kernel(source="""
    func.func @total(%a: memref<?xf64>) -> f64 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %a, %c0 : memref<?xf64>
      %zero = arith.constant 0.0 : f64
      %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
        %x = memref.load %a[%i] : memref<?xf64>
        %t = arith.addf %acc, %x : f64
        scf.yield %t : f64
      }
      return %s : f64
    }""", session=session)
    def total(a: np.ndarray) -> float: ...

    @mlir_kernel(source="""
    func.func private @total(memref<?xf64>) -> f64
    func.func @mean(%a: memref<?xf64>) -> f64 {
      %s = call @total(%a) : (memref<?xf64>) -> f64
      %c0 = arith.constant 0 : index
      %n = memref.dim %a, %c0 : memref<?xf64>
      %i = arith.index_cast %n : index to i64
      %f = arith.sitofp %i : i64 to f64
      %r = arith.divf %s, %f : f64
      return %r : f64
    }""", session=session, callbacks=[total])
    def mean(a: np.ndarray) -> float: ...

    assert mean(np.arange(9.0)) == 4.0
    assert mean(np.arange(12.0)[3:]) == 7.0


def test_kernels_link_through_shims_and_result_pointers(session: Session) -> None:
    # f16, i1 and complex cross through MLIR shims; two results through a pointer
    @mlir_kernel(source="""
    func.func @neg_if(%x: f16, %b: i1, %z: complex<f64>) -> (f16, f64) {
      %n = arith.negf %x : f16
      %r = arith.select %b, %n, %x : f16
      %im = complex.im %z : complex<f64>
      return %r, %im : f16, f64
    }""", session=session)
    def neg_if(x, b, z): ...  # type: ignore[no-untyped-def]

    @mlir_kernel(source="""
    func.func private @neg_if(f16, i1, complex<f64>) -> (f16, f64)
    func.func @outer(%x: f16, %b: i1) -> (f16, f64) {
      %z = complex.constant [1.0, 2.5] : complex<f64>
      %r, %im = call @neg_if(%x, %b, %z) : (f16, i1, complex<f64>) -> (f16, f64)
      return %r, %im : f16, f64
    }""", session=session, callbacks=[neg_if])
    def outer(x, b): ...  # type: ignore[no-untyped-def]

    assert outer(1.5, True) == (-1.5, 2.5)
    assert outer(1.5, False) == (1.5, 2.5)


def test_a_kernel_linking_itself_or_a_cycle_is_a_link_error(session: Session) -> None:
    # callbacks= is fixed when a kernel is made, so only a changed kernel has a cycle
    @mlir_kernel(source=SQ.replace("@sq", "@b") + "\nfunc.func private @c(f64) -> f64",
                 session=session)
    def b(x: f64) -> f64: ...

    b._callbacks = (b,)  # linking itself
    with pytest.raises(LinkError, match="links itself"):
        b(1.0)

    calls_c = """
    func.func private @c(f64) -> f64
    func.func @d(%x: f64) -> f64 {
      %r = call @c(%x) : (f64) -> f64
      return %r : f64
    }"""
    first: list[object] = []

    @mlir_kernel(source=calls_c, session=session, callbacks=first)
    def d(x: f64) -> f64: ...

    @mlir_kernel(source=calls_c.replace("@c", "@e").replace("@d", "@c"), session=session,
                 callbacks=[extern("e", d)])
    def c(x: f64) -> f64: ...

    d._callbacks = (c,)  # d -> c -> d
    with pytest.raises(LinkError, match=r"cycle|links itself"):
        d(1.0)


def test_an_error_in_a_linked_kernels_callback_reaches_the_caller(session: Session) -> None:
    registry = CallbackRegistry()

    @callback(registry=registry, name="check")
    def check(x: f64) -> f64:
        if x < 0:
            raise ValueError(f"negative: {x}")
        return x

    @mlir_kernel(source="""
    func.func private @check(f64) -> f64
    func.func @checked(%x: f64) -> f64 {
      %r = call @check(%x) : (f64) -> f64
      return %r : f64
    }""", session=session, callbacks=[check])
    def checked(x: f64) -> f64: ...

    @mlir_kernel(source="""
    func.func private @checked(f64) -> f64
    func.func @outer(%x: f64) -> f64 {
      %r = call @checked(%x) : (f64) -> f64
      %s = arith.addf %r, %r : f64
      return %s : f64
    }""", session=session, callbacks=[checked])
    def outer(x: f64) -> f64: ...

    assert outer(2.0) == 4.0
    with pytest.raises(ValueError, match=r"negative: -1\.0"):
        outer(-1.0)
    assert outer(3.0) == 6.0  # and nothing is left over for later calls


# -- relinking: the target recompiles or its session is cleared -------------------------

RELINK_SETUP = """
import gc, threading, time
from pymlirjit import Session, callback, mlir_kernel, f64
target_session, session = Session(), Session()
factor = [2.0]

def define(k):
    @callback(session=target_session, name="k")
    def k_cb(x: f64) -> f64:
        return k
define(2.0)

@mlir_kernel(source='''
func.func private @k(f64) -> f64
func.func @scale(%x: f64) -> f64 {
  %k = call @k(%x) : (f64) -> f64
  %r = arith.mulf %x, %k : f64
  return %r : f64
}''', session=target_session)
def scale(x: f64) -> f64: ...
"""


def test_the_dependent_relinks_when_the_target_recompiles() -> None:
    out = run_python(RELINK_SETUP + """
@mlir_kernel(source='''
func.func private @scale(f64) -> f64
func.func @outer(%x: f64) -> f64 {
  %r = call @scale(%x) : (f64) -> f64
  return %r : f64
}''', session=session, callbacks=[scale])
def outer(x: f64) -> f64: ...

print(outer(1.0))
define(3.0)                  # the target relinks: so does outer
print(outer(1.0))
target_session.clear_cache()  # the target's code is gone from its session
gc.collect()
print(outer(1.0))
scale.invalidate()           # and in the other order: invalidated, then the caller
print(outer(1.0), scale(1.0))
""")
    assert out.split() == ["2.0", "3.0", "3.0", "3.0", "3.0"]


def test_clearing_the_target_from_a_callback_of_a_running_caller() -> None:
    out = run_python(RELINK_SETUP + """
@callback(session=session, name="clear")
def clear(i: f64) -> f64:
    if i == 3.0:
        target_session.clear_cache()  # the target's module goes: the caller still runs it
        define(5.0)
        gc.collect()
    return i

@mlir_kernel(source='''
func.func private @scale(f64) -> f64
func.func private @clear(f64) -> f64
func.func @loop(%n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %ii = arith.index_cast %i : index to i64
    %x = arith.sitofp %ii : i64 to f64
    %y = func.call @clear(%x) : (f64) -> f64
    %z = func.call @scale(%y) : (f64) -> f64
    %t = arith.addf %acc, %z : f64
    scf.yield %t : f64
  }
  return %s : f64
}''', session=session, callbacks=[scale])
def loop(n): ...

print(loop(6))   # linked to the code of k = 2 for the whole call: 2 * (0+..+5)
print(loop(6))   # relinked: 5 * 15
""")
    assert out.split() == ["30.0", "75.0"]


def test_another_thread_recompiles_the_target_while_the_caller_runs() -> None:
    out = run_python(RELINK_SETUP + """
@mlir_kernel(source='''
func.func private @scale(f64) -> f64
func.func @outer(%x: f64) -> f64 {
  %r = call @scale(%x) : (f64) -> f64
  return %r : f64
}''', session=session, callbacks=[scale])
def outer(x: f64) -> f64: ...

stop = threading.Event()
def churn():
    while not stop.is_set():
        target_session.clear_cache()
        gc.collect()
        time.sleep(0.002)
threads = [threading.Thread(target=churn)]
for t in threads: t.start()
seen = set()
try:
    for _ in range(60):
        seen.add(outer(1.5))
finally:
    stop.set()
    for t in threads: t.join()
print(sorted(seen))
""")
    assert out.split() == ["[3.0]"]


def test_modules_linking_replaced_code_are_forgotten() -> None:
    target_session, session = Session(), Session()

    @mlir_kernel(source=SQ, session=target_session)
    def sq(x: f64) -> f64: ...

    @mlir_kernel(source=USES_SQ, session=session, callbacks=[sq])
    def sq_plus_one(x: f64) -> f64: ...

    for _ in range(3):
        assert sq_plus_one(2.0) == 5.0
        target_session.clear_cache()  # sq recompiles: sq_plus_one relinks to new code
    assert sq_plus_one(2.0) == 5.0
    assert session.cache_info().misses == 4
    assert session.cache_info().size == 1  # not one module per version of sq


# -- the disk cache: an address is the process's ----------------------------------------

def test_a_module_linking_an_extern_is_not_stored_on_disk(tmp_path: Path) -> None:
    first = Session(cache_dir=tmp_path)
    module = first.compile(USES_COS, callbacks=[extern("cos", COS_ADDRESS, "(f64) -> f64")])
    assert module.twice_cos(0.0) == 2.0
    stored = [p for p in tmp_path.rglob("*") if p.is_file()]
    # the same source with a callback instead is cached: the store works here
    @callback("(f64) -> f64", name="cos", registry=CallbackRegistry())
    def py_cos(x: float) -> float:
        return math.cos(x)

    first.compile(USES_COS, callbacks=[py_cos])
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) > len(stored)
    second = Session(cache_dir=tmp_path)
    again = second.compile(USES_COS, callbacks=[extern("cos", COS_ADDRESS, "(f64) -> f64")])
    assert again.twice_cos(0.0) == 2.0
    assert second.cache_info().disk_hits == 0
