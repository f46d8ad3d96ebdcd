"""Kernels across processes: process pools (fork, spawn, forkserver), a Dask
LocalCluster and a Ray local cluster, each started and stopped by the test in a fresh
interpreter (bounded in time), giving the same results as in process.

The kernels below are importable (they pickle by reference); each script also defines
kernels in its ``__main__`` (they pickle by value, their callbacks through cloudpickle).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MemRef, callback, f64, mlir_kernel

ROOT = Path(__file__).resolve().parent.parent

BLOCK_SUM = """
func.func @block_sum(%a: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  %w = call @dist_weight(%s) : (f64) -> f64
  return %w : f64
}
func.func private @dist_weight(f64) -> f64
"""

# A tensor parameter takes read-only arrays (such as Ray's zero-copy ones) without a copy
# when they are contiguous; a memref parameter, which the kernel may write, refuses them.
TENSOR_SUM = """
func.func @tensor_sum(%a: tensor<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c0 : tensor<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = tensor.extract %a[%i] : tensor<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  %w = call @dist_weight(%s) : (f64) -> f64
  return %w : f64
}
func.func private @dist_weight(f64) -> f64
"""

TWICE = """
func.func @twice(%a: memref<?xf64>) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %out = memref.alloc(%n) : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = arith.addf %x, %x : f64
    memref.store %y, %out[%i] : memref<?xf64>
  }
  return %out : memref<?xf64>
}
"""


@callback
def dist_weight(x: f64) -> f64:
    """Twice the block's sum; a negative sum is refused (a callback that raises)."""
    if x < 0:
        raise ValueError(f"negative block sum {x}")
    return 2.0 * x


@mlir_kernel(source=BLOCK_SUM, cache=True)
def block_sum(a: MemRef[f64, None]) -> f64: ...


@mlir_kernel(source=TENSOR_SUM, cache=True)
def tensor_sum(a: np.ndarray) -> f64: ...


@mlir_kernel(source=TWICE, cache=True)
def twice(a: MemRef[f64, None]) -> MemRef[f64, None]: ...


# What every script defines in its __main__: kernels pickled by value.
MAIN = """
import sys
import numpy as np
from pymlirjit import MemRef, callback, f64, mlir_kernel
from tests.test_distributed import BLOCK_SUM, block_sum, tensor_sum, twice

@callback
def main_weight(x: f64) -> f64:
    return 3.0 * x

@mlir_kernel(source=BLOCK_SUM.replace("dist_weight", "main_weight"), name="block_sum",
             cache=True)
def main_sum(a: MemRef[f64, None]) -> f64: ...

BLOCKS = [np.arange(i, i + 100.0) for i in range(8)]
EXPECTED = ([2 * b.sum() for b in BLOCKS], [3 * b.sum() for b in BLOCKS])
"""


def run_script(tmp_path: Path, body: str, *args: str, timeout: float = 300,
               ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(MAIN + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PYMLIRJIT_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def test_the_kernels_run_in_process() -> None:
    block = np.arange(10.0)
    assert block_sum(block) == 90.0
    np.testing.assert_array_equal(twice(block), 2 * block)
    block.flags.writeable = False
    assert tensor_sum(block) == 90.0
    with pytest.raises(ValueError, match="negative block sum"):
        block_sum(-block - 1)


POOLS = """
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    doubled = [2 * b for b in BLOCKS]
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        assert list(pool.map(block_sum, BLOCKS)) == EXPECTED[0]
        assert list(pool.map(main_sum, BLOCKS)) == EXPECTED[1]
        for got, want in zip(pool.map(twice, BLOCKS), doubled):
            np.testing.assert_array_equal(got, want)
        error = pool.submit(block_sum, -BLOCKS[1]).exception()
        assert isinstance(error, ValueError) and "negative block sum" in str(error), error
    with context.Pool(2) as pool:
        assert pool.map(block_sum, BLOCKS) == EXPECTED[0]
        assert pool.map(main_sum, BLOCKS, chunksize=1) == EXPECTED[1]
        for got, want in zip(pool.map(twice, BLOCKS), doubled):
            np.testing.assert_array_equal(got, want)
    print("pools ok")
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_process_pools_run_kernels(tmp_path: Path, method: str) -> None:
    pytest.importorskip("cloudpickle", reason="kernels of __main__ pickle by value with it")
    done = run_script(tmp_path, POOLS, method)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pools ok" in done.stdout


DASK = """
import dask.array as da
from dask.distributed import Client, LocalCluster

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert client.submit(block_sum, BLOCKS[0]).result() == EXPECTED[0][0]
        assert client.gather(client.map(block_sum, BLOCKS)) == EXPECTED[0]
        assert client.gather(client.map(main_sum, BLOCKS)) == EXPECTED[1]
        x = da.arange(4000.0, chunks=1000)
        np.testing.assert_array_equal(x.map_blocks(twice, dtype=float).compute(),
                                      2 * np.arange(4000.0))
        np.testing.assert_array_equal(
            da.blockwise(twice, "i", x, "i", dtype=float).compute(), 2 * np.arange(4000.0))
        try:
            client.submit(block_sum, -BLOCKS[1]).result()
        except ValueError as exc:
            assert "negative block sum" in str(exc)
        else:
            raise AssertionError("the callback's ValueError did not reach the client")
    print("dask ok")
"""


def test_a_dask_local_cluster_runs_kernels(tmp_path: Path) -> None:
    pytest.importorskip("cloudpickle", reason="pip install 'pymlirjit[dask]'")
    pytest.importorskip("distributed", reason="pip install 'pymlirjit[dask]'")
    pytest.importorskip("dask.array", reason="pip install 'pymlirjit[dask]'")
    done = run_script(tmp_path, DASK)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dask ok" in done.stdout


RAY = """
import os
import ray

if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}})
    try:
        @ray.remote
        def task(block):  # Ray's arrays are read-only: memref kernels get copies
            return tensor_sum(block), main_sum(block.copy())

        @ray.remote
        class Summer:
            def __init__(self, scale):
                self.scale = scale

            def run(self, block):
                return self.scale * main_sum(block.copy()), twice(block.copy())

        big = np.arange(100000.0)
        ref = ray.put(big)  # read-only, zero-copy in the workers
        got = ray.get([task.remote(b) for b in BLOCKS])
        assert [g[0] for g in got] == EXPECTED[0] and [g[1] for g in got] == EXPECTED[1]
        assert ray.get(task.remote(ref)) == (2 * big.sum(), 3 * big.sum())
        summer = Summer.remote(0.5)
        total, doubled = ray.get(summer.run.remote(ref))
        assert total == 1.5 * big.sum()
        np.testing.assert_array_equal(doubled, 2 * big)
        try:
            ray.get(task.remote(-BLOCKS[1]))
        except ValueError as exc:  # Ray's error is also an instance of the task's
            assert "negative block sum" in str(exc)
        else:
            raise AssertionError("the callback's ValueError did not reach the driver")
    finally:
        ray.shutdown()
    print("ray ok")
