"""numpy arrays <-> memref descriptors: property tests, helper unit tests, memory soaks.

Property tests draw a dtype, a rank (0-4, zero-size dims included) and a view (slices
with negative steps, transposes) and check that the view round-trips bit-exactly through
a compiled copy kernel and through a callback that copies what it receives. Kernels are
compiled once per (dtype, rank) and cached at module level, so examples do not recompile.

Example counts: 25 by default; ``PYMLIRJIT_FUZZ=long`` raises them to 500, and the
``slow``-marked variants (run with ``-m slow``) use 500 as well.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymlirjit import (
    MemRef,
    Session,
    bf16,
    callback,
    complex64,
    complex128,
    f16,
    f32,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from pymlirjit.boundary.memref import (
    ALIGNED,
    ALLOCATED,
    DESCRIPTOR_FIELDS,
    OFFSET,
    SIZES,
    STRIDES,
    array_from_descriptor,
    descriptor_for_argument,
    descriptor_type,
    fill_descriptor_with_copy,
)
from pymlirjit.boundary.types import MemRefType, ScalarType, parse_type
from tests.conftest import rss_bytes

# Hypothesis imports libcst to write its failing-example patch after a failure; libcst
# warns at import (mypy_extensions.TypedDict), and pyproject turns warnings into errors,
# which would hide the failure behind an INTERNALERROR. Import it now, warnings off.
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore", DeprecationWarning)
    import hypothesis.extra._patching  # noqa: F401

LONG_FUZZ = os.environ.get("PYMLIRJIT_FUZZ") == "long"
FAST_EXAMPLES = 500 if LONG_FUZZ else 25
SLOW_EXAMPLES = 500

try:
    import ml_dtypes  # noqa: F401

    HAVE_BF16 = True
except ImportError:  # pragma: no cover - ml_dtypes is a test dependency
    HAVE_BF16 = False

ELEMENTS: dict[str, ScalarType] = {
    "f16": f16, "f32": f32, "f64": f64, "i1": i1, "i8": i8, "i16": i16, "i32": i32,
    "i64": i64, "complex64": complex64, "complex128": complex128,
}
if HAVE_BF16:
    ELEMENTS["bf16"] = bf16

MAX_RANK = 4


@pytest.fixture(scope="module")
def slow_opt_in(request: pytest.FixtureRequest) -> None:
    """Skip ``slow`` tests unless asked for: pyproject's addopts does not deselect them.

    (Module-scoped, so hypothesis tests may use it.)"""
    if "slow" not in (request.config.option.markexpr or "") and not LONG_FUZZ:
        pytest.skip("slow variant: run with -m slow (or PYMLIRJIT_FUZZ=long)")


# -- MLIR generators -----------------------------------------------------------------------

def strided_type(element: ScalarType, rank: int) -> str:
    dims = "?x" * rank
    strides = ", ".join("?" * rank)
    return f"memref<{dims}{element.mlir}, strided<[{strides}], offset: ?>>"


def copy_source(element: ScalarType, rank: int) -> str:
    """``@copy(%src, %dst)``: a loop nest copying every element of ``src`` to ``dst``.

    For i1, ``memref.copy`` (lowered to a call of ``memrefCopy`` from the C runner
    utils): lowering a ``memref.load``/``memref.store`` of i1 aborts the process (an
    assertion in MLIR 22's MemRefToLLVM; see test_i1_load_lowering_does_not_abort)."""
    t = strided_type(element, rank)
    if element is i1:
        return (f"func.func @copy(%src: {t}, %dst: {t}) {{\n"
                f"  memref.copy %src, %dst : {t} to {t}\n  return\n}}")
    lines = [f"func.func @copy(%src: {t}, %dst: {t}) {{"]
    lines += [f"  %c{k} = arith.constant {k} : index" for k in range(max(rank, 2))]
    lines += [f"  %d{k} = memref.dim %src, %c{k} : {t}" for k in range(rank)]
    for k in range(rank):
        lines.append(f"{'  ' * (k + 1)}scf.for %i{k} = %c0 to %d{k} step %c1 {{")
    indices = ", ".join(f"%i{k}" for k in range(rank))
    pad = "  " * (rank + 1)
    lines.append(f"{pad}%v = memref.load %src[{indices}] : {t}")
    lines.append(f"{pad}memref.store %v, %dst[{indices}] : {t}")
    lines += [f"{'  ' * (k + 1)}}}" for k in reversed(range(rank))]
    lines += ["  return", "}"]
    return "\n".join(lines)


def give_source(element: ScalarType, rank: int) -> str:
    """``@give(%src)``: hands ``src`` to the callback ``@take``."""
    t = strided_type(element, rank)
    return f"""
func.func @give(%src: {t}) {{
  call @take(%src) : ({t}) -> ()
  return
}}
func.func private @take({t})
"""


_COPY_KERNELS: dict[tuple[str, int], Callable[..., Any]] = {}
_GIVE_KERNELS: dict[tuple[str, int], tuple[Callable[..., Any], list[np.ndarray[Any, Any]]]] = {}


def copy_kernel(name: str, rank: int) -> Callable[..., Any]:
    key = (name, rank)
    if key not in _COPY_KERNELS:
        element = ELEMENTS[name]
        libs = ["libmlir_c_runner_utils.so"] if element is i1 else []
        _COPY_KERNELS[key] = Session(shared_libs=libs).compile(copy_source(element, rank)).copy
    return _COPY_KERNELS[key]


def give_kernel(name: str, rank: int) -> tuple[Callable[..., Any], list[np.ndarray[Any, Any]]]:
    key = (name, rank)
    if key not in _GIVE_KERNELS:
        element = ELEMENTS[name]
        session = Session()
        received: list[np.ndarray[Any, Any]] = []
        annotation = MemRef[(element,) + (None,) * rank]

        def take(a: Any) -> None:
            received.append(np.array(a, copy=True))

        take.__annotations__ = {"a": annotation, "return": None}
        callback(session=session)(take)
        _GIVE_KERNELS[key] = (session.compile(give_source(element, rank)).give, received)
    return _GIVE_KERNELS[key]


# -- strategies ----------------------------------------------------------------------------

@dataclass
class ViewCase:
    """A base array and the view of it under test, with how the view was made."""

    dtype_name: str
    base: np.ndarray[Any, Any]
    view: np.ndarray[Any, Any]
    recipe: str

    def __repr__(self) -> str:
        return (f"ViewCase({self.dtype_name}, base shape {self.base.shape}, view "
                f"{self.recipe} -> shape {self.view.shape} strides {self.view.strides})")


def random_array(element: ScalarType, shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    """Random bits of every kind (NaN payloads, infinities, subnormals); i1 as 0/1."""
    rng = np.random.default_rng(seed)
    dtype = element.dtype
    if element is i1:
        return rng.integers(0, 2, shape).astype(np.bool_)
    raw = rng.integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def every_axis(slices: list[slice]) -> tuple[Any, ...]:
    """An index applying one slice per axis (``...`` first, so rank 0 gives a 0-d view)."""
    return (Ellipsis, *slices)


@st.composite
def view_cases(draw: st.DrawFn, dtype_name: str | None = None) -> ViewCase:
    name = dtype_name or draw(st.sampled_from(sorted(ELEMENTS)))
    rank = draw(st.integers(0, MAX_RANK))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
    base = random_array(ELEMENTS[name], shape, draw(st.integers(0, 2**32 - 1)))
    slices: list[slice] = []
    for size in shape:
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        start = draw(st.integers(0, max(size - 1, 0)))
        stop: int | None = draw(st.integers(0, size))
        if step < 0 and stop is not None:
            start, stop = size - 1 - start, (None if stop == 0 else size - 1 - stop)
        slices.append(slice(start, stop, step) if draw(st.booleans()) else slice(None))
    permutation = draw(st.permutations(range(rank)))
    view = base[every_axis(slices)].transpose(permutation)
    recipe = f"[{', '.join(_slice_text(s) for s in slices)}].transpose({list(permutation)})"
    return ViewCase(name, base, view, recipe)


def _slice_text(s: slice) -> str:
    parts = ["" if v is None else str(v) for v in (s.start, s.stop, s.step)]
    return ":".join(parts).rstrip(":") or ":"


def assert_same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), f"{got!r} != {want!r}"


# -- a. round trips ------------------------------------------------------------------------

def check_copy_kernel(case: ViewCase, flip_destination: bool) -> None:
    copy = copy_kernel(case.dtype_name, case.view.ndim)
    before = case.base.copy()
    target = np.zeros(case.view.shape, case.view.dtype)
    # a destination with negative strides when asked (target reversed along every axis)
    destination = target[every_axis([slice(None, None, -1)] * target.ndim)] if flip_destination \
        else target
    copy(case.view, destination)
    assert_same_bits(destination, case.view)
    assert_same_bits(case.base, before)  # the source was only read


def check_callback(case: ViewCase) -> None:
    give, received = give_kernel(case.dtype_name, case.view.ndim)
    received.clear()
    give(case.view)
    assert len(received) == 1
    assert_same_bits(received[0], case.view)


def _fast(test: Callable[..., None]) -> Callable[..., None]:
    return settings(max_examples=FAST_EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])(test)


