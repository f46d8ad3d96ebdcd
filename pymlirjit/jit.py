"""``@jit``: a plain Python function compiled to MLIR, as numba's ``@njit``.

>>> import numpy as np
>>> @jit
... def total(x):
...     s = 0.0
...     for v in x:
...         s += v
...     return s
>>> total(np.arange(5.0))
10.0
>>> total.signatures
[('memref<?xf64>',)]

Each combination of argument types (an array's dtype, rank and contiguity; a scalar's
Python or numpy type) compiles once into an ordinary :class:`~pymlirjit.kernel.Kernel`
over the generated MLIR text (:mod:`pymlirjit.frontend`), so sessions, caching, checked
mode, callbacks and pickling work as for ``@mlir_kernel``. See docs/jit.md.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex, overload

import numpy as np

from .boundary.pickling import StandInStub, function_by_value, importable, loads_parts
from .boundary.signature import annotations_of
from .boundary.vectorcall import NativeCallable, clear_entry, set_entry
from .callbacks import Callback, default_registry
from .errors import MLIRError
from .frontend.arguments import (
    constrained,
    converted,
    eager,
    jtype_of,
    key_of,
    signed,
    unsigned_result,
)
from .frontend.diagnostics import JitError, JitSyntaxError, JitTypeError
from .frontend.jtypes import (
    JType,
)
from .frontend.randoms import STATE_SYMBOL
from .kernel import Kernel
from .session import Session, default_session

if TYPE_CHECKING:
    from .frontend.program import Specialization

__all__ = ["JitFunction", "JitSyntaxError", "JitTypeError", "jit", "prange"]


def prange(*args: SupportsIndex) -> range:
    """``range`` that ``@jit(parallel=True)`` runs in parallel (numba's ``prange``);
    without ``parallel=True``, and in plain Python, it is ``range``.

    >>> @jit(parallel=True)
    ... def total(x):
    ...     s = 0.0
    ...     for i in prange(len(x)):
    ...         s += x[i]
    ...     return s
    >>> total(np.arange(100.0))
    4950.0
    """
    return range(*args)


class _Link(NativeCallable):
    """One more specialization in the chain of native entries: its entry hands each call
    it does not take (other argument types) to the next."""

    def __init__(self, after: Callable[..., Any]) -> None:
        self.after = after

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.after(*args, **kwargs)


class _HandOn:
    """What a specialization's native entry hands its Python calls to: the calls it does
    not take go on to ``after`` (the next entry, or dispatch); anything else the entry
    asks for (``read_results``, for results it reads in Python) is its own function's
    Python path's."""

    __slots__ = ("_after", "_python_call")

    def __init__(self, after: Callable[..., Any], python_call: Any) -> None:
        self._after = after
        self._python_call = python_call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._after(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._python_call, name)


class JitFunction(NativeCallable):
    """A ``@jit`` function: call it like the Python function. Attributes: ``py_func``
    (the Python function), :attr:`signatures`, :meth:`inspect_mlir`, :meth:`compile`.

    Calls go from one specialization's native entry to the next without Python (each
    takes exactly its argument types: arrays by dtype, rank and layout, scalars by exact
    type), and to :meth:`dispatch` for new types. Specializations with scalar parameters
    join the chain once the function has dispatched :attr:`native_after` calls in Python
    (their type-testing entries cost ~20 ms of code generation), or on :meth:`compile`.
    """

    native_after = 200
    __name__: str
    __qualname__: str

    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any]) -> None:
        self.py_func = py_func
        functools.update_wrapper(self, py_func)
        self._options = options
        self._kernels: dict[tuple[Any, ...], Kernel] = {}
        self._specs: dict[tuple[JType, ...], tuple[Kernel, Specialization]] = {}
        self._keys: dict[tuple[Any, ...], tuple[JType, ...]] = {}
        # Keys of calls passing or returning unsigned integers: (positions, result type).
        self._unsigned: dict[tuple[Any, ...], tuple[tuple[int, ...], JType]] = {}
        self._lock = threading.RLock()
        signature = inspect.signature(py_func)
        self._params = list(signature.parameters.values())
        self._names = [p.name for p in self._params]
        self._signature = signature
        self._hints: dict[str, Any] | None = None
        self._python_calls = 0
        self._native = False
        self._links: list[_Link] = []
        self._hand_ons: list[_HandOn] = []
        self._linked: list[Any] = []  # the compiled functions the chain enters
        self._exact: dict[int, tuple[Any, int, object]] = {}  # id(function) -> entry
        # Specializations linking callbacks, to generate again on their next call (the
        # cache was cleared or a callback redefined since: their globals may name new ones).
        self._stale: set[tuple[JType, ...]] = set()

    def dispatch(self, *args: Any, **kwargs: Any) -> Any:
        """Run the specialization of these arguments (compiled on first use)."""
        if kwargs or len(args) != len(self._names):
            args = self._bind(args, kwargs)
        key = tuple(map(key_of, args))
        kernel = self._kernels.get(key)
        if kernel is None or kernel._compiled is None:
            kernel = self._kernel_for(key, args)
            self._chain()
        elif not self._native:
            self._python_calls += 1
            if self._python_calls >= self.native_after:
                self._native = True
                self._chain()
        unsigned = self._unsigned.get(key)
        if unsigned is not None:  # the boundary's integers are signed: views both ways
            return unsigned_result(kernel(*signed(args, unsigned)), unsigned[1])
        return kernel(*args)

    __call__ = dispatch

    @property
    def session(self) -> Session:
        given: Session | None = self._options.get("session")
        return given if given is not None else default_session()

    def _chain(self) -> None:
        """Point the vectorcall slot at each specialization's native entry in turn."""
        session = self.session
        with session.lock:
            session.watch(self)
            session.callbacks.watch(self)
            default_registry().watch(self)
            self._unchain()
            natives: list[tuple[Any, int]] = []
            wanted: list[tuple[Any, Any]] = []
            order = sorted(self._kernels.items(), key=lambda item: not all(
                not isinstance(k, tuple) or k[2] for k in item[0]))  # contiguous first
            seen: set[int] = set()
            for key, kernel in order:
                if key in self._unsigned:
                    continue  # its arguments or result are converted in Python
                function = kernel._compiled
                if function is None or function.native_entry is None or id(kernel) in seen:
                    continue
                seen.add(id(kernel))
                if any(isinstance(k, type) and issubclass(k, np.ndarray) for k in key):
                    continue  # an ndarray subclass: the Python path takes it
                tests = tuple((i, (k,)) for i, k in enumerate(key) if isinstance(k, type))
                if not tests:
                    natives.append((function, function.native_entry))
                elif self._native:
                    if id(function) not in self._exact:
                        wanted.append((function, (((tests, ()),),)))
                    natives.append((function, -1))
            if wanted:
                from .boundary.callframe import call_machinery
                from .boundary.native import NativeBatch

                batch = NativeBatch()
                indices = [batch.add_kernel_entry(
                    f.abi, f._raw_address, call_machinery() if f._links_callbacks else None,
                    f.release_gil, f.unwind, exact=exact) for f, exact in wanted]
                addresses, code = batch.compile()
                for (function, _), index in zip(wanted, indices):
                    self._exact[id(function)] = (function, addresses[index], code)
            natives = [(f, a if a != -1 else self._exact[id(f)][1]) for f, a in natives]
            after: Any = self.dispatch
            hand_ons = []  # the entries borrow them: kept alive here
            links = []
            for function, entry in reversed(natives[1:]):
                link = _Link(after)
                hand_ons.append(_HandOn(after, function._python_call))
                set_entry(link, entry, hand_ons[-1], function._python_call.in_flight)
                links.append(link)
                after = link
            self._links = links
            self._linked = [f for f, _ in natives]
            if natives:
                first, entry = natives[0]
                hand_ons.append(_HandOn(after, first._python_call))
                set_entry(self, entry, hand_ons[-1], first._python_call.in_flight)
            # Kept for good: a call in flight may still hand back to an old chain's.
            self._hand_ons.extend(hand_ons)

    def _unchain(self) -> None:
        clear_entry(self)  # first: no call enters the chain from now on
        for link in self._links:
            clear_entry(link)
        # Functions a call may still run in stay alive (kept with their entries).
        self._retired = [f for f in [*getattr(self, "_retired", []), *self._linked]
                         if f.calls_in_flight]
        self._linked = []

    def invalidate(self) -> None:
        """Let go of the chain (the session's cache was cleared, or a callback
        redefined): calls go through :meth:`dispatch`, which compiles again."""
        with self.session.lock:
            self._unchain()
            self._stale = {p for p, (_, spec) in self._specs.items() if spec.callbacks}
            self._kernels = {}

    forget = invalidate

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"@jit {self.__name__!r}: {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[n] for n in self._names)

    def _annotations(self) -> dict[str, Any]:
        if self._hints is None:
            try:  # not typing.get_type_hints: Python 3.10's rejects MemRef[f64, None]
                hints = annotations_of(self.py_func)
            except Exception:
                hints = dict(getattr(self.py_func, "__annotations__", {}))
            self._hints = hints
        return self._hints

    def _kernel_for(self, key: tuple[Any, ...], args: tuple[Any, ...]) -> Kernel:
        params = self._keys.get(key)
        if params is None:
            hints = self._annotations()
            params = tuple(constrained(hints.get(n, inspect.Parameter.empty),
                                        jtype_of(k, v, n), n, self.__name__)
                           for n, k, v in zip(self._names, key, args))
        kernel = self._compile_types(params)
        kernel.compile()  # again, if invalidated since
        positions = tuple(i for i, p in enumerate(params) if converted(p))
        result = self._specs[params][1].result
        if positions or converted(result):
            self._unsigned[key] = (positions, result)
        self._keys[key] = params
        self._kernels[key] = kernel
        return kernel

    def _compile_types(self, params: tuple[JType, ...]) -> Kernel:
        with self._lock:  # one compilation per specialization, whatever the threads
            found = self._specs.get(params)
            if found is not None and params not in self._stale:
                return found[0]
            self._stale.discard(params)
            options = self._options
            from .frontend.program import specialize

            try:
                spec = specialize(self.py_func, params, parallel=bool(options.get("parallel")))
            except JitError as exc:  # the message says where: the frontend's frames are noise
                raise exc.with_traceback(None) from exc.__cause__
            callbacks = [c.existing if c.existing is not None else
                         _random_state() if c.name == STATE_SYMBOL else
                         Callback(c.function, c.signature, name=c.name)  # type: ignore[arg-type]
                         for c in spec.callbacks]
            stub = StandInStub(self.__name__, self.__qualname__, self.__module__, self.__doc__,
                               tuple(self._names))
            given = list(options.get("callbacks") or ())  # linked by name, as mlir_kernel's
            kernel = Kernel(stub, spec.text, spec.name, callbacks=[*given, *callbacks],
                            **{k: v for k, v in options.items()
                               if v is not None and k != "callbacks"})
            try:
                kernel.compile()
            except MLIRError as exc:
                raise MLIRError(f"@jit {self.__name__!r} for {params}: {exc.summary}",
                                exc.diagnostics) from exc
            self._specs[params] = (kernel, spec)
            return kernel

    def compile(self) -> Kernel:
        """Compile now for the types the parameters' annotations fix (``int``, ``float``,
        ``f32``, ``MemRef[f64, None]``...); TypeError if one is missing or open."""
        hints = self._annotations()
        params = []
        for name in self._names:
            t = eager(hints.get(name, inspect.Parameter.empty))
            if t is None:
                raise TypeError(f"@jit {self.__name__!r}: compile() needs an exact "
                                f"annotation on parameter {name!r} (int, float, f32, "
                                f"MemRef[f64, None]...)")
            params.append(t)
        kernel = self._compile_types(tuple(params))
        self._native = True
        self._chain()
        return kernel

    @property
    def annotated(self) -> bool:
        """Whether every parameter's annotation fixes its type, so that :meth:`compile`
        can compile without arguments."""
        hints = self._annotations()
        return all(eager(hints.get(name, inspect.Parameter.empty)) is not None
                   for name in self._names)

    @property
    def signatures(self) -> list[tuple[str, ...]]:
        """The compiled specializations' MLIR parameter types, in compile order."""
        return [_params_of(spec) for _, spec in self._specs.values()]

    def inspect_mlir(self, signature: Sequence[str] | None = None) -> str:
        """The generated MLIR of one specialization (the only or last one by default;
        ``signature``: one of :attr:`signatures`)."""
        return self._pick(signature)[1].text

    def inspect_llvm(self, signature: Sequence[str] | None = None) -> str:
        return self._pick(signature)[0].inspect_llvm()

    def inspect_asm(self, signature: Sequence[str] | None = None) -> str:
        return self._pick(signature)[0].inspect_asm()

    def kernel(self, signature: Sequence[str] | None = None) -> Kernel:
        """The :class:`~pymlirjit.kernel.Kernel` of one specialization."""
        return self._pick(signature)[0]

    def _pick(self, signature: Sequence[str] | None) -> tuple[Kernel, Specialization]:
        if not self._specs:
            raise TypeError(f"@jit {self.__name__!r} has no specialization yet: call it "
                            f"(or compile() it) first")
        if signature is None:
            return list(self._specs.values())[-1]
        for kernel, spec in self._specs.values():
            if _params_of(spec) == tuple(signature):
                return kernel, spec
        raise KeyError(f"@jit {self.__name__!r} has no specialization {tuple(signature)}; "
                       f"it has {self.signatures}")

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        """By reference when importable, else by value: the function (cloudpickle),
        its file's text (a receiver without the file still compiles it) and the options."""
        if importable(self):
            return self.__qualname__
        filename = self.py_func.__code__.co_filename
        blob = function_by_value(self.py_func, f"@jit {self.__name__!r}")
        return (_jit_by_value, (blob, filename, linecache.getlines(filename), self._options))

    def __getstate__(self) -> dict[str, Any]:
        return {"py_func": self.py_func, "options": self._options}

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<@jit {self.__qualname__} ({len(self._specs)} specializations)>"


