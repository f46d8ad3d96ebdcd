"""A kernel with a Python callback, compiled once and loaded by later processes.

``@mlir_kernel(..., cache=True)`` keeps the machine code in the disk cache: the first
process compiles the module and stores it as a shared library; every later process
(here, two more runs of this script in fresh interpreters) loads that library in a
millisecond or two instead of compiling, and links it to *its own* callback.

The cache directory is ``$PYMLIRJIT_CACHE_DIR`` (else ``~/.cache/pymlirjit``); this
script uses a temporary one, so that it starts cold.

Run: ``python examples/disk_cache.py``
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from pymlirjit import callback, mlir_kernel
from pymlirjit.typing import f64, i64


@callback
def weight(i: i64) -> f64:
    """Called from the compiled loop for every index."""
    return 1.0 / (1 + i)


@mlir_kernel(source="""
func.func @harmonic(%n: i64) -> f64 {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %zero = arith.constant 0.0 : f64
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 : i64 {
    %w = func.call @weight(%i) : (i64) -> f64
    %next = arith.addf %acc, %w : f64
    scf.yield %next : f64
  }
  return %sum : f64
}
func.func private @weight(i64) -> f64
""", cache=True)
def harmonic(n: i64) -> f64: ...


def run_once() -> None:
    start = time.perf_counter()
    harmonic.compile()  # compiled, or loaded from the disk cache
    ready = time.perf_counter() - start
    print(f"ready in {ready * 1e3:7.1f} ms: H(1000) = {harmonic(1000)!r}")


def main() -> None:
    if os.environ.get("PYMLIRJIT_CACHE_DIR"):  # a run started below
        run_once()
        return
    expected = 0.0
    for i in range(1000):  # the kernel's order of additions (sum() compensates on 3.12+)
        expected += 1.0 / (1 + i)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYMLIRJIT_CACHE_DIR": cache}
        for run in range(3):  # the first compiles and stores; the others load
            done = subprocess.run([sys.executable, __file__], env=env, check=True,
                                  capture_output=True, text=True)
            print(f"process {run + 1}: {done.stdout.strip()}")
            assert float(done.stdout.split("=")[-1]) == expected
            assert sum(n.endswith(".entry") for n in os.listdir(cache)) == 1  # one entry
    print("OK")


if __name__ == "__main__":
    main()
