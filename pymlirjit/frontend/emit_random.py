"""Random draws in the emitter: xoshiro256** in MLIR on the calling thread's state.

A function that draws calls ``@pymlirjit_random_state()`` once, in its entry block (a
``prange`` body outlined as a function: once per call, on the thread running it), and
each draw loads the four state words it uses, steps them and stores them back:

- ``random()``: the top 53 bits of a step, times 2**-53, in [0, 1);
- ``uniform(a, b)``: ``a + (b - a) * random()`` (numpy's and Python's formula);
- ``normal(mu, sigma)``/``gauss``: Box-Muller as Python's ``gauss`` computes it, without
  its cached second value;
- ``randint(lo, hi)``: Lemire's unbiased multiply-and-reject on [lo, hi) (Python's
  ``random.randint`` includes ``hi``); ValueError for an empty range;
- ``seed(n)``: the four words from splitmix64 of ``n``, as the native code seeds threads.
"""

from __future__ import annotations

import math

from .emit_base import EmitBase, Value
from .jtypes import F64, I64, WEAK_FLOAT, WEAK_INT, JType, NoneT
from .randoms import STATE_SYMBOL

__all__ = ["RandomMixin"]

_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


class RandomMixin(EmitBase):
    """``np.random.*`` and ``random.*`` draws."""

    def state_words(self, first: int) -> list[str]:
        """Pointers to the state words ``first`` .. ``first + 3`` (made in the entry)."""
        words: dict[int, str] | None = getattr(self, "_random_words", None)
        if words is None:
            words = {}
            self._random_words = words
            state = self.fresh()
            self.entry.append(f"    {state} = func.call @{STATE_SYMBOL}() : () -> !llvm.ptr")
            self._random_state = state
            self.program.use_random_state()
        if first not in words:
            for i in range(first, first + 4):
                words[i] = self.fresh()
                self.entry.append(f"    {words[i]} = llvm.getelementptr {self._random_state}"
                                  f"[{i}] : (!llvm.ptr) -> !llvm.ptr, i64")
        return [words[i] for i in range(first, first + 4)]

    def _i(self, name: str, x: str, y: str) -> str:
        return self.op(f"arith.{name} {x}, {y} : i64")

    def _k(self, n: int) -> str:
        return self.const(_signed(n), I64).ssa

    def _rotl(self, x: str, k: int) -> str:
        return self._i("ori", self._i("shli", x, self._k(k)), self._i("shrui", x, self._k(64 - k)))

    def next_u64(self, first: int) -> str:
        """One xoshiro256** step of the state at ``first``: its 64-bit output."""
        ptrs = self.state_words(first)
        s = [self.op(f"llvm.load {p} : !llvm.ptr -> i64") for p in ptrs]
        result = self._i("muli", self._rotl(self._i("muli", s[1], self._k(5)), 7), self._k(9))
        t = self._i("shli", s[1], self._k(17))
        s2 = self._i("xori", s[2], s[0])
        s3 = self._i("xori", s[3], s[1])
        s1 = self._i("xori", s[1], s2)
        s0 = self._i("xori", s[0], s3)
        s2 = self._i("xori", s2, t)
        s3 = self._rotl(s3, 45)
        for value, p in zip((s0, s1, s2, s3), ptrs):
            self.do(f"llvm.store {value}, {p} : i64, !llvm.ptr")
        return result

    def next_double(self, first: int) -> str:
        top = self._i("shrui", self.next_u64(first), self._k(11))
        as_float = self.op(f"arith.uitofp {top} : i64 to f64")
        return self.op(f"arith.mulf {as_float}, {self.const(2.0 ** -53, F64).ssa} : f64")

    def random_call(self, op: str, args: list[Value], t: JType) -> Value:
        module, what = op.split(".")
        first = 0 if module == "np" else 4
        floats = [self.convert(a, WEAK_FLOAT).ssa for a in args]
        if what == "random":
            return Value(self.next_double(first), t)
        if what == "uniform":
            low = floats[0] if floats else self.const(0.0, F64).ssa
            high = floats[1] if len(floats) > 1 else self.const(1.0, F64).ssa
            u = self.next_double(first)
            span = self.op(f"arith.subf {high}, {low} : f64")
            return Value(self.op(f"arith.addf {low}, {self.op(f'arith.mulf {span}, {u} : f64')}"
                                 f" : f64"), t)
        if what == "normal":
            mu = floats[0] if floats else self.const(0.0, F64).ssa
            sigma = floats[1] if len(floats) > 1 else self.const(1.0, F64).ssa
            angle = self.op(f"arith.mulf {self.next_double(first)}, "
                            f"{self.const(2 * math.pi, F64).ssa} : f64")
            rest = self.op(f"arith.subf {self.const(1.0, F64).ssa}, "
                           f"{self.next_double(first)} : f64")
            log = self.op(f"math.log {rest} : f64")
            twice = self.op(f"arith.mulf {log}, {self.const(-2.0, F64).ssa} : f64")
            radius = self.op(f"math.sqrt {twice} : f64")
            z = self.op(f"arith.mulf {self.op(f'math.cos {angle} : f64')}, {radius} : f64")
            return Value(self.op(f"arith.addf {mu}, "
                                 f"{self.op(f'arith.mulf {z}, {sigma} : f64')} : f64"), t)
        if what == "seed":
            self.seed(first, self.convert(args[0], I64).ssa)
            return Value("", NoneT())
        ints = [self.convert(a, WEAK_INT).ssa for a in args]
        if len(ints) == 1:
            ints = [self.const(0, I64).ssa, ints[0]]
        low, high = ints
        if module == "py":  # random.randint(a, b) includes b
            high = self._i("addi", high, self._k(1))
        return Value(self.randint(first, low, high, module), t)

    def randint(self, first: int, low: str, high: str, module: str) -> str:
        empty = self.op(f"arith.cmpi sle, {high}, {low} : i64")
        self.raise_python(ValueError, ("empty range for randrange()" if module == "py"
                                       else "low >= high",), when=empty)
        span = self._i("subi", high, low)  # as unsigned: up to 2**64 - 1
        loop, slow, done = self.label(), self.label(), self.label()
        self.goto(loop)
        self.start(loop)
        x = self.next_u64(first)
        product = self.fresh()
        self.lines.append(f"    {product}:2 = arith.mului_extended {x}, {span} : i64"
                          f"{self.source.loc(self.at)}")
        below = self.op(f"arith.cmpi ult, {product}#0, {span} : i64")
        self.do(f"cf.cond_br {below}, ^{slow}, ^{done}({product}#1 : i64)")
        self.start(slow)
        threshold = self._i("remui", self._i("subi", self._k(0), span), span)
        reject = self.op(f"arith.cmpi ult, {product}#0, {threshold} : i64")
        self.do(f"cf.cond_br {reject}, ^{loop}, ^{done}({product}#1 : i64)")
        offset = self.fresh()
        self.lines.append(f"  ^{done}({offset}: i64):")
        self.terminated = False
        return self._i("addi", low, offset)

    def seed(self, first: int, n: str) -> None:
        x = n
        for p in self.state_words(first):
            x = self._i("addi", x, self._k(_GOLDEN))
            z = self._i("muli", self._i("xori", x, self._i("shrui", x, self._k(30))),
                        self._k(_MIX[0]))
            z = self._i("muli", self._i("xori", z, self._i("shrui", z, self._k(27))),
                        self._k(_MIX[1]))
            z = self._i("xori", z, self._i("shrui", z, self._k(31)))
            self.do(f"llvm.store {z}, {p} : i64, !llvm.ptr")
