"""Whether writing one array element by element could change another before it is read:
``out[:] = a * x + b`` and ``a += b`` write straight into their target unless an
operand shares memory with it, as numpy checks before its ufuncs write.

Two arrays are safe together when their byte ranges are disjoint (or either is empty),
or when they are the same elements in the same order (same first element, shape and
strides: ``x[:] = x * 2`` reads each element just before writing it). Anything else
(``a[1:] = a[:-1] + 1``) needs a copy first."""

from __future__ import annotations

from .emit_base import EmitBase, Value
from .jtypes import BOOL, Array

__all__ = ["unsafe_overlap"]


def _layout(e: EmitBase, v: Value) -> tuple[str, list[str], list[str]]:
    """The address of ``v``'s element [0, ..., 0], its sizes and strides (elements)."""
    t = v.type
    assert isinstance(t, Array)
    k = t.ndim
    meta = e.fresh()
    types = ", ".join([f"memref<{t.element_mlir}>"] + ["index"] * (1 + 2 * k))
    e.lines.append(f"    {meta}:{2 + 2 * k} = memref.extract_strided_metadata {v.ssa} : "
                   f"{t.mlir} -> {types}{e.source.loc(e.at)}")
    aligned = e.op(f"memref.extract_aligned_pointer_as_index {v.ssa} : {t.mlir} -> index")
    size = e.index_const(t.dtype.dtype.itemsize)
    offset = e.op(f"arith.muli {meta}#1, {size} : index")
    first = e.op(f"arith.addi {aligned}, {offset} : index")
    return first, [f"{meta}#{2 + d}" for d in range(k)], [f"{meta}#{2 + k + d}"
                                                          for d in range(k)]


def _span(e: EmitBase, v: Value, first: str, sizes: list[str],
          strides: list[str]) -> tuple[str, str, str]:
    """The first and one-past-last byte ``v`` may touch, and whether it is empty (i1)."""
    t = v.type
    assert isinstance(t, Array)
    zero, one = e.index_const(0), e.index_const(1)
    low, high, empty = zero, zero, e.const(False, BOOL).ssa
    for size, stride in zip(sizes, strides):
        last = e.op(f"arith.muli {e.op(f'arith.subi {size}, {one} : index')}, {stride} : "
                    "index")
        low = e.op(f"arith.addi {low}, {e.op(f'arith.minsi {last}, {zero} : index')} : index")
        high = e.op(f"arith.addi {high}, {e.op(f'arith.maxsi {last}, {zero} : index')} : "
                    "index")
        none = e.op(f"arith.cmpi eq, {size}, {zero} : index")
        empty = e.op(f"arith.ori {empty}, {none} : i1")
    itemsize = e.index_const(t.dtype.dtype.itemsize)
    start = e.op(f"arith.addi {first}, {e.op(f'arith.muli {low}, {itemsize} : index')} : "
                 "index")
    stop = e.op(f"arith.addi {first}, {e.op(f'arith.muli {high}, {itemsize} : index')} : "
                "index")
    return start, e.op(f"arith.addi {stop}, {itemsize} : index"), empty


def unsafe_overlap(e: EmitBase, target: Value, operand: Value) -> str:
    """An i1: whether writing ``target`` element by element may change elements of
    ``operand`` not read yet (so ``operand`` must be copied first)."""
    assert isinstance(target.type, Array) and isinstance(operand.type, Array)
    a_first, a_sizes, a_strides = _layout(e, target)
    b_first, b_sizes, b_strides = _layout(e, operand)
    a_start, a_stop, a_empty = _span(e, target, a_first, a_sizes, a_strides)
    b_start, b_stop, b_empty = _span(e, operand, b_first, b_sizes, b_strides)
    before = e.op(f"arith.cmpi ult, {a_start}, {b_stop} : index")
    after = e.op(f"arith.cmpi ult, {b_start}, {a_stop} : index")
    either_empty = e.op(f"arith.ori {a_empty}, {b_empty} : i1")
    overlap = e.op(f"arith.andi {before}, {after} : i1")
    true = e.const(True, BOOL).ssa
    overlap = e.op(f"arith.andi {overlap}, "
                   f"{e.op(f'arith.xori {either_empty}, {true} : i1')} : i1")
    if target.type.ndim != operand.type.ndim or \
            target.type.dtype.dtype.itemsize != operand.type.dtype.dtype.itemsize:
        return overlap
    same = e.op(f"arith.cmpi eq, {a_first}, {b_first} : index")
    for x, y in (*zip(a_sizes, b_sizes), *zip(a_strides, b_strides)):
        same = e.op(f"arith.andi {same}, {e.op(f'arith.cmpi eq, {x}, {y} : index')} : i1")
    return e.op(f"arith.andi {overlap}, {e.op(f'arith.xori {same}, {true} : i1')} : i1")