def _random_state() -> Any:
    """The extern giving compiled code its thread's random state (native, built once)."""
    from .boundary.native.randomstate import random_state_address
    from .runtime.externs import extern

    return extern(STATE_SYMBOL, random_state_address(), "() -> !llvm.ptr")


def _params_of(spec: Specialization) -> tuple[str, ...]:
    from .frontend.calls import mlir_of
    return tuple(mlir_of(p) for p in spec.params)


def _jit_by_value(blob: bytes, filename: str, lines: list[str],
                  options: dict[str, Any]) -> JitFunction:
    if lines and linecache.getlines(filename) != lines:
        # The source as the sender had it, where inspect (the frontend) reads it.
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    function = loads_parts(blob)[-1]
    # By value, its code names no file: name the sender's again (the frontend reads the
    # source and locates errors and ops there).
    nameless = function.__code__.co_filename
    for value in [function, *function.__globals__.values()]:  # its helpers, from its file
        value = getattr(value, "py_func", value)
        code = getattr(value, "__code__", None)
        if inspect.isfunction(value) and code is not None and code.co_filename == nameless:
            value.__code__ = code.replace(co_filename=filename)
    return JitFunction(function, options)


@overload
def jit(function: Callable[..., Any], /) -> JitFunction: ...
@overload
def jit(function: None = None, *, parallel: bool | None = None,
        fastmath: bool | None = None, boundscheck: bool | None = None,
        cache: bool | None = None, session: Session | None = None,
        opt_level: int | None = None, error_model: str | None = None,
        pipeline: str | Sequence[str] | None = None,
        callbacks: Iterable[Any] | None = None, release_gil: bool | None = None,
        nopython: bool = True, nogil: bool = False,
        ) -> Callable[[Callable[..., Any]], JitFunction]: ...


