"""Which arrays a ``@jit`` function frees (frontend/ownership.py, CallsMixin's
settle_ownership): every new array nothing can reach any more is freed, and nothing
that can still be reached is. Values are compared with Python; memory is measured in
child processes (each pattern allocates 8 MB a call, 200 calls)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pymlirjit
from pymlirjit import jit

from .helpers import check

ROOT = str(Path(pymlirjit.__file__).resolve().parent.parent)


@jit
def total(t):
    return t.sum()


@jit
def first_half(t):
    return t[: t.shape[0] // 2]


@jit
def tail(t):
    return t[1:]


@jit
def make(n):
    return np.arange(n) * 1.0


def keep_first(t) -> float:  # an automatic callback: a view valid during the call
    return float(t[0])


@jit
def temporary_to_helper(a):
    return total(a * 2.0)


@jit
def view_of_temporary_from_helper(a):
    u = first_half(a * 2.0)  # u owns the product's memory: freed once, after its use
    return u.sum() + u[0]


@jit
def view_of_parameter_from_helper(a):
    u = first_half(a)  # a view of the caller's array: never freed here
    return u.sum()


@jit
def views_of_views(a):
    return tail(first_half(a)).sum() + tail(first_half(a * 3.0)).sum()


@jit
def new_array_from_helper(n):
    t = make(n)
    s = t.sum()
    return s + make(n)[n - 1]


@jit
def in_a_loop(a, k):
    s = 0.0
    for i in range(k):
        t = a * i
        s += total(t) + keep_first(a + t)
        u = tail(t)
        s += u[0]
    return s


@jit
def returned_through_helper(a):
    return tail(first_half(a))


@jit
def alias_outlives_its_block(a, k):
    u = a[:1]
    for i in range(1, k):
        t = a * i
        u = t[1:]  # t's memory is used after the loop: not freed in it
    return u.sum() + make(4)[1:].sum()


@jit
def result_ignored(a):
    first_half(a * 2.0)
    make(a.shape[0])
    return a[0]


@jit
def picky(t):
    if t[0] > 0.0:
        raise ValueError("positive")
    return t.sum()


@jit
def raising_with_temporaries(a):
    u = make(a.shape[0])
    return picky(a * 2.0 + u)


@jit(parallel=True)
def parallel_temporaries(a, k):
    out = np.zeros(k)
    for i in pymlirjit.prange(k):
        t = a * i
        out[i] = total(t) + tail(a + t)[0] + make(3)[2]
    return out


@jit
def iterate(x, y, k):
    for _ in range(k):
        x = 0.5 * (x + y)  # each sweep's array replaces (and frees) the last
    return x.sum()


@jit
def iterate_returned(x, y, k):
    for _ in range(k):
        x = 0.5 * (x + y)
    return x


@jit
def shrink(x, k):
    x = x * 1.0
    for _ in range(k):
        x = x[1:]  # a view of its own array: kept, still ours
    return x.sum()


@jit
def switch_owner(a, k):
    x = a * 1.0
    for i in range(k):
        if i % 3 == 0:
            x = a  # the caller's: ours freed, this one never
        elif i % 3 == 1:
            x = a * i
        else:
            x = tail(x)
    return x.sum() + x[0]


@jit
def allocated_in_either_branch(a, flag):
    if flag:  # noqa: SIM108 (two assignments are the point: t is a managed variable)
        t = np.zeros(a.shape[0])  # a managed variable given a constructor's array
    else:
        t = np.ones(a.shape[0])
    return t.sum() + a[0]


@jit
def constructor_temporaries(n):
    return np.zeros(n).sum() + np.ones(n)[0] + (np.ones(n) * 2.0).sum()


@jit
def unpacked_new_arrays(a):
    t, u = a * 2.0, np.ones(a.shape[0])  # each freed where its block ends
    return t.sum() + u.sum()


@jit
def make_pair(a):
    return a * 2.0, a[1:]  # a new array and a view of the argument


@jit
def unpacked_from_a_call(a, k):
    s = 0.0
    for _ in range(k):
        t, v = make_pair(a)  # t is new (freed each iteration), v is the caller's
        s += t.sum() + v[0]
    return s


@jit
def swapped_in_a_loop(a, k):
    x, y = a * 1.0, a + 1.0
    for _ in range(k):
        x, y = y * 2.0, x  # y views the last x: neither may be freed on its own
    return x.sum() + y[0]


@jit
def unpacked_and_returned(a, k):
    x, s = a * 1.0, 0.0
    for _ in range(k):
        x, s = x + 1.0, s + x[0]  # the last x is the caller's
    return x, s


@pytest.mark.parametrize("f, args", [
    (temporary_to_helper, (np.arange(10.0),)),
    (view_of_temporary_from_helper, (np.arange(10.0),)),
    (view_of_parameter_from_helper, (np.arange(10.0),)),
    (views_of_views, (np.arange(12.0),)),
    (new_array_from_helper, (9,)),
    (in_a_loop, (np.arange(1.0, 6.0), 4)),
    (alias_outlives_its_block, (np.arange(6.0), 4)),
    (result_ignored, (np.arange(4.0),)),
    (raising_with_temporaries, (np.arange(4.0),)),
    (raising_with_temporaries, (-np.arange(1.0, 5.0),)),
    (parallel_temporaries, (np.arange(1.0, 6.0), 7)),
    (iterate, (np.arange(5.0), np.ones(5), 4)),
    (iterate, (np.arange(5.0), np.ones(5), 0)),
    (iterate_returned, (np.arange(5.0), np.ones(5), 3)),
    (iterate_returned, (np.arange(5.0), np.ones(5), 0)),
    (shrink, (np.arange(6.0), 3)),
    (switch_owner, (np.arange(1.0, 9.0), 7)),
    (allocated_in_either_branch, (np.arange(4.0), True)),
    (allocated_in_either_branch, (np.arange(4.0), False)),
    (constructor_temporaries, (5,)),
    (unpacked_new_arrays, (np.arange(4.0),)),
    (unpacked_from_a_call, (np.arange(4.0), 3)),
    (swapped_in_a_loop, (np.arange(4.0), 3)),
    (unpacked_and_returned, (np.arange(4.0), 3)),
    (unpacked_and_returned, (np.arange(4.0), 0)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_results_agree_with_python(f: object, args: tuple[object, ...]) -> None:
    for _ in range(3):  # a second call would see memory freed too early
        check(f, *args)


def test_an_iterated_array_returned_is_the_last_one() -> None:
    x, y = np.arange(5.0), np.ones(5)
    r = iterate_returned(x, y, 3)
    np.testing.assert_array_equal(r, iterate_returned.py_func(x, y, 3))
    assert iterate_returned(x, y, 0) is not None
    np.testing.assert_array_equal(x, np.arange(5.0))  # the parameter is never freed


def test_a_view_returned_through_helpers_is_of_the_argument() -> None:
    a = np.arange(10.0)
    r = returned_through_helper(a)
    assert np.shares_memory(r, a) or np.array_equal(r, a[1:5])
    np.testing.assert_array_equal(r, a[1:5])
    del r
    np.testing.assert_array_equal(a, np.arange(10.0))  # still there, still right


def test_calls_free_what_they_make_and_only_that() -> None:
    text = view_of_parameter_from_helper.inspect_mlir()
    assert "memref.extract_aligned_pointer_as_index" in text  # ours only if not a's
    assert "memref.dealloc" in temporary_to_helper.inspect_mlir()


LEAKS = """
import numpy as np
from pymlirjit import jit
from tests.frontend.test_ownership import *

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