def _slow(test: Callable[..., None]) -> Callable[..., None]:
    decorated = settings(max_examples=SLOW_EXAMPLES, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow])(test)
    return pytest.mark.usefixtures("slow_opt_in")(pytest.mark.slow(decorated))


test_views_round_trip_through_a_copy_kernel = _fast(given(view_cases(), st.booleans())(
    check_copy_kernel))
test_views_round_trip_through_a_callback = _fast(given(view_cases())(check_callback))
test_views_round_trip_through_a_copy_kernel_long = _slow(given(view_cases(), st.booleans())(
    check_copy_kernel))
test_views_round_trip_through_a_callback_long = _slow(given(view_cases())(check_callback))


@pytest.mark.parametrize("name", sorted(ELEMENTS))
@pytest.mark.parametrize("rank", range(MAX_RANK + 1))
def test_every_dtype_and_rank_round_trips(name: str, rank: int) -> None:
    """Deterministic coverage of each (dtype, rank) pair, whatever hypothesis draws."""
    element = ELEMENTS[name]
    base = random_array(element, (5,) * rank, seed=rank)
    view = base[every_axis([slice(None, None, -2)] * rank)].transpose(tuple(reversed(range(rank))))
    case = ViewCase(name, base, view, "[::-2, ...].T")
    check_copy_kernel(case, flip_destination=True)
    check_callback(case)
    zero = base[every_axis([slice(0, 0)] * rank)]
    empty = ViewCase(name, base, zero, "[0:0, ...]")
    check_copy_kernel(empty, flip_destination=False)
    check_callback(empty)


