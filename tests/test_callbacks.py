"""@callback: every scalar type and memref form, results, errors, registries."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from pymlirjit import (
    Callback,
    CallbackRegistry,
    MemRef,
    Session,
    SignatureError,
    UnrankedMemRef,
    callback,
    f32,
    f64,
    i32,
    index,
)

SCALAR_CASES = [
    ("i1", True, False),
    ("i8", -100, 27),
    ("i16", -30000, 2767),
    ("i32", -2_000_000_000, 147_483_647),
    ("i64", -(2**62), 2**62 - 1),
    ("index", 2**40, -(2**40)),
    ("f16", 1.5, 0.25),
    ("bf16", 3.0, -0.5),
    ("f32", 0.5, 1.25),
    ("f64", 1e300, -1e-300),
    ("complex<f32>", 1 + 2j, 0.5 - 1j),
    ("complex<f64>", 1e100 + 3j, -2j),
]


@pytest.mark.parametrize(("mlir_type", "first", "second"), SCALAR_CASES)
def test_every_scalar_type_through_a_callback(session: Session, mlir_type: str,
                                              first: object, second: object) -> None:
    """The kernel passes two values to Python, which returns the second: both
    directions of the callback ABI, for each scalar type."""
    seen: list[tuple[object, object]] = []

    @callback(f"({mlir_type}, {mlir_type}) -> {mlir_type}", name="pick", session=session)
    def pick(a: object, b: object) -> object:
        seen.append((a, b))
        return b

    module = session.compile(f"""
    func.func @relay(%a: {mlir_type}, %b: {mlir_type}) -> {mlir_type} {{
      %r = call @pick(%a, %b) : ({mlir_type}, {mlir_type}) -> {mlir_type}
      return %r : {mlir_type}
    }}
    func.func private @pick({mlir_type}, {mlir_type}) -> {mlir_type}
    """)
    assert module.relay(first, second) == second
    assert seen == [(first, second)]
    assert type(seen[0][0]) is type(first)


def test_callback_receives_zero_copy_views_and_writes_are_seen(session: Session) -> None:
    @callback(session=session)
    def bump(a: MemRef[f32, None, None]) -> None:
        a += 1

    module = session.compile("""
    func.func @run(%m: memref<?x?xf32>) {
      call @bump(%m) : (memref<?x?xf32>) -> ()
      return
    }
    func.func private @bump(memref<?x?xf32>)
    """)
    data = np.zeros((3, 4), dtype=np.float32)
    module.run(data)
    np.testing.assert_array_equal(data, np.ones((3, 4)))


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_ranked_memrefs_of_rank_0_to_3(session: Session, rank: int) -> None:
    shape = (2, 3, 4)[:rank]
    mlir = f"memref<{''.join(f'{d}x' for d in shape)}f64>"
    received: list[np.ndarray] = []

    @callback(f"({mlir}) -> ()", name="look", session=session)
    def look(a: np.ndarray) -> None:
        received.append(a.copy())

    module = session.compile(f"""
    func.func @run(%m: {mlir}) {{
      call @look(%m) : ({mlir}) -> ()
      return
    }}
    func.func private @look({mlir})
    """)
    data = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    module.run(data)
    np.testing.assert_array_equal(received[0], data)
    assert received[0].shape == shape


def test_unranked_memref_and_transposed_view(session: Session) -> None:
    received: list[np.ndarray] = []

    @callback(session=session)
    def look(a: UnrankedMemRef[f32]) -> None:
        received.append(a.copy())

    module = session.compile("""
    func.func @run(%m: memref<?x?xf32, strided<[?, ?], offset: ?>>) {
      %u = memref.cast %m : memref<?x?xf32, strided<[?, ?], offset: ?>> to memref<*xf32>
      call @look(%u) : (memref<*xf32>) -> ()
      return
    }
    func.func private @look(memref<*xf32>)
    """)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    module.run(data.T)
    module.run(data[::-1, 1::2])
    np.testing.assert_array_equal(received[0], data.T)
    np.testing.assert_array_equal(received[1], data[::-1, 1::2])


def test_several_results_and_a_memref_result(session: Session) -> None:
    @callback(session=session)
    def divmod_(a: i32, b: i32) -> tuple[i32, i32]:
        return divmod(a, b)

    @callback(session=session)
    def make(n: index) -> MemRef[f64, None]:
        return np.arange(n, dtype=np.float64) * 2

    module = session.compile("""
    func.func @qr(%a: i32, %b: i32) -> (i32, i32) {
      %q, %r = call @divmod_(%a, %b) : (i32, i32) -> (i32, i32)
      return %q, %r : i32, i32
    }
    func.func private @divmod_(i32, i32) -> (i32, i32)
    func.func @total(%n: index) -> f64 {
      %m = call @make(%n) : (index) -> memref<?xf64>
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %zero = arith.constant 0.0 : f64
      %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
        %x = memref.load %m[%i] : memref<?xf64>
        %t = arith.addf %acc, %x : f64
        scf.yield %t : f64
      }
      memref.dealloc %m : memref<?xf64>
      return %s : f64
    }
    func.func private @make(index) -> memref<?xf64>
    """)
    assert module.qr(17, 5) == (3, 2)
    assert module.total(5) == 20.0


def test_exception_in_callback_reaches_the_caller_with_a_note(session: Session) -> None:
    calls: list[float] = []

    @callback(session=session)
    def fragile(x: f64) -> f64:
        calls.append(x)
        if x > 1:
            raise KeyError("too big")
        return x

    module = session.compile("""
    func.func @twice(%x: f64) -> f64 {
      %a = call @fragile(%x) : (f64) -> f64
      %b = call @fragile(%x) : (f64) -> f64
      %r = arith.addf %a, %b : f64
      return %r : f64
    }
    func.func private @fragile(f64) -> f64
    """)
    assert module.twice(0.5) == 1.0
    error = KeyError
    with pytest.raises(error) as caught:
        module.twice(2.0)
    assert any("fragile" in note for note in caught.value.__notes__)
    assert calls == [0.5, 0.5, 2.0]  # the second callback of the failing call was skipped
    assert module.twice(0.25) == 0.5  # and the next call starts clean


def test_the_same_exception_object_raised_again_gets_its_note_once(
        session: Session) -> None:
    shared = KeyError("always the same")

    @callback(session=session)
    def again(x: f64) -> f64:
        raise shared

    module = session.compile("""
    func.func @k(%x: f64) -> f64 {
      %y = call @again(%x) : (f64) -> f64
      return %y : f64
    }
    func.func private @again(f64) -> f64
    """)
    for call in (module.k, module.k.call_python) * 5:  # native entry, Python path
        with pytest.raises(KeyError) as caught:
            call(1.0)
        assert caught.value is shared
    assert shared.__notes__ == [
        "raised in callback 'again' called from compiled MLIR code"]


@pytest.mark.parametrize(("returned", "error", "message"), [
    ("text", TypeError, "expected a float"),
    (None, TypeError, "expected a float"),
])
def test_wrong_return_type_raises_in_the_caller(session: Session, returned: object,
                                                error: type[Exception], message: str) -> None:
    @callback(session=session)
    def bad() -> f64:
        return returned  # type: ignore[return-value]

    module = session.compile("""
    func.func @run() -> f64 {
      %r = call @bad() : () -> f64
      return %r : f64
    }
    func.func private @bad() -> f64
    """)
    with pytest.raises(error, match=message):
        module.run()


def test_wrong_array_result_raises(session: Session) -> None:
    @callback(session=session)
    def make() -> MemRef[f32, 3]:
        return np.zeros(4, dtype=np.float32)

    module = session.compile("""
    func.func @run() {
      %m = call @make() : () -> memref<3xf32>
      memref.dealloc %m : memref<3xf32>
      return
    }
    func.func private @make() -> memref<3xf32>
    """)
    with pytest.raises(ValueError, match="dim 0 must be 3"):
        module.run()


# Each shape of ctypes entry: a result returned (an f8 result keeps the trampolines
# out: 3 * 2**-9 has the bits 3), written through the result pointer, or none; returned
# right, then wrong.
CTYPES_ENTRY_SHAPES = {
    "returned": ("(f16) -> f8E4M3FN", "%r = call @cb(%h) : (f16) -> f8E4M3FN\n  %b = "
                 "arith.bitcast %r : f8E4M3FN to i8\n  %x = arith.uitofp %b : i8 to f64",
                 lambda h: 3 * 2.0**-9, "text", TypeError, "result #0"),
    "via_pointer": ("(f16) -> (f64, f64)", "%a, %b = call @cb(%h) : (f16) -> (f64, f64)\n"
                    "  %x = arith.addf %a, %b : f64", lambda h: (float(h), float(h)),
                    (1.0, 2.0, 3.0), TypeError, "must return a tuple of 2 values"),
    "no_result": ("(f16) -> ()", "call @cb(%h) : (f16) -> ()\n  %e = arith.extf %h : "
                  "f16 to f64\n  %x = arith.addf %e, %e : f64", lambda h: None, 5, TypeError,
                  "declared to return nothing"),
}


@pytest.mark.parametrize("shape", CTYPES_ENTRY_SHAPES)
def test_each_ctypes_entry_shape_delivers_and_checks_its_result(session: Session,
                                                                shape: str) -> None:
    signature, body, good, bad_value, error, message = CTYPES_ENTRY_SHAPES[shape]
    returned: list[object] = [None]

    def cb(h: object) -> object:
        return returned[0]

    callback(signature, name="cb", session=session)(cb)
    module = session.compile(f"""
    func.func @k(%h: f16) -> f64 {{
      {body}
      return %x : f64
    }}
    func.func private @cb{signature.split(" ->")[0]} -> {signature.split("-> ")[1]}
    """)
    returned[0] = good(np.float16(1.5))
    assert module.k(np.float16(1.5)) == 3.0
    returned[0] = bad_value
    with pytest.raises(error, match=message):
        module.k(np.float16(1.5))


# A result a type cannot hold, finite: raised as a kernel argument's would be, on each path
# a result takes (a native trampoline, the ctypes entry, a struct of results).
# (signature, the kernel's argument, a value in range, its result, a value out of range)
RESULT_RANGE_CASES = {
    "f32 trampoline": ("(f64) -> f32", 1.0, 3.0e38, float(np.float32(3.0e38)), 1e300),
    "f16 trampoline": ("(f64) -> f16", 1.0, 65519.0, 65504.0, 70000.0),
    "bf16 trampoline": ("(f64) -> bf16", 1.0, -3.39e38, -3.3895313892515355e38, -1e39),
    "f32 numpy float64": ("(f64) -> f32", 1.0, np.float64(2.5), 2.5, np.float64(-1e300)),
    "f32 int": ("(f64) -> f32", 1.0, 2**100, float(2**100), 10**39),
    "f32 ctypes entry": ("(f8E5M2) -> f32", 1.5, 1.5, 1.5, 1e300),
    "f8 ctypes entry": ("(f64) -> f8E4M3FN", 1.0, 460.0, 448.0, 1000.0),
    "complex<f32> pair": ("(f64) -> complex<f32>", 1.0, 1 + 2j, 1 + 2j, 2 + 1e300j),
    "f32 of two results": ("(f64) -> (f32, f32)", 1.0, (0.5, 1.5), (0.5, 1.5), (0.5, 1e300)),
}


@pytest.mark.parametrize("case", RESULT_RANGE_CASES)
def test_a_finite_result_out_of_range_raises_naming_the_callback(session: Session,
                                                                 case: str) -> None:
    signature, argument, fine, expected, too_large = RESULT_RANGE_CASES[case]
    params, results = signature.split(" -> ")
    returned: list[object] = [fine]

    def cb(x: object) -> object:
        return returned[0]

    callback(signature, name="cb", session=session)(cb)
    count = results.count(",") + 1
    names = ", ".join(f"%r{i}" for i in range(count))
    module = session.compile(f"""
    func.func private @cb{params} -> {results}
    func.func @run(%x: {params.strip("()")}) -> {results} {{
      {names} = func.call @cb(%x) : {signature}
      return {names} : {results.strip("()")}
    }}""")
    assert module.run(argument) == expected
    returned[0] = too_large
    shown = repr(too_large[1] if isinstance(too_large, tuple) else too_large)
    with pytest.raises(ValueError, match=rf"callback 'cb': result #{count - 1}: "
                                         rf"{re.escape(shown)} is out of range for "
                                         rf"{re.escape(results.strip('()').split(', ')[-1])}\n"):
        module.run(argument)
    for allowed in (math.inf, -math.inf, math.nan):  # inf and nan themselves pass
        returned[0] = (0.5, allowed) if count == 2 else allowed
        module.run(argument)
    returned[0] = fine
    assert module.run(argument) == expected  # the module keeps working


def test_signature_mismatch_names_both_sides(session: Session) -> None:
    @callback(session=session)
    def cb(x: f32) -> f32:
        return x

    with pytest.raises(SignatureError) as caught:
        session.compile("""
        func.func @run(%x: f64) -> f64 {
          %r = call @cb(%x) : (f64) -> f64
          return %r : f64
        }
        func.func private @cb(f64) -> f64
        """)
    message = str(caught.value)
    assert "(f32) -> f32" in message and "(f64) -> f64" in message
    assert "argument 1" in message


def test_missing_annotation_is_a_signature_error() -> None:
    def no_hint(x, y: f32) -> f32:  # type: ignore[no-untyped-def]
        return y

    with pytest.raises(SignatureError, match="parameter 'x' has no type annotation"):
        Callback(no_hint)


def test_decorated_function_stays_callable_and_inspectable() -> None:
    registry = CallbackRegistry()

    @callback(registry=registry)
    def scale(x: f32, k: i32) -> f32:
        """Halve and add."""
        return x / 2 + k / 2

    assert scale(42.0, 2) == 22.0
    assert scale.__doc__ == "Halve and add."
    assert scale.name == "scale"
    assert scale.signature.mlir == "(f32, i32) -> f32"
    assert scale.address != 0
    assert registry.get("scale") is scale


def test_callback_defined_after_the_kernel_links(session: Session) -> None:
    from pymlirjit import mlir_kernel

    @mlir_kernel(source="""
    func.func @use(%x: f64) -> f64 {
      %r = call @late(%x) : (f64) -> f64
      return %r : f64
    }
    func.func private @late(f64) -> f64
    """, session=session)
    def use(x: f64) -> f64: ...

    @callback(session=session)
    def late(x: f64) -> f64:
        return x + 1

    assert use(1.0) == 2.0


ASYNC_PIPELINE = [
    "async-parallel-for{async-dispatch=false num-workers=4 min-task-size=1}",
    "async-to-async-runtime", "async-runtime-ref-counting", "async-runtime-ref-counting-opt",
    "convert-async-to-llvm",
]

PARALLEL = """
func.func @par(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    func.call @visit(%i) : (index) -> ()
    scf.reduce
  }
  return
}
func.func private @visit(index)
"""


def test_callbacks_from_threads_the_compiled_code_starts() -> None:
    import threading

    from pymlirjit import DEFAULT_PIPELINE

    session = Session(shared_libs=["mlir_async_runtime"])
    seen: list[int] = []
    threads: set[int] = set()

    @callback(session=session)
    def visit(i: index) -> None:
        seen.append(i)
        threads.add(threading.get_ident())

    par = session.compile(PARALLEL, pipeline=[*ASYNC_PIPELINE, *DEFAULT_PIPELINE]).par
    assert par.release_gil  # the workers' callbacks need the GIL the caller dropped
    par(2000)
    assert sorted(seen) == list(range(2000))
    assert len(threads) > 1


def test_an_error_on_a_worker_thread_reaches_the_caller() -> None:
    from pymlirjit import DEFAULT_PIPELINE

    session = Session(shared_libs=["mlir_async_runtime"])

    @callback(session=session)
    def visit(i: index) -> None:
        if i == 777:
            raise ArithmeticError("bad index 777")

    par = session.compile(PARALLEL, pipeline=[*ASYNC_PIPELINE, *DEFAULT_PIPELINE]).par
    with pytest.raises(ArithmeticError, match="777"):
        par(2000)
    par(10)  # nothing left over for the next call


@pytest.mark.parametrize(("mlir_type", "returned", "expected"), [
    ("f32", np.float32(0.5), 0.5), ("f64", np.float64(-2.25), -2.25),
    ("i32", np.int64(-7), -7), ("i8", np.uint8(255), -1), ("i1", np.True_, True),
    ("i1", np.False_, False), ("i64", np.uint64(2**64 - 1), -1),
])
def test_callbacks_may_return_numpy_scalars(session: Session, mlir_type: str,
                                            returned: object, expected: object) -> None:
    @callback(f"() -> {mlir_type}", name="give", session=session)
    def give() -> object:
        return returned

    module = session.compile(f"""
    func.func @get() -> {mlir_type} {{
      %r = call @give() : () -> {mlir_type}
      return %r : {mlir_type}
    }}
    func.func private @give() -> {mlir_type}
    """)
    assert module.get() == expected


# -- what runs after a failing callback: nothing, whatever the entry kind ------------------

def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (what could crash cannot take the test run
    down); its stdout, after checking it exited cleanly and printed nothing else."""
    import subprocess
    import sys
    import textwrap

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", done.stderr
    return done.stdout