a = np.ones(1_000_000)
n = 1_000_000
cases = {
    "temporary_to_helper": lambda: temporary_to_helper(a),
    "view_of_temporary_from_helper": lambda: view_of_temporary_from_helper(a),
    "views_of_views": lambda: views_of_views(a),
    "new_array_from_helper": lambda: new_array_from_helper(n),
    "in_a_loop": lambda: in_a_loop(a, 3),
    "result_ignored": lambda: result_ignored(a),
    "raising_with_temporaries": lambda: raising_with_temporaries(a),
    "parallel_temporaries": lambda: parallel_temporaries(a, 2),
    "iterate": lambda: iterate(a, a, 3),
    "iterate_returned": lambda: iterate_returned(a, a, 3),
    "shrink": lambda: shrink(a, 3),
    "switch_owner": lambda: switch_owner(a, 5),
    "allocated_in_either_branch": lambda: allocated_in_either_branch(a, True),
    "constructor_temporaries": lambda: constructor_temporaries(n),
    "unpacked_new_arrays": lambda: unpacked_new_arrays(a),
    "unpacked_from_a_call": lambda: unpacked_from_a_call(a, 3),
    "unpacked_and_returned": lambda: unpacked_and_returned(a, 3),
}
def attempt(call):
    try:
        call()
    except ValueError:
        pass

for name, call in cases.items():
    for _ in range(3):
        attempt(call)
    before = rss()
    for _ in range(200):
        attempt(call)
    print(name, round(rss() - before))
"""


def test_no_new_array_leaks() -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", "import os\n" + textwrap.dedent(LEAKS)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    grown = {name: int(mb) for name, mb in (line.split() for line in done.stdout.split("\n")
                                             if line)}
    assert len(grown) == 17, done.stdout
    # 8 MB (or more) a call leaked would be 1,600 MB; allocator noise is a few MB
    assert all(mb < 100 for mb in grown.values()), grown
