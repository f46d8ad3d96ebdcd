"""A whole module for one specialization: the root function, the Python functions it
calls (each specialized for its argument types, compiled once per module as a private
``func.func``), and the callbacks it needs (declared, and described for
:mod:`pymlirjit.jit` to make).

>>> def add(a, b):
...     return a + b
>>> from pymlirjit.frontend.jtypes import WEAK_INT
>>> spec = specialize(add, (WEAK_INT, WEAK_INT))     # doctest: +SKIP
>>> "arith.addi" in spec.text                        # doctest: +SKIP
True
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .calls import mlir_of
from .defined import check_defined
from .diagnostics import JitError, JitTypeError, Where
from .infer import Inference
from .jtypes import JType, NoneT, Scalar, Tuple
from .randoms import STATE_SYMBOL
from .source import FunctionSource, function_source
from .syntax import check_subset

__all__ = ["CallbackSpec", "Program", "Specialization", "specialize"]


@dataclass(frozen=True)
class CallbackSpec:
    """A callback the module calls: ``function`` with MLIR ``signature`` as ``@name``
    (``existing``: a :class:`pymlirjit.Callback` given as such, used as is)."""

    name: str
    signature: str
    function: Callable[..., Any] | None = None
    existing: Any = None


@dataclass
class Specialization:
    """The MLIR ``text`` of one specialization, its root symbol ``name``, its ``params``
    and ``result`` types and the ``callbacks`` it links."""

    text: str
    name: str
    params: tuple[JType, ...]
    result: JType
    callbacks: list[CallbackSpec] = field(default_factory=list)


def _mangle(params: tuple[JType, ...]) -> str:
    text = "_".join(re.sub(r"\W+", "", repr(p)) for p in params)
    return text if len(text) < 40 else hashlib.sha1(text.encode()).hexdigest()[:12]


def _ascii(name: str) -> str:
    """``name`` as a bare MLIR symbol (ASCII letters, digits and underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]


def _signature(params: tuple[JType, ...], result: JType) -> str:
    args = ", ".join(mlir_of(p) for p in params)
    if isinstance(result, NoneT):
        return f"({args}) -> ()"
    if isinstance(result, Tuple):
        return f"({args}) -> ({mlir_of(result)})"
    return f"({args}) -> {mlir_of(result)}"