# Callbacks of the shapes that first needed a ctypes entry (f8 results still do; memref
# results, unranked memrefs, complex and f16 parameters now have trampolines), each
# raising, followed in the kernel by a memref store and a later callback that must
# never run.
CTYPES_ENTRY_KINDS = {
    "f8_result": ("def bad(h: f16) -> f8E4M3FN", "f16", "%h", "f8E4M3FN",
                  "%b = arith.bitcast %r : f8E4M3FN to i8\n"
                  "          %x = arith.uitofp %b : i8 to f64"),
    "memref_result": ("def bad(n: index) -> MemRef[f64, None]", "index", "%n",
                      "memref<?xf64>", "%x = memref.load %r[%c0i] : memref<?xf64>"),
    "complex_param": ("def bad(z: complex128) -> f64", "complex<f64>", "%z", "f64",
                      "%x = arith.addf %r, %r : f64"),
    "f16_param": ("def bad(h: f16) -> f64", "f16", "%h", "f64",
                  "%x = arith.addf %r, %r : f64"),
    "unranked_memref": ("def bad(u: UnrankedMemRef[f64]) -> f64", "memref<*xf64>", "%u",
                        "f64", "%x = arith.addf %r, %r : f64"),
}


@pytest.mark.parametrize("kind", CTYPES_ENTRY_KINDS)
def test_a_failing_ctypes_entry_callback_stops_its_kernel(kind: str) -> None:
    header, param_type, _, result_type, use = CTYPES_ENTRY_KINDS[kind]
    stdout = run_python(f"""
        import numpy as np
        from pymlirjit import MemRef, Session, UnrankedMemRef, callback, f16, f64, index
        from pymlirjit import complex128, f8E4M3FN

        session = Session()
        later = []
        errors = []

        @callback(session=session)
        {header}:
            errors.append(ValueError("{kind}"))
            raise errors[-1]

        @callback(session=session)
        def after(x: f64) -> None:
            later.append(x)

        module = session.compile('''
        func.func @k(%n: index, %out: memref<1xf64>) -> f64 {{
          %c0i = arith.constant 0 : index
          %re = arith.constant 1.0 : f64
          %z = complex.create %re, %re : complex<f64>
          %h = arith.constant 1.5 : f16
          %m = memref.alloca() : memref<2xf64>
          %u = memref.cast %m : memref<2xf64> to memref<*xf64>
          %r = call @bad({CTYPES_ENTRY_KINDS[kind][2]}) : ({param_type}) -> {result_type}
          {use}
          memref.store %x, %out[%c0i] : memref<1xf64>
          call @after(%x) : (f64) -> ()
          return %x : f64
        }}
        func.func private @bad({param_type}) -> {result_type}
        func.func private @after(f64)
        ''')
        out = np.full(1, -7.0)
        for call in (module.k, module.k.call_python):  # the native entry, the Python path
            try:
                call(4, out)
            except ValueError as error:
                assert error is errors[-1], (error, errors)
                assert any("'bad'" in note for note in error.__notes__)
            else:
                raise AssertionError("no exception")
        assert later == [] and out[0] == -7.0, (later, out)  # nothing ran after it
        print("stopped", len(errors))
    """)
    assert stdout.split() == ["stopped", "2"]