I1_LOAD = """
func.func @first(%a: memref<?xi1>) -> i1 {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<?xi1>
  return %v : i1
}
"""


def test_i1_load_of_a_bool_array() -> None:
    """MLIR 22's memref lowering aborts the process on a load of i1; pymlirjit lowers it
    as a one-element vector load (pymlirjit.lowering.subbyte). In a subprocess, so that a
    regression fails this test, not the whole run."""
    code = ("import numpy as np\nfrom pymlirjit import Session\n"
            f"first = Session().compile({I1_LOAD!r}).first\n"
            "print(first(np.array([True, False])), first(np.array([False, True])))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "False"]


def test_generated_copy_kernel_source() -> None:
    assert copy_source(f32, 0).count("scf.for") == 0
    assert copy_source(f32, 3).count("scf.for") == 3
    assert "memref<?x?xf32, strided<[?, ?], offset: ?>>" in copy_source(f32, 2)


# -- b. pymlirjit.boundary.memref helpers ----------------------------------------------------------

def memref_type(text: str) -> MemRefType:
    t = parse_type(text)
    assert isinstance(t, MemRefType)
    return t


def test_descriptor_aliases_the_array() -> None:
    array = np.arange(12.0).reshape(3, 4)
    view = array[::-1, 1::2]
    descriptor, kept = descriptor_for_argument(
        view, memref_type("memref<?x?xf64, strided<[?, ?], offset: ?>>"), "p")
    assert kept is view
    assert tuple(descriptor.sizes) == (3, 2)
    assert tuple(descriptor.strides) == (-4, 2)
    element_address = descriptor.aligned + descriptor.offset * 8
    assert element_address == view.ctypes.data
    back = array_from_descriptor(descriptor, 2, f64)
    assert np.shares_memory(back, array)
    np.testing.assert_array_equal(back, view)


def test_descriptor_of_a_static_offset_layout() -> None:
    array = np.arange(6.0)
    descriptor, _ = descriptor_for_argument(
        array, memref_type("memref<6xf64, strided<[1], offset: 3>>"), "p")
    assert descriptor.offset == 3
    assert descriptor.aligned + 3 * 8 == array.ctypes.data
    np.testing.assert_array_equal(array_from_descriptor(descriptor, 1, f64), array)


@pytest.mark.parametrize(("value", "mlir", "error", "message"), [
    (np.zeros(4), "memref<?xf32>", TypeError, "expected dtype float32"),
    ([0.0, 1.0], "memref<?xf64>", TypeError, "expected a numpy array"),
    (np.zeros((2, 2)), "memref<?xf64>", ValueError, "expected a rank-1 array"),
    (np.zeros(5), "memref<4xf64>", ValueError, "dim 0 must be 4"),
    (np.zeros(8)[::2], "memref<?xf64>", ValueError, "identity layout"),
    (np.zeros((3, 4)).T, "memref<?x?xf64>", ValueError, "C-contiguous"),
    (np.zeros((3, 4))[:, ::2], "memref<?x?xf64, strided<[?, 1], offset: ?>>", ValueError,
     "needs stride 1 in dim 1"),
    (np.zeros(16, np.uint8)[1:9].view(np.float64), "memref<?xf64>", None, ""),
    (np.ndarray((2,), np.float64, np.zeros(17, np.uint8), 1, (4,)),
     "memref<?xf64, strided<[?], offset: ?>>", ValueError, "not a multiple of the item size"),
], ids=["dtype", "list", "rank", "static-dim", "identity-strided", "identity-transposed",
        "static-stride", "unaligned-ok", "stride-not-multiple"])
def test_descriptor_for_argument_errors(value: Any, mlir: str, error: type[Exception] | None,
                                        message: str) -> None:
    if error is None:
        descriptor_for_argument(value, memref_type(mlir), "param 'x'")
        return
    with pytest.raises(error, match=message) as caught:
        descriptor_for_argument(value, memref_type(mlir), "param 'x'")
    assert "param 'x'" in str(caught.value)


def test_descriptor_for_argument_rejects_read_only_arrays() -> None:
    array = np.zeros(3)
    array.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        descriptor_for_argument(array, memref_type("memref<?xf64>"), "p")
    broadcast = np.broadcast_to(np.zeros(1), (4,))
    with pytest.raises(ValueError, match="read-only"):
        descriptor_for_argument(broadcast, memref_type("memref<?xf64, strided<[?], offset: ?>>"),
                                "p")


def test_size_one_dims_ignore_static_strides() -> None:
    array = np.zeros((1, 3))[:, ::1]
    descriptor_for_argument(array, memref_type("memref<1x3xf64, strided<[7, 1]>>"), "p")


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (0, 1), (1, 1), (4, 1)])
def test_empty_and_unit_dims_carry_no_stride_information(shape: tuple[int, ...]) -> None:
    # An empty C-contiguous array has strides (0, 0): it was refused for strided<[?, 1]>.
    array = np.zeros(shape)
    t = memref_type("memref<?x?xf64, strided<[?, 1], offset: ?>>")
    descriptor, _ = descriptor_for_argument(array, t, "p")
    assert tuple(descriptor.sizes) == shape
    assert descriptor.strides[1] == 1  # what the layout declares, whatever numpy says
    kernel = Session().compile("""
    func.func @rows(%a: memref<?x?xf64, strided<[?, 1], offset: ?>>) -> index {
      %c0 = arith.constant 0 : index
      %n = memref.dim %a, %c0 : memref<?x?xf64, strided<[?, 1], offset: ?>>
      return %n : index
    }""").rows
    assert kernel(array) == kernel.call_python(array) == shape[0]
    # An empty array with strides no itemsize divides (a view of bytes) is fine too.
    odd = np.zeros((0, 24), np.uint8).view(np.float64)[:, :0]
    descriptor_for_argument(np.lib.stride_tricks.as_strided(odd, (0, 3), (3, 5)), t, "p")