class Program:
    """The functions and callbacks of one module, filled as the root is compiled."""

    def __init__(self, parallel: bool = False) -> None:
        self.parallel = parallel
        self.texts: list[str] = []
        self.done: dict[tuple[Any, tuple[JType, ...]], tuple[str, JType]] = {}
        self.stack: list[Any] = []
        self.callbacks: dict[str, CallbackSpec] = {}
        self.symbols: set[str] = set()

    def compile_function(self, function: Callable[..., Any], params: tuple[JType, ...],
                         symbol: str, private: bool) -> tuple[str, JType]:
        source = function_source(function)
        check_subset(source)
        if len(source.tree.args.args) != len(params):
            raise JitTypeError(f"{source.name}() takes {len(source.tree.args.args)} "
                               f"arguments, {len(params)} given", source.where(source.tree))
        self.stack.append(function)
        try:
            return self.compile_source(source, params, symbol, private,
                                       (function, params))
        finally:
            self.stack.pop()

    def compile_source(self, source: FunctionSource, params: tuple[JType, ...], symbol: str,
                       private: bool, key: Any = None) -> tuple[str, JType]:
        """Compile ``source`` (a function, or a prange body outlined as one)."""
        from .emit import Emitter
        check_defined(source)
        try:
            info = Inference(self, source, params)
            info.run()
            if key is not None:
                self.done[key] = (symbol, info.result)
            text = Emitter(self, source, info, symbol, params, private).function()
        except JitError:
            raise
        except Exception as exc:  # a bug of the frontend: say where, keep the cause
            raise JitTypeError(f"internal error of the @jit frontend: {type(exc).__name__}: "
                               f"{exc} (please report it)", source.where(source.tree)) from exc
        self.texts.append(text)
        return symbol, info.result

    def callee(self, function: Callable[..., Any], params: tuple[JType, ...],
               where: Where | None) -> tuple[str, JType]:
        """The symbol and result type of ``function`` called with ``params``."""
        found = self.done.get((function, params))
        if found is not None:
            return found
        if function in self.stack:
            error = JitTypeError(f"recursion ({function.__name__} calls itself) is not "
                                 f"supported", where, "write the recursion as a loop")
            error.recursion = True  # type: ignore[attr-defined]
            raise error
        symbol = self.fresh_symbol(f"{_ascii(function.__name__)}__{_mangle(params)}")
        return self.compile_function(function, params, symbol, True)

    def declare(self, name: str, signature: str) -> None:
        """Declare the C function ``name`` (``signature``: MLIR's ``(args) -> result``),
        found in the process when the module links (``madvise``), once."""
        if name not in self.symbols:
            self.symbols.add(name)
            self.texts.append(f"  func.func private @{name}{signature}")

    def fresh_symbol(self, base: str) -> str:
        symbol = base
        while symbol in self.symbols:
            symbol += "_"
        self.symbols.add(symbol)
        return symbol

    def use_random_state(self) -> None:
        """Declare the native function giving the thread's random state (linked by
        :mod:`pymlirjit.jit`, see :mod:`.randoms`)."""
        self.callbacks[STATE_SYMBOL] = CallbackSpec(STATE_SYMBOL, "() -> !llvm.ptr")

    def use_callback(self, cb: Any) -> None:
        self.callbacks[cb.name] = CallbackSpec(cb.name, cb.signature.mlir, existing=cb)

    def auto_callback(self, function: Any, params: tuple[JType, ...], result: JType) -> str:
        signature = _signature(params, result)
        base = re.sub(r"\W+", "_", getattr(function, "__qualname__", "callable"))[-40:]
        name = f"__jit_cb_{base}_{_digest(getattr(function, '__module__', ''), base, signature)}"
        self.callbacks[name] = CallbackSpec(name, signature, function)
        return name

    def print_callback(self, parts: tuple[str | None, ...], types: tuple[JType, ...],
                       options: dict[str | None, Any]) -> str:
        params = tuple(t.strong if isinstance(t, Scalar) else t for t in types)
        signature = _signature(params, NoneT())
        name = f"__jit_print_{_digest(parts, signature, sorted(options.items(), key=str))}"
        casts = [None if isinstance(t, Scalar) and t.weak else
                 (t.dtype.type if isinstance(t, Scalar) else None) for t in types]
        sep, end = options.get("sep", " "), options.get("end", "\n")

        def printer(*values: Any) -> None:
            it = iter(zip(values, casts))
            out = []
            for part in parts:
                if part is not None:
                    out.append(part)
                else:
                    value, cast = next(it)
                    out.append(cast(value) if cast is not None else value)
            print(*out, sep=sep, end=end)

        self.callbacks[name] = CallbackSpec(name, signature, printer)
        return name

    def raise_callback(self, cls: type, args: tuple[object, ...], where: str) -> str:
        digest = _digest(cls.__module__, cls.__qualname__, args, where)
        name = f"__jit_raise_{cls.__name__}_{digest}"

        def raiser() -> None:
            error = cls(*args)
            if hasattr(error, "add_note"):
                error.add_note(f"raised at {where}")
            else:  # Python 3.10 (no PEP 678): the same list, as boundary/callframe.py does
                error.__notes__ = [f"raised at {where}"]
            raise error

        self.callbacks[name] = CallbackSpec(name, "() -> ()", raiser)
        return name

    def module(self) -> str:
        decls = [f"  func.func private @{c.name}{c.signature[:c.signature.index(')') + 1]}"
                 f"{_results(c.signature)}{_STATE_ATTRIBUTES if c.name == STATE_SYMBOL else ''}"
                 for c in self.callbacks.values()]
        return "module {\n" + "\n".join([*self.texts, *decls]) + "\n}\n"


#: The random state function returns the same pointer at every call in a thread, and
#: what it writes (a new thread's state) nothing has read yet: to LLVM it reads and
#: writes no memory, so a loop calling it (a prange body inlined into its chunk) calls
#: it once, before the loop.
_STATE_ATTRIBUTES = (" attributes {memory_effects = #llvm.memory_effects<other = none, "
                     "argMem = none, inaccessibleMem = none, errnoMem = none, targetMem0 = "
                     "none, targetMem1 = none>, passthrough = [\"nounwind\", \"willreturn\"]}")


def _results(signature: str) -> str:
    results = signature.split("->", 1)[1].strip()
    return "" if results == "()" else f" -> {results}"


def specialize(function: Callable[..., Any], params: tuple[JType, ...], *,
               parallel: bool = False) -> Specialization:
    """Compile ``function`` for arguments of types ``params`` into MLIR text."""
    program = Program(parallel)
    name = _ascii(function.__name__)
    program.symbols.add(name)
    _, result = program.compile_function(function, params, name, False)
    # The root first: its text was appended last (callees complete before it).
    root = program.texts.pop()
    program.texts.insert(0, root)
    return Specialization(program.module(), name, params, result,
                          list(program.callbacks.values()))