def test_recursion_error_in_callback_kernel_recursion_raises() -> None:
    stdout = run_python("""
        import sys
        from pymlirjit import Session, callback, f64, i64

        session = Session()

        @callback(session=session)
        def down(n: i64) -> f64:
            return deeper(n + 1)

        deeper = session.compile('''
        func.func @k(%n: i64) -> f64 {
          %x = call @down(%n) : (i64) -> f64
          return %x : f64
        }
        func.func private @down(i64) -> f64
        ''').k
        for limit in (150, 400):
            sys.setrecursionlimit(limit)
            try:
                value = deeper(0)
            except RuntimeError as error:  # RecursionError, or the one naming 'down'
                assert isinstance(error, RecursionError) or "'down'" in str(error), error
                print("raised")
            else:
                print("returned", value)
    """)
    assert stdout.split() == ["raised", "raised"]


def test_an_exception_whose_notes_are_not_a_list_still_raises(session: Session) -> None:
    raised: list[BaseException] = []

    @callback(session=session)
    def odd(x: f64) -> f64:
        error = LookupError("odd")
        error.__notes__ = "not a list"  # type: ignore[assignment]
        raised.append(error)
        raise error

    module = session.compile("""
    func.func @k(%x: f64) -> f64 {
      %y = call @odd(%x) : (f64) -> f64
      return %y : f64
    }
    func.func private @odd(f64) -> f64
    """)
    for call in (module.k, module.k.call_python):  # native entry, Python path
        with pytest.raises(LookupError) as caught:
            call(1.0)
        assert caught.value is raised[-1]


