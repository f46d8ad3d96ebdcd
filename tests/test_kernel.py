"""@mlir_kernel and compiled functions: arguments, results, checks, memory."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MemRef, Session, SignatureError, f32, f64, i8, i32, mlir_kernel
from tests.conftest import rss_bytes
from tests.test_callbacks import SCALAR_CASES

IDENTITY = """
func.func @same(%a: {t}) -> {t} {{
  return %a : {t}
}}
"""


@pytest.mark.parametrize(("mlir_type", "value", "_other"), SCALAR_CASES)
def test_every_scalar_type_through_a_kernel(session: Session, mlir_type: str, value: object,
                                            _other: object) -> None:
    same = session.compile(IDENTITY.format(t=mlir_type)).same
    result = same(value)
    assert result == value and type(result) is type(value)


def test_the_design_example(session: Session) -> None:
    from pymlirjit import callback

    @callback(session=session)
    def scale(x: f32, k: i32) -> f32:
        return x / 2 + k / 2

    @mlir_kernel(source="""
    func.func @add(%a: f32, %b: i32) -> f32 {
      %r = call @scale(%a, %b) : (f32, i32) -> f32
      return %r : f32
    }
    func.func private @scale(f32, i32) -> f32
    """, session=session)
    def add(a: f32, b: i32) -> f32: ...

    assert add(42.0, 2) == 22.0
    assert add.signature.mlir == "(f32, i32) -> f32"
    assert [p.name for p in add.signature.params] == ["a", "b"]
    assert "llvm.func" in add.lowered_mlir
    assert add.engine is not None


def test_source_from_a_path(tmp_path: Path, session: Session) -> None:
    path = tmp_path / "neg.mlir"
    path.write_text("""
    func.func @neg(%a: f64) -> f64 {
      %r = arith.negf %a : f64
      return %r : f64
    }""")

    @mlir_kernel(source=path, session=session)
    def neg(a: float) -> float: ...

    assert neg(2.5) == -2.5


def test_kernel_name_differs_from_stub(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="i64"), name="same", session=session)
    def other_name(a: int) -> int: ...

    assert other_name(7) == 7


def test_several_kernels_from_one_module_and_several_results(session: Session) -> None:
    module = session.compile("""
    func.func @swap(%a: i32, %b: f64) -> (f64, i32) {
      return %b, %a : f64, i32
    }
    func.func @inc(%a: i32) -> i32 {
      %c = arith.constant 1 : i32
      %r = arith.addi %a, %c : i32
      return %r : i32
    }""")
    assert module.swap(3, 0.5) == (0.5, 3)
    assert module["inc"](41) == 42


MEMREF_SOURCE = """
func.func @scale(%a: memref<?x?xf64, strided<[?, ?], offset: ?>>, %k: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x?xf64, strided<[?, ?], offset: ?>>
  %m = memref.dim %a, %c1 : memref<?x?xf64, strided<[?, ?], offset: ?>>
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %m step %c1 {
      %x = memref.load %a[%i, %j] : memref<?x?xf64, strided<[?, ?], offset: ?>>
      %y = arith.mulf %x, %k : f64
      memref.store %y, %a[%i, %j] : memref<?x?xf64, strided<[?, ?], offset: ?>>
    }
  }
  return
}
"""


@pytest.mark.parametrize("view", ["plain", "transposed", "sliced", "reversed"])
def test_strided_memref_arguments_are_zero_copy(session: Session, view: str) -> None:
    scale = session.compile(MEMREF_SOURCE).scale
    base = np.arange(30, dtype=np.float64).reshape(5, 6)
    expected = base.copy()
    select = {
        "plain": lambda a: a,
        "transposed": lambda a: a.T,
        "sliced": lambda a: a[1:4, ::2],
        "reversed": lambda a: a[::-1, ::-2],
    }[view]
    select(expected)[...] *= 3
    scale(select(base), 3.0)
    np.testing.assert_array_equal(base, expected)


def test_identity_layout_needs_a_contiguous_array(session: Session) -> None:
    module = session.compile("func.func @f(%a: memref<?x?xf32>) { return }")
    with pytest.raises(ValueError, match="C-contiguous"):
        module.f(np.zeros((3, 4), np.float32).T)


@pytest.mark.parametrize(("argument", "error", "message"), [
    (np.zeros((2, 3), np.float64), TypeError, "float32 array"),
    (np.zeros((2, 3, 1), np.float32), ValueError, "rank-2"),
    (np.zeros((2, 4), np.float32), ValueError, "dim 1 must be 3"),
    ([[1.0] * 3] * 2, TypeError, "numpy array"),
])
def test_bad_array_arguments_name_the_parameter(session: Session, argument: object,
                                                error: type[Exception], message: str) -> None:
    module = session.compile("func.func @f(%a: memref<?x3xf32>) { return }")
    with pytest.raises(error, match=message) as caught:
        module.f(argument)
    assert "f() argument 1:" in str(caught.value)


def test_kernel_errors_use_the_stub_parameter_names(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="i8"), name="same", session=session)
    def small(value: i8) -> i8: ...

    with pytest.raises(ValueError, match=r"small\(\) argument 1 \('value'\): 300 is out of "
                                         r"range for i8"):
        small(300)
    with pytest.raises(ValueError, match=r"argument 1 \('value'\).*out of range for i8"):
        small(value=300)  # bound by name, then handed to the Python path by the entry
    with pytest.raises(TypeError, match="expected an int"):
        small(float("inf"))
    with pytest.raises(TypeError, match="takes 1 arguments"):
        small(1, 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'other'"):
        small(other=1)


def test_stub_annotations_are_checked(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="f32"), name="same", session=session)
    def wrong(a: f64) -> f64: ...

    with pytest.raises(SignatureError, match=r"f64.*f32|f32.*f64"):
        wrong(1.0)


def test_missing_kernel_name(session: Session) -> None:
    @mlir_kernel(source=IDENTITY.format(t="f32"), session=session)
    def absent(a: f32) -> f32: ...

    with pytest.raises(SignatureError, match=r"no public function @absent.*same"):
        absent(1.0)


def test_tensor_arguments_and_results(session: Session) -> None:
    module = session.compile("""
    func.func @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = tensor.dim %a, %c0 : tensor<?x?xf32>
      %m = tensor.dim %b, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%n, %m) : tensor<?x?xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
                         outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }""")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(module.matmul(a, b), a @ b)
    np.testing.assert_allclose(module.matmul(b.T.copy().T[:, :2].T, a.T), b[:, :2].T @ a.T)


def test_memref_results_own_their_memory_and_are_freed(session: Session) -> None:
    fill = session.compile("""
    func.func @fill(%n: index, %v: f64) -> memref<?xf64> {
      %m = memref.alloc(%n) : memref<?xf64>
      linalg.fill ins(%v : f64) outs(%m : memref<?xf64>)
      return %m : memref<?xf64>
    }""").fill
    result = fill(4, 2.5)
    np.testing.assert_array_equal(result, [2.5] * 4)
    view = result[1:]
    del result
    gc.collect()
    np.testing.assert_array_equal(view, [2.5] * 3)  # a view keeps the buffer alive


def test_memref_results_do_not_leak(session: Session) -> None:
    fill = session.compile("""
    func.func @fill(%n: index) -> memref<?xf64> {
      %m = memref.alloc(%n) : memref<?xf64>
      return %m : memref<?xf64>
    }""").fill
    rss = rss_bytes() // 1024
    for _ in range(200):
        fill(1 << 17)  # 1 MiB each: 200 MiB if nothing were freed
    gc.collect()
    assert rss_bytes() // 1024 - rss < 50 * 1024


def test_returning_an_argument_aliases_it(session: Session) -> None:
    module = session.compile("""
    func.func @first_row(%a: memref<3x4xf32>) -> memref<4xf32, strided<[1]>> {
      %s = memref.subview %a[0, 0] [1, 4] [1, 1]
          : memref<3x4xf32> to memref<4xf32, strided<[1]>>
      return %s : memref<4xf32, strided<[1]>>
    }""")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    row = module.first_row(data)
    row[0] = 100
    assert data[0, 0] == 100  # the same memory, not freed twice
    del data
    gc.collect()
    assert row[0] == 100


def test_unranked_memref_argument_and_result(session: Session) -> None:
    module = session.compile("""
    func.func @echo(%a: memref<*xf32>) -> memref<*xf32> {
      return %a : memref<*xf32>
    }""")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(module.echo(data), data)


def test_memref_annotation_in_stub(session: Session) -> None:
    @mlir_kernel(source="func.func @f(%a: memref<2x2xf32>) { return }", session=session)
    def f(a: MemRef[f32, 2, 2]) -> None: ...

    assert f(np.zeros((2, 2), np.float32)) is None


def test_tensor_arguments_are_values(session: Session) -> None:
    module = session.compile("""
    func.func @set_first(%t: tensor<?xf64>, %v: f64) -> tensor<?xf64> {
      %c0 = arith.constant 0 : index
      %r = tensor.insert %v into %t[%c0] : tensor<?xf64>
      return %r : tensor<?xf64>
    }
    func.func @same(%t: tensor<?xf64>) -> tensor<?xf64> {
      return %t : tensor<?xf64>
    }""")
    data = np.arange(4.0)
    assert module.set_first(data, 9.0).tolist() == [9.0, 1.0, 2.0, 3.0]
    assert data.tolist() == [0.0, 1.0, 2.0, 3.0]
    echoed = module.same(data)
    echoed[0] = 5.0
    assert data[0] == 0.0
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    assert module.same(read_only).tolist() == [0.0, 1.0, 2.0]


def test_stub_may_annotate_arrays_with_ndarray(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @echo(%a: memref<?xf64>) -> memref<?xf64> {
      return %a : memref<?xf64>
    }""", session=session)
    def echo(a: np.ndarray) -> np.ndarray: ...

    assert echo(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]