def jit(function: Callable[..., Any] | None = None, *, parallel: bool | None = None,
        fastmath: bool | None = None, boundscheck: bool | None = None,
        cache: bool | None = None, session: Session | None = None,
        opt_level: int | None = None, error_model: str | None = None,
        pipeline: str | Sequence[str] | None = None,
        callbacks: Iterable[Any] | None = None, release_gil: bool | None = None,
        nopython: bool = True, nogil: bool = False) -> Any:
    """Compile a plain Python function to MLIR on its first call with each combination of
    argument types, as numba's ``@njit`` does; the options are ``@mlir_kernel``'s
    (``nopython``/``nogil`` are accepted for numba code and change nothing).

    >>> @jit(fastmath=True)
    ... def dot(a, b):
    ...     s = 0.0
    ...     for i in range(len(a)):
    ...         s += a[i] * b[i]
    ...     return s
    >>> dot(np.ones(3), np.arange(3.0))
    3.0
    """
    options = {"parallel": parallel, "fastmath": fastmath, "boundscheck": boundscheck,
               "cache": cache, "session": session, "opt_level": opt_level,
               "error_model": error_model, "pipeline": pipeline,
               "release_gil": release_gil,
               "callbacks": tuple(callbacks) if callbacks is not None else None}
    del nopython, nogil

    def decorate(f: Callable[..., Any]) -> JitFunction:
        if not inspect.isfunction(f):
            f = getattr(f, "py_func", f)  # a numba dispatcher: its Python function
        if not inspect.isfunction(f):
            raise TypeError(f"@jit decorates a Python function, got {type(f).__name__}")
        return JitFunction(f, options)

    return decorate(function) if function is not None else decorate