def test_the_python_path_unwinds_a_failing_callback(session: Session) -> None:
    @callback(session=session)
    def check(x: f64) -> f64:
        if x > 1:
            raise ArithmeticError(f"{x} is too big")
        return x

    module = session.compile("""
    func.func @k(%x: f64, %out: memref<1xf64>) {
      %y = call @check(%x) : (f64) -> f64
      %c0 = arith.constant 0 : index
      memref.store %y, %out[%c0] : memref<1xf64>
      return
    }
    func.func private @check(f64) -> f64
    """)
    out = np.zeros(1)
    module.k.call_python(0.5, out)  # the Python path
    assert out[0] == 0.5
    with pytest.raises(ArithmeticError, match="too big"):
        module.k.call_python(2.0, out)
    assert out[0] == 0.5  # the store after the failing callback never ran


@pytest.mark.parametrize("release_gil", [True, False])
def test_a_raw_address_called_inside_a_callback_reports_to_its_kernel(
        release_gil: bool) -> None:
    stdout = run_python(f"""
        import ctypes
        from pymlirjit import Session, callback, f64, mlir_kernel

        session = Session()
        boom = KeyError("inner")
        later, seen = [], []

        @callback(session=session)
        def bad(x: f64) -> f64:
            raise boom

        @callback(session=session)
        def after(x: f64) -> None:
            later.append(x)

        @mlir_kernel(session=session, source='''
        func.func @inner(%x: f64) -> f64 {{
          %y = call @bad(%x) : (f64) -> f64
          call @after(%y) : (f64) -> ()
          return %y : f64
        }}
        func.func private @bad(f64) -> f64
        func.func private @after(f64)
        ''')
        def inner(x: f64) -> f64: ...

        @callback(session=session)
        def relay(x: f64) -> f64:
            raw = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(inner.address)
            seen.append(raw(x))
            return x

        @mlir_kernel(session=session, release_gil={release_gil}, source='''
        func.func @outer(%x: f64) -> f64 {{
          %y = call @relay(%x) : (f64) -> f64
          call @after(%y) : (f64) -> ()
          return %y : f64
        }}
        func.func private @relay(f64) -> f64
        func.func private @after(f64)
        ''')
        def outer(x: f64) -> f64: ...

        assert outer.compile().release_gil is {release_gil}
        for _ in range(3):
            try:
                outer(2.0)
            except KeyError as error:
                assert error is boom
            else:
                raise AssertionError("no exception")
        assert later == [] and seen == [0.0, 0.0, 0.0], (later, seen)
        print("ok")
    """)
    assert stdout.split() == ["ok"]


