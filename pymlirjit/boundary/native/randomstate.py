"""The random number generators' state of ``@jit`` code: one per thread, in native code.

``pymlirjit_random_state()`` returns the calling thread's state, 10 x u64: words 0-3 are
the xoshiro256** state of ``np.random.*``, 4-7 that of ``random.*`` (as numba, the two
modules have separate generators), 8 the process generation it was seeded in. The
generated MLIR (:mod:`pymlirjit.frontend.emit_random`) calls it once per function and
runs the generator itself. A thread's first call allocates its state (freed by the
pthread key's destructor when the thread ends) and seeds it with splitmix64 from the
process's base seed (``os.urandom``, independent of numpy's global state) plus a thread
counter, so threads draw distinct streams. A forked child takes a new base seed and
generation: its threads reseed on their next call (fork-safe, as numba).

>>> address = random_state_address()
>>> address > 0
True
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from llvmlite import ir

from .. import ffi

__all__ = ["SYMBOL", "random_state_address", "seed_words", "splitmix64"]

#: The symbol generated code declares (``func.func private @... () -> !llvm.ptr``).
SYMBOL = "pymlirjit_random_state"
WORDS = 10
GENERATION = 8
_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1

# [base seed, thread counter, generation]: read and updated by the native code.
_globals = (ctypes.c_uint64 * 3)()
_lock = threading.Lock()
_built: list[Any] = []  # (address, code, key) once built


def splitmix64(x: int) -> tuple[int, int]:
    """One splitmix64 step: (the new state, the output)."""
    x = (x + _GOLDEN) & _MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return x, z ^ (z >> 31)


def seed_words(seed: int) -> list[int]:
    """The 4 xoshiro256** words ``seed(seed)`` sets (the generated code computes the same)."""
    x, out = seed & _MASK, []
    for _ in range(4):
        x, z = splitmix64(x)
        out.append(z)
    return out


def _reseed_after_fork() -> None:
    _globals[0] = int.from_bytes(os.urandom(8), "little")
    _globals[1] = 0
    _globals[2] = (_globals[2] + 1) & _MASK


def _splitmix_ir(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    i64 = ir.IntType(64)
    x = b.add(x, ir.Constant(i64, _GOLDEN))
    z = b.mul(b.xor(x, b.lshr(x, ir.Constant(i64, 30))), ir.Constant(i64, 0xBF58476D1CE4E5B9))
    z = b.mul(b.xor(z, b.lshr(z, ir.Constant(i64, 27))), ir.Constant(i64, 0x94D049BB133111EB))
    return x, b.xor(z, b.lshr(z, ir.Constant(i64, 31)))


def _build(key: int) -> ir.Module:
    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    module = ir.Module(name="pymlirjit_random")
    get = ir.Function(module, ir.FunctionType(i8p, [i32]), "pthread_getspecific")
    put = ir.Function(module, ir.FunctionType(i32, [i32, i8p]), "pthread_setspecific")
    alloc = ir.Function(module, ir.FunctionType(i8p, [i64, i64]), "aligned_alloc")
    function = ir.Function(module, ir.FunctionType(i8p, []), SYMBOL)
    entry, check, fresh, seed, done = (function.append_basic_block(n) for n in (
        "entry", "check", "fresh", "seed", "done"))
    b = ir.IRBuilder(entry)
    cells = b.inttoptr(ir.Constant(i64, ctypes.addressof(_globals)), i64.as_pointer())
    state = b.call(get, [ir.Constant(i32, key)])
    generation = b.load(b.gep(cells, [ir.Constant(i32, 2)]))
    b.cbranch(b.icmp_unsigned("==", state, ir.Constant(i8p, None)), fresh, check)
    b = ir.IRBuilder(check)
    words = b.bitcast(state, i64.as_pointer())
    mine = b.load(b.gep(words, [ir.Constant(i32, GENERATION)]))
    b.cbranch(b.icmp_unsigned("==", mine, generation), done, seed)
    b = ir.IRBuilder(fresh)
    # A cache line of its own (two of them): no false sharing between threads' states.
    made = b.call(alloc, [ir.Constant(i64, 64), ir.Constant(i64, 128)])
    b.call(put, [ir.Constant(i32, key), made])
    b.branch(seed)
    b = ir.IRBuilder(seed)
    target = b.phi(i8p)
    target.add_incoming(state, check)
    target.add_incoming(made, fresh)
    words = b.bitcast(target, i64.as_pointer())
    number = b.atomic_rmw("add", b.gep(cells, [ir.Constant(i32, 1)]), ir.Constant(i64, 1),
                          "monotonic")
    x = b.add(b.load(b.gep(cells, [ir.Constant(i32, 0)])),
              b.mul(number, ir.Constant(i64, 0xD1B54A32D192ED03)))
    for word in range(8):
        x, z = _splitmix_ir(b, x)
        b.store(z, b.gep(words, [ir.Constant(i32, word)]))
    b.store(generation, b.gep(words, [ir.Constant(i32, GENERATION)]))
    b.branch(done)
    b = ir.IRBuilder(done)
    result = b.phi(i8p)
    result.add_incoming(state, check)
    result.add_incoming(target, seed)
    b.ret(result)
    return module


def random_state_address() -> int:
    """The address of ``pymlirjit_random_state`` (built once per process)."""
    with _lock:
        if not _built:
            from .batch import _jit

            key = ctypes.c_uint()
            if ffi.pthread_key_create(ctypes.byref(key), ctypes.cast(ffi.free, ctypes.c_void_p)
                                      ) != 0:
                raise OSError("pthread_key_create failed")
            _globals[0] = int.from_bytes(os.urandom(8), "little")
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_reseed_after_fork)
            addresses, code = _jit().compile_all(_build(key.value), [SYMBOL])
            _built.extend([addresses[0], code, key])
        return int(_built[0])