def test_array_from_descriptor_is_zero_copy() -> None:
    buffer = (ctypes.c_float * 6)(*range(6))
    descriptor = descriptor_type(2)()
    descriptor.allocated = descriptor.aligned = ctypes.addressof(buffer)
    descriptor.offset = 1
    descriptor.sizes[:] = [2, 2]
    descriptor.strides[:] = [3, 1]
    view = array_from_descriptor(descriptor, 2, f32, keepalive=buffer)
    assert view.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    backing = np.ctypeslib.as_array(buffer)
    assert np.shares_memory(view, backing)
    view[1, 1] = 50.0
    assert buffer[5] == 50.0
    assert view.base is not None  # the holder keeps ``buffer`` alive


def test_array_from_descriptor_rank_zero_and_empty() -> None:
    value = ctypes.c_double(2.5)
    descriptor = descriptor_type(0)()
    descriptor.allocated = descriptor.aligned = ctypes.addressof(value)
    assert array_from_descriptor(descriptor, 0, f64, value)[()] == 2.5
    empty = descriptor_type(1)()
    empty.sizes[:] = [0]
    empty.strides[:] = [1]
    assert array_from_descriptor(empty, 1, f64).shape == (0,)  # null pointer: no access


def test_fill_descriptor_with_copy() -> None:
    from pymlirjit.boundary import ffi

    source = np.arange(12, dtype=np.int16).reshape(3, 4)[::-1, ::2]
    descriptor = descriptor_type(2)()
    fill_descriptor_with_copy(descriptor, source, memref_type("memref<?x?xi16>"), "result")
    try:
        assert descriptor.allocated == descriptor.aligned and descriptor.offset == 0
        assert tuple(descriptor.sizes) == (3, 2)
        assert tuple(descriptor.strides) == (2, 1)
        copy = array_from_descriptor(descriptor, 2, i16)
        np.testing.assert_array_equal(copy, source)
        assert not np.shares_memory(copy, source)
    finally:
        ffi.free(descriptor.allocated)