def test_trampolines_box_every_f16_and_bf16_and_complex_parameter(session: Session) -> None:
    """Every f16 and bf16 bit pattern reaches the callback as the float the Python
    conversion makes of it (NaNs as NaN, the sign of zeros kept), and complex numbers as
    complex, through native trampolines."""
    import math

    from pymlirjit.boundary.abi import native_callback_supported
    from pymlirjit.boundary.convert import from_bits
    from pymlirjit.boundary.types import SCALARS

    seen: dict[str, list[tuple[int, object]]] = {"f16": [], "bf16": []}

    @callback("(f16, bf16, i32) -> ()", name="halves", session=session)
    def halves(h: object, g: object, i: int) -> None:
        seen["f16"].append((i, h))
        seen["bf16"].append((i, g))

    @callback("(complex<f32>, complex<f64>, f64) -> f64", name="pairs", session=session)
    def pairs(a: complex, b: complex, x: float) -> object:
        if x < 0:
            raise LookupError(f"refused {a} {b}")
        return "text" if x == 0 else (a * b).real + x

    assert native_callback_supported(halves.signature)
    assert native_callback_supported(pairs.signature)
    module = session.compile("""
    func.func @all() {
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %n = arith.constant 65536 : i32
      scf.for %i = %c0 to %n step %c1 : i32 {
        %b = arith.trunci %i : i32 to i16
        %h = arith.bitcast %b : i16 to f16
        %g = arith.bitcast %b : i16 to bf16
        func.call @halves(%h, %g, %i) : (f16, bf16, i32) -> ()
      }
      return
    }
    func.func @mul(%a: complex<f32>, %b: complex<f64>, %x: f64) -> f64 {
      %r = func.call @pairs(%a, %b, %x) : (complex<f32>, complex<f64>, f64) -> f64
      return %r : f64
    }
    func.func private @halves(f16, bf16, i32)
    func.func private @pairs(complex<f32>, complex<f64>, f64) -> f64
    """)
    module.all()
    by_name = {t.mlir: t for t in SCALARS}
    for name, values in seen.items():
        assert [i for i, _ in values] == list(range(65536))
        for i, value in values:
            expected = from_bits(by_name[name], i)
            assert type(value) is float
            if math.isnan(expected):
                assert math.isnan(value), (name, hex(i))
            else:
                assert value == expected, (name, hex(i), value, expected)
                assert math.copysign(1, value) == math.copysign(1, expected), (name, hex(i))
    assert module.mul(1 + 2j, 3 - 4j, 0.5) == 11.5
    with pytest.raises(LookupError, match=r"refused \(1\+2j\) \(3-4j\)") as raised:
        module.mul(1 + 2j, 3 - 4j, -1.0)
    assert any("'pairs'" in note for note in raised.value.__notes__)
    with pytest.raises(TypeError, match="callback 'pairs': result #0"):
        module.mul(1 + 2j, 3 - 4j, 0.0)


