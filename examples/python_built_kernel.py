"""Kernels built with MLIR's own Python bindings instead of MLIR text.

``source=`` takes an ``mlir.ir.Module``, an operation such as a ``func.FuncOp``, or (as
here) a function of no arguments returning one. pymlirjit calls it once, inside a fresh
MLIR context of its own (so the builder needs no ``with Context()``), and compiles the
module's text: the text is also what the in-memory and disk caches key on.

Two kernels: ``softplus``, one scalar function written with ``func.FuncOp.from_py_func``
and the ``arith``/``math`` dialects, and ``matmul_into``, ``C += A @ B`` on memrefs with
the ``linalg`` dialect's named op (numpy arrays in, zero-copy, written in place).

Run: ``python examples/python_built_kernel.py``
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, func, linalg
from mlir.dialects import math as mlir_math

from pymlirjit import f64, mlir_kernel


def build_softplus() -> ir.Module:
    """softplus(x) = log(1 + exp(x)), as a func.func built op by op."""
    module = ir.Module.create()
    t = ir.F64Type.get()
    with ir.InsertionPoint(module.body):
        @func.FuncOp.from_py_func(t, name="softplus")
        def softplus(x: Any) -> Any:
            one = arith.constant(t, 1.0)
            return mlir_math.log(arith.addf(one, mlir_math.exp(x)))
    return module


def build_matmul() -> ir.Module:
    """C += A @ B on dynamically sized f32 memrefs (linalg.matmul accumulates into C)."""
    module = ir.Module.create()
    dynamic = ir.ShapedType.get_dynamic_size()
    matrix = ir.MemRefType.get([dynamic, dynamic], ir.F32Type.get())
    with ir.InsertionPoint(module.body):
        @func.FuncOp.from_py_func(matrix, matrix, matrix, name="matmul_into")
        def matmul_into(a: Any, b: Any, c: Any) -> None:
            linalg.matmul(a, b, outs=[c])
    return module


@mlir_kernel(source=build_softplus)
def softplus(x: f64) -> f64: ...


@mlir_kernel(source=build_matmul)
def matmul_into(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...


def main() -> None:
    for x in (-3.0, 0.0, 2.5):
        assert math.isclose(softplus(x), math.log1p(math.exp(x)), rel_tol=1e-12)
    print(softplus.mlir)  # the text pymlirjit compiled

    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7), dtype=np.float32)
    b = rng.standard_normal((7, 3), dtype=np.float32)
    c = np.ones((5, 3), dtype=np.float32)
    matmul_into(a, b, c)
    np.testing.assert_allclose(c, 1 + a @ b, rtol=1e-5, atol=1e-5)
    print("softplus(2.5) =", softplus(2.5))
    print("OK")


if __name__ == "__main__":
    main()