TWICE = """
func.func @twice(%x: f64) -> f64 {
  %r = arith.addf %x, %x : f64
  return %r : f64
}
"""


def test_cache_true_keeps_the_machine_code_on_disk(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import pymlirjit.session

    monkeypatch.setenv("PYMLIRJIT_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.setattr(pymlirjit.session, "_default_disk", None)
    for expected_hits in (0, 1):  # a new session, as a new process would have
        session = Session()

        @mlir_kernel(source=TWICE, session=session, cache=True)
        def twice(x: float) -> float: ...

        assert twice(2.5) == 5.0
        assert pymlirjit.session._default_disk is not None
        assert pymlirjit.session._default_disk.hits == expected_hits
    assert len(list((tmp_path / "default").glob("*.entry"))) == 1

    own = Session(cache_dir=tmp_path / "own")

    @mlir_kernel(source=TWICE, name="twice", session=own, cache=True)
    def twice_here(x: float) -> float: ...

    assert twice_here(1.0) == 2.0
    assert own.disk_cache is not None and own.disk_cache.stores == 1

    @mlir_kernel(source=TWICE, name="twice", session=Session(cache_dir=tmp_path / "off"),
                 cache=False)
    def twice_uncached(x: float) -> float: ...

    assert twice_uncached(1.0) == 2.0
    assert not (tmp_path / "off").exists()


# Lifetime of compiled code (docs/threads.md): anything that could free code still running
# would crash the interpreter, so these run in a fresh one and check how it ended.


def run_python(code: str, *args: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter; fail (with its output) unless it exits 0."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))
    assert done.returncode == 0, (f"exit status {done.returncode}\n"
                                  f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    assert done.stderr == "", done.stderr
    return done.stdout


RECOMPILE_DURING_A_PYTHON_PATH_CALL = """
import numpy as np
from pymlirjit import Session, callback, f64, mlir_kernel

session = Session()
inner = []

@callback(session=session)
def hook(x: f64) -> f64:
    if x == 2.0 and not inner:
        inner.append(True)
        session.clear_cache()  # the kernel lets go of the function running this call
        inner.append(kernel(1.0))  # and compiles a new one
    return x * 3

@mlir_kernel(source='''
func.func @kernel(%x: f64) -> f64 {
  %r = func.call @hook(%x) : (f64) -> f64
  return %r : f64
}
func.func private @hook(f64) -> f64
''', session=session)
def kernel(x: f64) -> f64: ...

class Real(float):
    pass

assert kernel(4.0) == 12.0  # compiled; later calls go to the native entry
# A float subclass: the native entry hands the call to the Python path, which returns
# into the native entry once the callback has replaced the kernel's function.
assert kernel(Real(2.0)) == 6.0
assert inner == [True, 3.0], inner
assert kernel(Real(5.0)) == 15.0 and kernel(5.0) == 15.0
print("ok")
"""


def test_code_outlives_a_recompile_during_a_python_path_call() -> None:
    assert run_python(RECOMPILE_DURING_A_PYTHON_PATH_CALL) == "ok\n"


LIFETIME_STRESS = """
import sys
import threading
import time

import numpy as np
from pymlirjit import Session, callback, f64, mlir_kernel

seconds = float(sys.argv[1])
session = Session()

def define_hook():
    @callback(session=session)
    def hook(x: f64) -> f64:
        return x * 3
    return hook

define_hook()
PLAIN = '''
func.func @plain(%x: f64) -> f64 {
  %r = arith.addf %x, %x : f64
  return %r : f64
}'''
HOOKED = '''
func.func @hooked(%x: f64) -> f64 {
  %r = func.call @hook(%x) : (f64) -> f64
  return %r : f64
}
func.func private @hook(f64) -> f64
'''
kernels = []
# The module policy keeps the GIL with callbacks (False) and releases it only when other
# threads exist without (None): every other choice makes each compile generate a fresh
# native entry, owned by the kernel's function alone.
for release_gil in (True, False, None):
    kernels.append((mlir_kernel(source=PLAIN, name="plain", session=session,
                                release_gil=release_gil)(lambda x: None), 2.0))
    kernels.append((mlir_kernel(source=HOOKED, name="hooked", session=session,
                                release_gil=release_gil)(lambda x: None), 3.0))
for kernel, factor in kernels:
    assert kernel(1.0) == factor

stop = time.monotonic() + seconds
calls = [0]
failures = []

class Real(float):
    pass

def call_kernels():
    try:
        n = 0
        while time.monotonic() < stop:
            for kernel, factor in kernels:
                # A float takes the native entry; a float subclass its fallback, the
                # Python path.
                assert kernel(2.0) == 2.0 * factor
                assert kernel(Real(5.0)) == 5.0 * factor
                n += 2
        calls[0] += n
    except BaseException as error:
        failures.append(error)

threads = [threading.Thread(target=call_kernels) for _ in range(3)]
for thread in threads:
    thread.start()
invalidations = 0
while time.monotonic() < stop:
    session.clear_cache()
    if invalidations % 3 == 0:
        define_hook()  # a redefined callback: kernels relink
    kernels[invalidations % len(kernels)][0].compile()
    invalidations += 1
for thread in threads:
    thread.join()
assert not failures, failures
assert calls[0] > 0 and invalidations > 0
print("ok", calls[0], invalidations)
"""


def test_code_outlives_invalidation_while_threads_call() -> None:
    """Clearing the cache, redefining a callback and recompiling in one thread while
    three threads call kernels (natively and through the Python path) with every GIL
    policy."""
    out = run_python(LIFETIME_STRESS, "4")
    assert out.startswith("ok "), out


@pytest.mark.slow
def test_code_outlives_invalidation_while_threads_call_soak(request: pytest.FixtureRequest,
                                                            ) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("slow variant: run with -m slow")
    out = run_python(LIFETIME_STRESS, "120", timeout=600)
    assert out.startswith("ok "), out


CALL_AFTER_FORK = """
import os
import warnings
import numpy as np
from pymlirjit import Session, callback, f64, mlir_kernel

session = Session()

@callback(session=session)
def hook(x: f64) -> f64:
    return x * 3

@mlir_kernel(source='''
func.func @kernel(%x: f64) -> f64 {
  %r = func.call @hook(%x) : (f64) -> f64
  return %r : f64
}
func.func private @hook(f64) -> f64
''', session=session)
def kernel(x: f64) -> f64: ...

assert kernel(1.0) == 3.0 and kernel(np.float64(2.0)) == 6.0
with warnings.catch_warnings():  # Python 3.12+ warns of forking a threaded process
    warnings.simplefilter("ignore", DeprecationWarning)
    pid = os.fork()
if pid == 0:
    # Calls only: compiling anew in a forked child is another matter (docs/threads.md).
    ok = kernel(4.0) == 12.0 and kernel(np.float64(5.0)) == 15.0
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert kernel(7.0) == 21.0
print("ok")
"""


def test_a_forked_child_calls_kernels_compiled_before() -> None:
    assert run_python(CALL_AFTER_FORK, timeout=60) == "ok\n"


def test_invalidate_points_the_kernel_away_then_retires(session: Session) -> None:
    from pymlirjit.boundary.vectorcall import has_entry

    @mlir_kernel(source=TWICE, session=session)
    def twice(x: float) -> float: ...

    assert twice(2.0) == 4.0 and has_entry(twice)
    function = twice.compile()
    twice.invalidate()
    assert not has_entry(twice)  # calls go to __call__, which compiles again
    assert twice._retired == []  # no call was running: nothing kept
    assert twice.compile() is not function and twice(3.0) == 6.0 and has_entry(twice)
    assert function(1.0) == 2.0  # a function handed out keeps working
    assert type(twice).forget is type(twice).invalidate


def test_a_copied_kernel_compiles_for_itself(session: Session) -> None:
    import copy

    @mlir_kernel(source=TWICE, session=session)
    def twice(x: float) -> float: ...

    assert twice(2.0) == 4.0
    duplicate = copy.copy(twice)
    assert duplicate(3.0) == 6.0
    assert duplicate.compile() is not twice.compile()
    function = duplicate.compile()
    session.clear_cache()  # the copy subscribed when it compiled
    assert duplicate.compile() is not function


# -- annotations and arguments as numba users write them (issue 14, item 4) ----------------

SCALE = """
func.func @scale(%x: {f}, %k: {i}) -> {f} {{
  %kf = arith.sitofp %k : {i} to {f}
  %r = arith.mulf %x, %kf : {f}
  return %r : {f}
}}
"""


@pytest.mark.parametrize(("f", "i", "c"), [("f32", "i32", "complex<f32>"),
                                           ("f64", "index", "complex<f64>"),
                                           ("f16", "i8", "complex<f32>"),
                                           ("f64", "i64", "complex<f64>")])
def test_python_number_annotations_admit_any_width_of_their_kind(session: Session, f: str,
                                                                  i: str, c: str) -> None:
    @mlir_kernel(source=f"""
    func.func @pick(%x: {f}, %k: {i}, %z: {c}) -> ({f}, {i}, {c}) {{
      return %x, %k, %z : {f}, {i}, {c}
    }}""", session=session)
    def pick(x: float, k: int, z: complex) -> tuple[float, int, complex]: ...

    assert pick(1.5, 2, 1j) == pick(1.5, k=2, z=1j) == (1.5, 2, 1j)
    assert [p.type.mlir for p in pick.signature.params] == [f, i, c]


def test_a_python_number_annotation_of_the_wrong_kind_names_the_argument(
        session: Session) -> None:
    @mlir_kernel(source=SCALE.format(f="f32", i="i32"), session=session)
    def scale(x: int, k: int) -> float: ...

    with pytest.raises(SignatureError, match=r"@mlir_kernel 'scale': argument 1 \('x'\): the "
                                             r"stub says int, MLIR has f32"):
        scale.compile()

    @mlir_kernel(source=SCALE.format(f="f32", i="i32"), name="scale", session=session)
    def wrong_width(x: f64, k: int) -> complex: ...

    with pytest.raises(SignatureError, match=r"argument 1 \('x'\): the stub says f64, MLIR "
                                             r"has f32 \(@scale is \(f32, i32\) -> f32\)"):
        wrong_width.compile()


def test_index_and_narrow_int_arguments_are_range_checked(session: Session) -> None:
    @mlir_kernel(source=SCALE.format(f="f64", i="i8"), session=session)
    def scale(x: float, k: int) -> float: ...

    assert scale(1.0, -128) == -128.0
    for call in (lambda: scale(1.0, 300), lambda: scale(1.0, k=300),
                 lambda: scale.compile().call_python(1.0, 300)):
        with pytest.raises(ValueError, match=r"scale\(\) argument 2 \('k'\): 300 is out of "
                                             r"range for i8"):
            call()
    same = session.compile(IDENTITY.format(t="index")).same
    assert same(2**63 - 1) == 2**63 - 1
    with pytest.raises(ValueError, match=r"argument 1: 36893488147419103232 is out of range "
                                         r"for index"):
        same(2**65)


def test_keyword_arguments_by_the_stub_parameter_names(session: Session) -> None:
    @mlir_kernel(source=SCALE.format(f="f64", i="i64"), session=session)
    def scale(x: float, k: int) -> float: ...

    assert scale(2.0, 3) == scale(2.0, k=3) == scale(x=2.0, k=3) == scale(k=3, x=2.0) == 6.0
    with pytest.raises(TypeError, match=r"multiple values for argument 1 \('x'\)"):
        scale(2.0, x=3.0)
    with pytest.raises(TypeError, match=r"scale\(\) missing argument 2 \('k'\) \(it takes "
                                        r"x: f64, k: i64\)"):
        scale(x=2.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n'"):
        scale(2.0, n=3)
    with pytest.raises(TypeError, match=r"argument 2 \('k'\): expected an int for i64"):
        scale(2.0, k="3")


def test_keyword_arguments_reach_arrays_without_a_copy(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @fill(%a: memref<?xf32>, %v: f32) {
      %c0 = arith.constant 0 : index
      memref.store %v, %a[%c0] : memref<?xf32>
      return
    }""", session=session)
    def fill(a: np.ndarray, v: float) -> None: ...

    a = np.zeros(3, np.float32)
    fill(v=4.0, a=a)
    assert a[0] == 4.0


def test_functools_partial_of_a_kernel(session: Session) -> None:
    import functools

    @mlir_kernel(source=SCALE.format(f="f64", i="i64"), session=session)
    def scale(x: float, k: int) -> float: ...

    triple = functools.partial(scale, k=3)
    assert triple(2.0) == 6.0
    assert triple(x=1.5) == 4.5
    assert functools.partial(scale, 2.0)(5) == 10.0
    with pytest.raises(ValueError, match=r"argument 2 \('k'\)"):
        functools.partial(scale, k=2**70)(1.0)


def test_an_array_of_another_dtype_says_how_to_convert_it(session: Session) -> None:
    @mlir_kernel(source="""
    func.func @fill(%a: memref<?xf32>, %v: f32) {
      %c0 = arith.constant 0 : index
      memref.store %v, %a[%c0] : memref<?xf32>
      return
    }""", session=session)
    def fill(values: np.ndarray, v: float) -> None: ...

    with pytest.raises(TypeError, match=r"fill\(\) argument 1 \('values'\): expected a float32 "
                                        r"array for memref<\?xf32>, got a float64 array; pass "
                                        r"values.astype\(np.float32\) \(a copy"):
        fill(np.zeros(3), 1.0)
    with pytest.raises(TypeError, match=r"pass np.asarray\(values, dtype=np.float32\)"):
        fill([0.0, 0.0], 1.0)


# Values for f32/f64 parameters: (value, f32 result or exception, f64 result or exception).
EXACTNESS = [
    (0.1, float(np.float32(0.1)), 0.1),  # a Python float rounds: it has no width of its own
    (np.float64(0.1), ValueError, 0.1),  # a numpy float of another width: exact only
    (np.float64(0.5), 0.5, 0.5),
    (np.float64("nan"), "nan", "nan"),
    (np.float32(0.1), float(np.float32(0.1)), float(np.float32(0.1))),
    (1e300, ValueError, 1e300),  # rounds, but must not overflow
    (-1e39, ValueError, -1e39),
    (float("inf"), float("inf"), float("inf")),
    (float.fromhex("0x1.fffffeffffffp127"), float.fromhex("0x1.fffffep127"),
     float.fromhex("0x1.fffffeffffffp127")),
    (np.int32(3), 3.0, 3.0),
    (np.int32(2**24 + 1), ValueError, 2.0**24 + 1),
    (np.int32(-(2**31)), -(2.0**31), -(2.0**31)),
    (np.int64(2**53 + 1), ValueError, ValueError),
    (np.int64(2**53), 2.0**53, 2.0**53),
    (np.int64(2**63 - 1), ValueError, ValueError),
    (np.uint64(2**64 - 1), ValueError, ValueError),
    (np.uint64(2**63), 2.0**63, 2.0**63),
    (np.uint16(65535), 65535.0, 65535.0),
    (2**53 + 1, ValueError, ValueError),  # a Python int too: exact only
    (7, 7.0, 7.0),
    (-(2**24) - 1, ValueError, -(2.0**24) - 1),
    (-(2**63), -(2.0**63), -(2.0**63)),
    (2**63 - 1, ValueError, ValueError),
    (2**70, 2.0**70, 2.0**70),  # beyond i64: the Python path converts it
]


@pytest.mark.parametrize("mlir_type", ["f32", "f64"])
@pytest.mark.parametrize(("value", "as_f32", "as_f64"), EXACTNESS,
                         ids=[repr(v[0]) for v in EXACTNESS])
def test_scalars_convert_to_another_width_only_when_exact(
        session: Session, mlir_type: str, value: object, as_f32: object,
        as_f64: object) -> None:
    function = session.compile(IDENTITY.format(t=mlir_type)).same
    expected = as_f32 if mlir_type == "f32" else as_f64
    # The native entry (first call on) and the Python path agree.
    for call in (function, function, function.call_python):
        if expected is ValueError:
            with pytest.raises(ValueError, match=rf"same\(\) argument 1: .* {mlir_type}"):
                call(value)
        elif expected == "nan":
            assert np.isnan(call(value))
        else:
            assert call(value) == expected


def test_a_narrowing_numpy_scalar_error_says_how_to_round(session: Session) -> None:
    @mlir_kernel(source=SCALE.format(f="f32", i="i32"), session=session)
    def scale(x: float, k: int) -> float: ...

    with pytest.raises(ValueError, match=r"scale\(\) argument 1 \('x'\): float64 "
                                         r"np.float64\(0.1\) is not exactly representable in "
                                         r"f32 .*pass np.float32\(...\) to round it"):
        scale(np.float64(0.1), 1)
    assert scale(np.float32(0.1), np.int64(1)) == np.float32(0.1)
    c64 = session.compile(IDENTITY.format(t="complex<f32>")).same
    assert c64(0.1 + 1j) == complex(np.complex64(0.1 + 1j))
    assert c64(np.complex128(0.5j)) == 0.5j
    with pytest.raises(ValueError, match="not exactly representable in complex<f32>"):
        c64(np.complex128(0.1j))


def test_a_partial_of_a_function_is_a_callback_of_what_it_leaves(session: Session) -> None:
    import functools

    from pymlirjit import callback

    def model(y: f64, rate: f64) -> f64:
        return -rate * y

    decay = callback(functools.partial(model, rate=0.5), session=session)
    assert decay.name == "model" and decay.signature.mlir == "(f64) -> f64"
    fast = callback(functools.partial(model, rate=4.0), name="fast", session=session)
    module = session.compile("""
    func.func @step(%y: f64) -> (f64, f64) {
      %a = call @model(%y) : (f64) -> f64
      %b = call @fast(%y) : (f64) -> f64
      return %a, %b : f64, f64
    }
    func.func private @model(f64) -> f64
    func.func private @fast(f64) -> f64""")
    assert module.step(2.0) == (-1.0, -8.0)
    assert decay(2.0) == -1.0 and fast(y=1.0) == -4.0  # still callable from Python


def test_kernels_over_one_cached_function_share_its_native_entry(session: Session) -> None:
    source = "func.func @f(%x: f64) -> f64 { return %x : f64 }"
    first = mlir_kernel(source=source, name="f", session=session)(lambda x: None)
    second = mlir_kernel(source=source, name="f", session=session)(lambda y: None)
    other_policy = mlir_kernel(source=source, name="f", session=session,
                               release_gil=True)(lambda x: None)
    assert first(1.5) == second(2.5) - 1.0 == other_policy(0.5) + 1.0
    assert first._compiled is not None and second._compiled is not None
    assert first._compiled.native_entry is not None
    assert second._compiled.native_entry == first._compiled.native_entry  # built once
    assert other_policy._compiled is not None
    assert other_policy._compiled.native_entry != first._compiled.native_entry
    with pytest.raises(TypeError, match=r"argument 1 \('y'\)"):
        second("no")  # each keeps its own names in errors


def test_the_decorator_names_what_it_was_given_instead_of_a_function_or_session() -> None:
    with pytest.raises(TypeError, match="@mlir_kernel decorates a function, got int"):
        mlir_kernel(source="func.func @f() { return }")(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decorates a function, got NoneType"):
        mlir_kernel(source="func.func @f() { return }")(None)  # type: ignore[arg-type]
    assert mlir_kernel(source="func.func @f() { return }", name="f")(  # type: ignore[arg-type]
        None).name == "f"  # no stub: the MLIR function named
    with pytest.raises(TypeError, match="session= takes a pymlirjit Session, got str"):
        @mlir_kernel(source="func.func @f() { return }", session="x")  # type: ignore[arg-type]
        def f() -> None: ...