def test_a_signature_string_the_function_cannot_take_is_a_signature_error() -> None:
    # It was accepted, and every call from compiled code then failed inside Python.
    with pytest.raises(SignatureError, match=r"its signature has 2 parameter\(s\), but the "
                                             r"function cannot take 2 positional"):
        callback("(f64, f64) -> f64", registry=CallbackRegistry())(lambda x: x)
    with pytest.raises(SignatureError, match=r"missing a required argument: 'y'"):
        callback("(f64) -> f64", registry=CallbackRegistry())(lambda x, y: x)
    assert callback("(f64, f64) -> f64", registry=CallbackRegistry(), name="any")(
        lambda *xs: sum(xs))(1.0, 2.0) == 3.0


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("session", 5, r"@callback\(session=\.\.\.\) takes a pymlirjit Session, got int"),
    ("registry", "mine", r"@callback\(registry=\.\.\.\) takes a pymlirjit CallbackRegistry, "
                         r"got str"),
])
def test_a_wrong_session_or_registry_is_a_type_error_naming_it(
        keyword: str, value: object, message: str) -> None:
    # It was an AttributeError ('int' object has no attribute 'callbacks').
    def hook(x: f64) -> f64:
        return x

    with pytest.raises(TypeError, match=message):
        callback(**{keyword: value})(hook)  # type: ignore[call-overload]