def test_fill_descriptor_with_copy_errors() -> None:
    descriptor = descriptor_type(1)()
    with pytest.raises(ValueError, match="static strides"):
        fill_descriptor_with_copy(descriptor, np.zeros(3),
                                  memref_type("memref<?xf64, strided<[2]>>"), "result")
    with pytest.raises(TypeError, match="dtype float32"):
        fill_descriptor_with_copy(descriptor, np.zeros(3), memref_type("memref<?xf32>"), "r")
    with pytest.raises(ValueError, match="dim 0 must be 2"):
        fill_descriptor_with_copy(descriptor, np.zeros(3), memref_type("memref<2xf64>"), "r")


def test_fill_descriptor_with_copy_of_an_empty_array() -> None:
    from pymlirjit.boundary import ffi

    descriptor = descriptor_type(2)()
    fill_descriptor_with_copy(descriptor, np.zeros((0, 3)), memref_type("memref<?x3xf64>"), "r")
    assert descriptor.allocated  # malloc(1): still a pointer the compiled code may free
    assert tuple(descriptor.sizes) == (0, 3)
    ffi.free(descriptor.allocated)


# -- c. memory: returned arrays and callback views are freed --------------------------------

ALLOC_SOURCE = """
func.func @make(%n: index) -> memref<?xf64> {
  %m = memref.alloc(%n) : memref<?xf64>
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f64
  memref.store %one, %m[%c0] : memref<?xf64>
  return %m : memref<?xf64>
}
"""

VISIT_SOURCE = """
func.func @visit(%a: memref<?xf64>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    func.call @look(%a) : (memref<?xf64>) -> ()
  }
  return
}
func.func private @look(memref<?xf64>)
"""

RSS_BOUND = 30 * 2**20


def soak(step: Callable[[], None], calls: int, label: str, per_step: int = 1) -> None:
    for _ in range(min(calls, 2000)):  # warm-up: caches, allocator arenas
        step()
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    elapsed = time.perf_counter() - start
    gc.collect()
    growth = rss_bytes() - before
    print(f"\n{label}: {calls * per_step} calls, {elapsed / calls / per_step * 1e6:.2f} us/call, "
          f"RSS growth {growth / 2**20:.2f} MB")
    assert growth < RSS_BOUND, f"{label}: RSS grew by {growth / 2**20:.1f} MB"


def returned_arrays(calls: int) -> None:
    make = Session().compile(ALLOC_SOURCE).make

    def step() -> None:
        array = make(1000)  # 8 KB each: a leak would show as ~80 MB per 10^4 calls
        assert array[0] == 1.0

    soak(step, calls, "kernel returning memref<?xf64>")


