"""The kernels of case f, each written three ways with the same algorithm: MLIR for
pymlirjit (``scf`` loops, and linalg named ops where natural), a Python function that
numba ``@njit`` compiles (the same loops, in the same order), and numpy as a user would
write it. Loop orders are the cache-friendly ones a numba user would write (matmul
i-k-j, so the innermost loop walks rows of B and C)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MLIR", "NUMBA", "NUMPY", "symbol"]

# Every MLIR function below starts with these constants.
_HEAD = """
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index"""

#: (kernel, variant) -> MLIR source; the function is named like the kernel.
MLIR: dict[tuple[str, str], str] = {}

MLIR["saxpy", "scf"] = f"""
func.func @saxpy(%a: f32, %x: memref<?xf32>, %y: memref<?xf32>, %out: memref<?xf32>) {{{_HEAD}
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {{
    %xi = memref.load %x[%i] : memref<?xf32>
    %yi = memref.load %y[%i] : memref<?xf32>
    %p = arith.mulf %a, %xi : f32
    %s = arith.addf %p, %yi : f32
    memref.store %s, %out[%i] : memref<?xf32>
  }}
  return
}}
"""

MLIR["dot", "scf"] = f"""
func.func @dot(%x: memref<?xf64>, %y: memref<?xf64>) -> f64 {{{_HEAD}
  %zero = arith.constant 0.0 : f64
  %n = memref.dim %x, %c0 : memref<?xf64>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {{
    %xi = memref.load %x[%i] : memref<?xf64>
    %yi = memref.load %y[%i] : memref<?xf64>
    %p = arith.mulf %xi, %yi : f64
    %s = arith.addf %acc, %p : f64
    scf.yield %s : f64
  }}
  return %r : f64
}}
"""

MLIR["matmul", "scf"] = f"""
func.func @matmul(%A: memref<?x?xf32>, %B: memref<?x?xf32>, %C: memref<?x?xf32>) {{{_HEAD}
  %zero = arith.constant 0.0 : f32
  %m = memref.dim %A, %c0 : memref<?x?xf32>
  %k = memref.dim %A, %c1 : memref<?x?xf32>
  %n = memref.dim %B, %c1 : memref<?x?xf32>
  scf.for %i = %c0 to %m step %c1 {{
    scf.for %j = %c0 to %n step %c1 {{
      memref.store %zero, %C[%i, %j] : memref<?x?xf32>
    }}
    scf.for %p = %c0 to %k step %c1 {{
      %a = memref.load %A[%i, %p] : memref<?x?xf32>
      scf.for %j = %c0 to %n step %c1 {{
        %b = memref.load %B[%p, %j] : memref<?x?xf32>
        %c = memref.load %C[%i, %j] : memref<?x?xf32>
        %t = arith.mulf %a, %b : f32
        %s = arith.addf %c, %t : f32
        memref.store %s, %C[%i, %j] : memref<?x?xf32>
      }}
    }}
  }}
  return
}}
"""

MLIR["matmul", "linalg"] = """
func.func @matmul(%A: memref<?x?xf32>, %B: memref<?x?xf32>, %C: memref<?x?xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%C : memref<?x?xf32>)
  linalg.matmul ins(%A, %B : memref<?x?xf32>, memref<?x?xf32>)
                outs(%C : memref<?x?xf32>)
  return
}
"""

MLIR["batch_matmul", "scf"] = f"""
func.func @batch_matmul(%A: memref<?x?x?xf32>, %B: memref<?x?x?xf32>,
                        %C: memref<?x?x?xf32>) {{{_HEAD}
  %zero = arith.constant 0.0 : f32
  %nb = memref.dim %A, %c0 : memref<?x?x?xf32>
  %m = memref.dim %A, %c1 : memref<?x?x?xf32>
  %k = memref.dim %A, %c2 : memref<?x?x?xf32>
  %n = memref.dim %B, %c2 : memref<?x?x?xf32>
  scf.for %q = %c0 to %nb step %c1 {{
    scf.for %i = %c0 to %m step %c1 {{
      scf.for %j = %c0 to %n step %c1 {{
        memref.store %zero, %C[%q, %i, %j] : memref<?x?x?xf32>
      }}
      scf.for %p = %c0 to %k step %c1 {{
        %a = memref.load %A[%q, %i, %p] : memref<?x?x?xf32>
        scf.for %j = %c0 to %n step %c1 {{
          %b = memref.load %B[%q, %p, %j] : memref<?x?x?xf32>
          %c = memref.load %C[%q, %i, %j] : memref<?x?x?xf32>
          %t = arith.mulf %a, %b : f32
          %s = arith.addf %c, %t : f32
          memref.store %s, %C[%q, %i, %j] : memref<?x?x?xf32>
        }}
      }}
    }}
  }}
  return
}}
"""

MLIR["batch_matmul", "linalg"] = """
func.func @batch_matmul(%A: memref<?x?x?xf32>, %B: memref<?x?x?xf32>,
                        %C: memref<?x?x?xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%C : memref<?x?x?xf32>)
  linalg.batch_matmul ins(%A, %B : memref<?x?x?xf32>, memref<?x?x?xf32>)
                      outs(%C : memref<?x?x?xf32>)
  return
}
"""

# conv2d: NCHW input, FCHW filter, stride 1, no padding; out[n, f, y, x].
MLIR["conv2d", "scf"] = f"""
func.func @conv2d(%I: memref<?x?x?x?xf32>, %W: memref<?x?x?x?xf32>,
                  %O: memref<?x?x?x?xf32>) {{{_HEAD}
  %zero = arith.constant 0.0 : f32
  %nn = memref.dim %O, %c0 : memref<?x?x?x?xf32>
  %nf = memref.dim %O, %c1 : memref<?x?x?x?xf32>
  %oh = memref.dim %O, %c2 : memref<?x?x?x?xf32>
  %ow = memref.dim %O, %c3 : memref<?x?x?x?xf32>
  %nc = memref.dim %W, %c1 : memref<?x?x?x?xf32>
  %kh = memref.dim %W, %c2 : memref<?x?x?x?xf32>
  %kw = memref.dim %W, %c3 : memref<?x?x?x?xf32>
  scf.for %n = %c0 to %nn step %c1 {{
    scf.for %f = %c0 to %nf step %c1 {{
      scf.for %y = %c0 to %oh step %c1 {{
        scf.for %x = %c0 to %ow step %c1 {{
          memref.store %zero, %O[%n, %f, %y, %x] : memref<?x?x?x?xf32>
        }}
      }}
      scf.for %c = %c0 to %nc step %c1 {{
        scf.for %u = %c0 to %kh step %c1 {{
          scf.for %v = %c0 to %kw step %c1 {{
            %w = memref.load %W[%f, %c, %u, %v] : memref<?x?x?x?xf32>
            scf.for %y = %c0 to %oh step %c1 {{
              %iy = arith.addi %y, %u : index
              scf.for %x = %c0 to %ow step %c1 {{
                %ix = arith.addi %x, %v : index
                %i = memref.load %I[%n, %c, %iy, %ix] : memref<?x?x?x?xf32>
                %o = memref.load %O[%n, %f, %y, %x] : memref<?x?x?x?xf32>
                %t = arith.mulf %i, %w : f32
                %s = arith.addf %o, %t : f32
                memref.store %s, %O[%n, %f, %y, %x] : memref<?x?x?x?xf32>
              }}
            }}
          }}
        }}
      }}
    }}
  }}
  return
}}
"""

MLIR["conv2d", "linalg"] = """
func.func @conv2d(%I: memref<?x?x?x?xf32>, %W: memref<?x?x?x?xf32>,
                  %O: memref<?x?x?x?xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%O : memref<?x?x?x?xf32>)
  linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>,
                            strides = dense<1> : tensor<2xi64>}
    ins(%I, %W : memref<?x?x?x?xf32>, memref<?x?x?x?xf32>)
    outs(%O : memref<?x?x?x?xf32>)
  return
}
"""

# Row-wise softmax: max, then exp(x - max) and its sum, then divide.
MLIR["softmax", "scf"] = f"""
func.func @softmax(%x: memref<?x?xf64>, %out: memref<?x?xf64>) {{{_HEAD}
  %zero = arith.constant 0.0 : f64
  %ninf = arith.constant 0xFFF0000000000000 : f64
  %rows = memref.dim %x, %c0 : memref<?x?xf64>
  %cols = memref.dim %x, %c1 : memref<?x?xf64>
  scf.for %i = %c0 to %rows step %c1 {{
    %m = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %ninf) -> f64 {{
      %v = memref.load %x[%i, %j] : memref<?x?xf64>
      %gt = arith.cmpf ogt, %v, %acc : f64
      %next = arith.select %gt, %v, %acc : f64
      scf.yield %next : f64
    }}
    %s = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %zero) -> f64 {{
      %v = memref.load %x[%i, %j] : memref<?x?xf64>
      %d = arith.subf %v, %m : f64
      %e = math.exp %d : f64
      memref.store %e, %out[%i, %j] : memref<?x?xf64>
      %next = arith.addf %acc, %e : f64
      scf.yield %next : f64
    }}
    scf.for %j = %c0 to %cols step %c1 {{
      %e = memref.load %out[%i, %j] : memref<?x?xf64>
      %q = arith.divf %e, %s : f64
      memref.store %q, %out[%i, %j] : memref<?x?xf64>
    }}
  }}
  return
}}
"""

# Jacobi 5-point stencil on the interior; the border of `out` is left as it is.
MLIR["stencil", "scf"] = f"""
func.func @stencil(%u: memref<?x?xf64>, %out: memref<?x?xf64>) {{{_HEAD}
  %quarter = arith.constant 0.25 : f64
  %rows = memref.dim %u, %c0 : memref<?x?xf64>
  %cols = memref.dim %u, %c1 : memref<?x?xf64>
  %last_row = arith.subi %rows, %c1 : index
  %last_col = arith.subi %cols, %c1 : index
  scf.for %i = %c1 to %last_row step %c1 {{
    %im = arith.subi %i, %c1 : index
    %ip = arith.addi %i, %c1 : index
    scf.for %j = %c1 to %last_col step %c1 {{
      %jm = arith.subi %j, %c1 : index
      %jp = arith.addi %j, %c1 : index
      %n = memref.load %u[%im, %j] : memref<?x?xf64>
      %s = memref.load %u[%ip, %j] : memref<?x?xf64>
      %w = memref.load %u[%i, %jm] : memref<?x?xf64>
      %e = memref.load %u[%i, %jp] : memref<?x?xf64>
      %t0 = arith.addf %n, %s : f64
      %t1 = arith.addf %t0, %w : f64
      %t2 = arith.addf %t1, %e : f64
      %r = arith.mulf %t2, %quarter : f64
      memref.store %r, %out[%i, %j] : memref<?x?xf64>
    }}
  }}
  return
}}
"""

# Sum over axis 0 (column sums): the inner loop runs along rows, so it vectorizes
# without reassociating any sum.
MLIR["colsum", "scf"] = f"""
func.func @colsum(%x: memref<?x?xf64>, %out: memref<?xf64>) {{{_HEAD}
  %zero = arith.constant 0.0 : f64
  %rows = memref.dim %x, %c0 : memref<?x?xf64>
  %cols = memref.dim %x, %c1 : memref<?x?xf64>
  scf.for %j = %c0 to %cols step %c1 {{
    memref.store %zero, %out[%j] : memref<?xf64>
  }}
  scf.for %i = %c0 to %rows step %c1 {{
    scf.for %j = %c0 to %cols step %c1 {{
      %v = memref.load %x[%i, %j] : memref<?x?xf64>
      %o = memref.load %out[%j] : memref<?xf64>
      %s = arith.addf %o, %v : f64
      memref.store %s, %out[%j] : memref<?xf64>
    }}
  }}
  return
}}
"""

# The same sum as a linalg.generic reduction (the output zeroed by a linalg.fill): the
# default options lower it to the loops above, reduction dimension outermost.
MLIR["colsum", "linalg"] = """
func.func @colsum(%x: memref<?x?xf64>, %out: memref<?xf64>) {
  %zero = arith.constant 0.0 : f64
  linalg.fill ins(%zero : f64) outs(%out : memref<?xf64>)
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<?x?xf64>) outs(%out : memref<?xf64>) {
  ^bb0(%v: f64, %acc: f64):
    %s = arith.addf %acc, %v : f64
    linalg.yield %s : f64
  }
  return
}
"""


def symbol(kernel: str) -> str:
    """The MLIR function's name. Not ``exp``/``tanh``: a function named like the libm
    routine that ``math.exp`` lowers to is called *instead of* libm's (wrong values, or
    a crash from the recursion), so these are ``vexp`` and ``vtanh``."""
    return f"v{kernel}" if kernel in ("exp", "tanh") else kernel


for _name in ("exp", "tanh"):
    MLIR[_name, "scf"] = f"""