def test_kernel_address_and_ctypes_inside_callbacks_of_every_kind_of_outer_kernel() -> None:
    """Issue 29 item 3 (a SIGSEGV once): a kernel called through ``.address`` or
    ``.ctypes`` from another kernel's callback, where the outer kernel runs a parallel
    loop or has shared libraries, and the inner one has them or fails."""
    stdout = run_python("""
        import ctypes
        from pymlirjit import Session, callback, f64, mlir_kernel

        session = Session()
        boom = KeyError("inner")
        inners = {}
        for shared in (False, True):
            for fail in (False, True):
                def make(fail):
                    def inner_cb(x):
                        if fail:
                            raise boom
                        return x + 1
                    return inner_cb
                callback("(f64) -> f64", session=session,
                         name=f"cb_{shared}_{fail}")(make(fail))
                name = f"inner_{int(shared)}_{int(fail)}"
                inners[shared, fail] = mlir_kernel(
                    session=session, name=name,
                    shared_libs=["mlir_c_runner_utils"] if shared else None, source=f'''
                    func.func @{name}(%x: f64) -> f64 {{
                      %y = call @cb_{shared}_{fail}(%x) : (f64) -> f64
                      return %y : f64
                    }}
                    func.func private @cb_{shared}_{fail}(f64) -> f64''')(lambda x: None)
        route = {}

        @callback(session=session)
        def relay(x: f64) -> f64:
            kernel, how = route["now"]
            if how == "ctypes":
                return kernel.ctypes(x)
            return ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(kernel.address)(x)

        outers = [mlir_kernel(session=session, name=f"outer{i}", source=f'''
            func.func @outer{i}(%x: f64) -> f64 {{
              %y = call @relay(%x) : (f64) -> f64
              return %y : f64
            }}
            func.func private @relay(f64) -> f64''', **options)(lambda x: None)
            for i, options in enumerate([{}, {"parallel": True},
                                         {"shared_libs": ["mlir_c_runner_utils"]}])]
        results = []
        for outer in outers:
            for (shared, fail), inner in inners.items():
                for how in ("address", "ctypes"):
                    route["now"] = inner, how
                    try:
                        results.append(outer(2.0))
                    except KeyError as error:
                        assert error is boom and fail, (error, fail)
                        results.append("raised")
        print(results.count(3.0), results.count("raised"))
    """)
    assert stdout.split() == ["12", "12"]