"""


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (pip install 'pymlirjit[ray]')")
def test_a_ray_local_cluster_runs_kernels(tmp_path: Path) -> None:
    pytest.importorskip("cloudpickle", reason="pip install 'pymlirjit[ray]'")
    done = run_script(tmp_path, RAY)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray ok" in done.stdout


def test_the_benchmark_measures_the_pickle_round_trip_against_its_baselines() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--quick",
                           "--only", "pickling"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = {line[:46].strip(): line[46:].split() for line in done.stdout.splitlines()
            if line.startswith("  ") and " us " in line}
    labels = ["plain function of this module", "importable kernel (by reference)",
              "kernel made at run time (by value)", "... with a callback (cloudpickle)"]
    if importlib.util.find_spec("numba") is not None:
        labels += ["numba dispatcher of this module's function",
                   "numba dispatcher made at run time"]
    assert sorted(rows) == sorted(labels), done.stdout
    for label in labels:  # two timings (us) and the pickle's size, for every row
        took, first = float(rows[label][0]), float(rows[label][3])
        assert took > 0 and first > 0 and rows[label][-1] == "bytes)", done.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--only", "nope"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "unknown parts ['nope']" in bad.stderr


@pytest.fixture
def slow_opt_in(request: pytest.FixtureRequest) -> None:
    """Skip ``slow`` tests unless asked for: pyproject's addopts does not deselect them."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("slow variant: run with -m slow")


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
def test_the_benchmark_runs_every_chunked_way_to_the_same_sum_per_block_count() -> None:
    # Each way's sum is checked against one process's inside the benchmark (it raises
    # otherwise); ~15 s: a pool and a Dask cluster start, each worker compiles twice.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--quick",
                           "--only", "chunked", "--blocks", "2,8"], capture_output=True,
                          text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["N", "block"])
    ways = ["pool", "pool, by value"]
    if importlib.util.find_spec("distributed") is not None:
        ways += ["Dask", "Dask, by value"]
    assert [label.strip() for label in header.split("  ") if label.strip()][4:] == ways
    rows = [line.split() for line in lines if line.startswith("  ") and " ms " in line]
    # N, elements a block, ms a block, one process (ms), then a speedup per way.
    assert [row[:2] for row in rows] == [["2", str(10**6 // 2)], ["8", str(10**6 // 8)]]
    for row in rows:
        assert len(row) == 5 + len(ways) and all(cell.endswith("x") for cell in row[5:])


def test_the_benchmark_refuses_bad_block_counts() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for blocks, problem in [("4,x", "not a comma-separated list of integers"),
                            ("0,4", "block counts are at least 1")]:
        bad = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--only",
                              "chunked", "--blocks", blocks], capture_output=True, text=True,
                             timeout=120, env=env, cwd=ROOT)
        assert bad.returncode == 2 and problem in bad.stderr, bad.stderr


def test_the_benchmark_refuses_bad_element_counts() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for elements, problem in [("x", "invalid float value"), ("0", "at least 1")]:
        bad = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--only",
                              "chunked", "--elements", elements], capture_output=True,
                             text=True, timeout=120, env=env, cwd=ROOT)
        assert bad.returncode == 2 and problem in bad.stderr, bad.stderr
