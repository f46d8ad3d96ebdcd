"""Deallocations of forgotten buffers (pymlirjit/codegen/deallocations.py): every test
compiles; the memory test runs in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from pymlirjit import Session
from pymlirjit.codegen.deallocations import insert_deallocations
from pymlirjit.lowering.pipeline import new_context, parse_module

ROOT = Path(__file__).resolve().parent.parent.parent

SCRATCH = """
func.func @scratch(%n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f64
  %zero = arith.constant 0.0 : f64
  %m = memref.alloc(%n) : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %one, %m[%i] : memref<?xf64>
  }
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %m[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  return %s : f64
}
func.func @kept(%n: index) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f64
  %m = memref.alloc(%n) : memref<?xf64>
  %v = memref.subview %m[0] [1] [1] : memref<?xf64> to memref<1xf64, strided<[1]>>
  memref.store %one, %v[%c0] : memref<1xf64, strided<[1]>>
  return %m : memref<?xf64>
}
func.func @freed(%n: index) {
  %m = memref.alloc(%n) : memref<?xf64>
  %v = memref.cast %m : memref<?xf64> to memref<*xf64>
  memref.dealloc %v : memref<*xf64>
  return
}
func.func @per_iteration(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f64
  scf.for %i = %c0 to %n step %c1 {
    %m = memref.alloc() : memref<4xf64>
    memref.store %one, %m[%c0] : memref<4xf64>
  }
  return
}
"""


def test_only_forgotten_buffers_are_freed() -> None:
    module = parse_module(SCRATCH, new_context())
    # @scratch's buffer and @per_iteration's (each iteration); not @kept's (returned)
    # nor @freed's (freed through a view).
    assert insert_deallocations(module) == 2
    text = str(module)
    assert text.count("memref.dealloc") == 3
    compiled = Session().compile(SCRATCH)
    assert compiled.scratch(1000) == 1000.0
    kept = compiled.kept(3)
    assert kept[0] == 1.0 and kept.shape == (3,)
    compiled.freed(8)
    compiled.per_iteration(10)


def test_a_forgotten_scratch_buffer_no_longer_leaks() -> None:
    # 200 calls with an 8 MB scratch buffer: +1.6 GB before.
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pymlirjit import Session
        from tests.codegen.test_deallocations import SCRATCH
        scratch = Session().compile(SCRATCH).scratch
        scratch(1 << 20)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(200):
            assert scratch(1 << 20) == float(1 << 20)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    grown_kib = int(done.stdout.split()[-1])
    assert grown_kib < 100 * 1024, f"RSS grew by {grown_kib >> 10} MB over 200 calls"


def test_results_stay_owned_by_their_arrays() -> None:
    kept = Session().compile(SCRATCH).kept
    arrays = [kept(1000) for _ in range(50)]
    assert all(a[0] == 1.0 for a in arrays)
    assert len({a.ctypes.data for a in arrays}) == 50
    del arrays
    assert np.isfinite(kept(4)[0])


def test_a_buffer_an_async_region_uses_is_left_alone() -> None:
    # The region may still run when the block that allocated the buffer ends.
    module = parse_module("""
    func.func @spawn(%v: f64) {
      %c0 = arith.constant 0 : index
      %m = memref.alloc() : memref<4xf64>
      %t = async.execute {
        memref.store %v, %m[%c0] : memref<4xf64>
        async.yield
      }
      return
    }""", new_context())
    assert insert_deallocations(module) == 0