def callback_views(calls: int) -> None:
    session = Session()
    seen = [0]

    @callback(session=session)
    def look(a: MemRef[f64, None]) -> None:
        seen[0] += int(a.shape[0] == 1000)

    visit = session.compile(VISIT_SOURCE).visit
    data = np.ones(1000)

    def step() -> None:
        visit(data, 10)  # 10 callbacks per kernel call

    seen[0] = 0
    soak(step, calls // 10, "callback receiving memref<?xf64> (10 per kernel call)", 10)
    assert seen[0] >= calls


def test_returned_arrays_are_freed() -> None:
    returned_arrays(10_000)


def test_callback_views_do_not_leak() -> None:
    callback_views(10_000)


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
def test_returned_arrays_are_freed_long() -> None:
    returned_arrays(100_000)


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
def test_callback_views_do_not_leak_long() -> None:
    callback_views(100_000)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_descriptor_field_indices_name_the_ctypes_fields(rank: int) -> None:
    names = [field[0] for field in descriptor_type(rank)._fields_]
    indices = {"allocated": ALLOCATED, "aligned": ALIGNED, "offset": OFFSET,
               "sizes": SIZES, "strides": STRIDES}
    assert list(DESCRIPTOR_FIELDS) == sorted(indices, key=indices.__getitem__)
    assert names == [name for name in DESCRIPTOR_FIELDS if rank or indices[name] < SIZES]
    for name in names:
        assert names[indices[name]] == name
    assert ctypes.sizeof(descriptor_type(rank)) == 8 * (3 + 2 * rank)


# -- ndarray subclasses -------------------------------------------------------------------

TOTALS = """
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
}
func.func @first(%t: tensor<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %x = tensor.extract %t[%c0] : tensor<?xf64>
  return %x : f64
}
func.func @rank(%u: memref<*xf64>) -> index {
  %r = memref.rank %u : memref<*xf64>
  return %r : index
}
"""


class PlainSubclass(np.ndarray):  # type: ignore[type-arg]
    """An ndarray subclass that changes nothing about its elements."""


def test_a_masked_array_is_refused_naming_the_parameter(session: Session) -> None:
    """Its mask would be ignored: the kernel would read the masked elements (numba
    refuses masked arrays too). Checked also once calls take the native entry."""
    from pymlirjit import mlir_kernel
    from pymlirjit.boundary.vectorcall import has_entry

    @mlir_kernel(source=TOTALS, name="total", session=session)
    def total(values: np.ndarray) -> float: ...

    assert total(np.ones(3)) == 3.0 and has_entry(total)  # the native entry is in place
    masked = np.ma.masked_array([1.0, 2.0, 100.0], mask=[False, False, True])
    with pytest.raises(TypeError, match=r"total\(\) argument 1 \('values'\): got a numpy "
                                        r"masked array, whose mask compiled code would ignore"):
        total(masked)
    module = session.compile(TOTALS)
    for function in (module.total, module.first, module.rank):
        with pytest.raises(TypeError, match="masked array"):
            function(masked)
    nothing_masked = np.ma.masked_array(np.ones(2))
    with pytest.raises(TypeError, match="masked array"):
        total(nothing_masked)
    assert total(masked.filled(0.0)) == 3.0
    assert total(masked.data) == 103.0


def test_ndarray_subclasses_without_hidden_meaning_are_taken(session: Session,
                                                              tmp_path: Any) -> None:
    module = session.compile(TOTALS)
    mapped = np.memmap(tmp_path / "values.bin", dtype=np.float64, mode="w+", shape=(4,))
    mapped[:] = [1.0, 2.0, 3.0, 4.0]
    plain = np.arange(5.0).view(PlainSubclass)
    assert module.total(mapped) == 10.0
    assert module.total(plain) == 10.0
    assert module.first(plain) == 0.0
    assert module.rank(plain) == 1


def test_a_callback_returning_a_masked_array_is_refused(session: Session) -> None:
    @callback(name="masked_values", session=session)
    def masked_values(n: i64) -> MemRef[f64, None]:
        return np.ma.masked_array(np.ones(n), mask=[True] * n)

    module = session.compile("""
    func.func private @masked_values(i64) -> memref<?xf64>
    func.func @call() -> memref<?xf64> {
      %n = arith.constant 2 : i64
      %r = func.call @masked_values(%n) : (i64) -> memref<?xf64>
      return %r : memref<?xf64>
    }""")
    with pytest.raises(TypeError, match=r"callback 'masked_values': result #0: got a numpy "
                                        r"masked array"):
        module.call()