func.func @{symbol(_name)}(%x: memref<?xf64>, %out: memref<?xf64>) {{{_HEAD}
  %n = memref.dim %x, %c0 : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {{
    %v = memref.load %x[%i] : memref<?xf64>
    %r = math.{_name} %v : f64
    memref.store %r, %out[%i] : memref<?xf64>
  }}
  return
}}
"""

# exp as an elementwise linalg.generic.
MLIR["exp", "linalg"] = f"""
func.func @{symbol("exp")}(%x: memref<?xf64>, %out: memref<?xf64>) {{
  linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                  iterator_types = ["parallel"]}}
      ins(%x : memref<?xf64>) outs(%out : memref<?xf64>) {{
  ^bb0(%v: f64, %o: f64):
    %r = math.exp %v : f64
    linalg.yield %r : f64
  }}
  return
}}
"""

# The numba versions: the same loops as the scf variants (compiled with numba.njit).

def nb_saxpy(a: Any, x: Any, y: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = a * x[i] + y[i]


def nb_dot(x: Any, y: Any) -> float:
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i] * y[i]
    return acc


def nb_matmul(A: Any, B: Any, C: Any) -> None:
    m, k = A.shape
    n = B.shape[1]
    for i in range(m):
        for j in range(n):
            C[i, j] = 0.0
        for p in range(k):
            a = A[i, p]
            for j in range(n):
                C[i, j] += a * B[p, j]


def nb_batch_matmul(A: Any, B: Any, C: Any) -> None:
    nb, m, k = A.shape
    n = B.shape[2]
    for q in range(nb):
        for i in range(m):
            for j in range(n):
                C[q, i, j] = 0.0
            for p in range(k):
                a = A[q, i, p]
                for j in range(n):
                    C[q, i, j] += a * B[q, p, j]


def nb_conv2d(I: Any, W: Any, O: Any) -> None:  # noqa: E741 (the names of the MLIR)
    nn, nf, oh, ow = O.shape
    nc, kh, kw = W.shape[1], W.shape[2], W.shape[3]
    for n in range(nn):
        for f in range(nf):
            for y in range(oh):
                for x in range(ow):
                    O[n, f, y, x] = 0.0
            for c in range(nc):
                for u in range(kh):
                    for v in range(kw):
                        w = W[f, c, u, v]
                        for y in range(oh):
                            for x in range(ow):
                                O[n, f, y, x] += I[n, c, y + u, x + v] * w


def nb_softmax(x: Any, out: Any) -> None:
    rows, cols = x.shape
    for i in range(rows):
        m = -math.inf
        for j in range(cols):
            v = x[i, j]
            if v > m:
                m = v
        s = 0.0
        for j in range(cols):
            e = math.exp(x[i, j] - m)
            out[i, j] = e
            s += e
        for j in range(cols):
            out[i, j] = out[i, j] / s


def nb_stencil(u: Any, out: Any) -> None:
    rows, cols = u.shape
    for i in range(1, rows - 1):
        for j in range(1, cols - 1):
            out[i, j] = (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]) * 0.25


def nb_colsum(x: Any, out: Any) -> None:
    rows, cols = x.shape
    for j in range(cols):
        out[j] = 0.0
    for i in range(rows):
        for j in range(cols):
            out[j] += x[i, j]


def nb_exp(x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i])


def nb_tanh(x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = math.tanh(x[i])


#: kernel -> the Python function numba compiles.
NUMBA = {name[3:]: function for name, function in dict(globals()).items()
         if name.startswith("nb_")}


# numpy as a user would write it (single-threaded BLAS where BLAS is used: see __main__).

def np_saxpy(a: Any, x: Any, y: Any, out: Any) -> None:
    np.multiply(x, a, out=out)
    out += y


def np_dot(x: Any, y: Any) -> float:
    return float(np.dot(x, y))


def np_matmul(A: Any, B: Any, C: Any) -> None:
    np.matmul(A, B, out=C)


def np_conv2d(I: Any, W: Any, O: Any) -> None:  # noqa: E741
    kh, kw = W.shape[2], W.shape[3]
    windows = np.lib.stride_tricks.sliding_window_view(I, (kh, kw), axis=(2, 3))
    O[...] = np.einsum("ncyxuv,fcuv->nfyx", windows, W, optimize=True)


def np_softmax(x: Any, out: Any) -> None:
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


def np_stencil(u: Any, out: Any) -> None:
    out[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]) * 0.25


def np_colsum(x: Any, out: Any) -> None:
    np.sum(x, axis=0, out=out)


def np_exp(x: Any, out: Any) -> None:
    np.exp(x, out=out)


def np_tanh(x: Any, out: Any) -> None:
    np.tanh(x, out=out)


#: kernel -> numpy's version (batch_matmul uses np.matmul, which batches).
NUMPY = {name[3:]: function for name, function in dict(globals()).items()
         if name.startswith("np_")}
NUMPY["batch_matmul"] = np_matmul
