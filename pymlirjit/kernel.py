"""``@mlir_kernel``: an MLIR function as a typed Python callable, compiled on first call.

>>> import numpy as np
>>> @mlir_kernel(source='''
... func.func @total(%a: memref<?xf64>) -> f64 {
...   %c0 = arith.constant 0 : index
...   %c1 = arith.constant 1 : index
...   %n = memref.dim %a, %c0 : memref<?xf64>
...   %zero = arith.constant 0.0 : f64
...   %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
...     %x = memref.load %a[%i] : memref<?xf64>
...     %t = arith.addf %acc, %x : f64
...     scf.yield %t : f64
...   }
...   return %s : f64
... }''')
... def total(a: np.ndarray) -> float: ...
>>> total(np.arange(5.0))
10.0
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, SupportsIndex

from .boundary.buildgate import building
from .boundary.cprototype import function_pointer
from .boundary.failures import register_parameters, register_source
from .boundary.pickling import StandInStub, rebuilds
from .boundary.signature import Signature
from .boundary.sourcelines import definition_site, located_mlir_error, read_mlir_file
from .boundary.vectorcall import NativeCallable, clear_entry, set_entry
from .callbacks import Invalidated, default_registry
from .codegen.options import CompileOptions, OptionOverrides
from .errors import MLIRError, SignatureError
from .generic import GenericDispatch, describe, free_aliases
from .kernelpickling import (
    copied_state,
    rebuilt_bound,
    rebuilt_generic,
    rebuilt_kernel,
    reduce_bound,
    reduce_generic,
    reduce_kernel,
)
from .kernelstub import check_stub
from .lowering.builtsource import built_text
from .runtime.externs import Dependents, Linkable, compile_targets, listed_callbacks
from .runtime.firstcall import FirstCall, first_call, running_first_call
from .runtime.function import CompiledFunction
from .runtime.gilpolicy import refuse_kept_gil
from .session import CompiledModule, Session, default_session, given_session

__all__ = ["BoundKernel", "GenericKernel", "Kernel", "mlir_kernel"]


class Kernel(NativeCallable):
    """A function of an MLIR module, compiled on first call (or :meth:`compile`).

    ``name`` is the MLIR symbol; ``signature`` the MLIR signature (with the stub's
    parameter names); ``engine`` the ExecutionEngine; ``mlir`` the source;
    ``lowered_mlir`` the module after lowering; ``__wrapped__`` the stub.
    """

    def __init__(self, stub: Callable[..., Any] | None, source: str | Path | Any, name: str,
                 pipeline: str | Sequence[str] | None = None, opt_level: int | None = None,
                 callbacks: Iterable[Linkable] | None = None,
                 shared_libs: Iterable[str] | None = None,
                 session: Session | None = None, release_gil: bool | None = None,
                 cache: bool | None = None, fastmath: bool | None = None,
                 parallel: bool | None = None, boundscheck: bool | None = None,
                 error_model: str | None = None) -> None:
        if not isinstance(source, (str, Path)) and not callable(source):
            source = built_text(source)  # a module built in Python: its text, once
        self.__wrapped__ = stub
        if stub is not None:
            self.__doc__ = stub.__doc__
            self.__qualname__ = getattr(stub, "__qualname__", name)
            self.__module__ = getattr(stub, "__module__", __name__)
        self.__name__ = name
        self.name = name
        self.source = source
        self._overrides = OptionOverrides.of(pipeline, opt_level, shared_libs,
                                             fastmath=fastmath, parallel=parallel,
                                             boundscheck=boundscheck, error_model=error_model)
        self._callbacks = listed_callbacks(callbacks or ())
        self._cache = cache
        self._session = given_session(session)
        self.release_gil = release_gil
        self._compiled: CompiledFunction | None = None
        # Functions compiled before, kept while calls through their entry may still run
        # (a callback may clear the cache, or another thread may, while the GIL is free).
        self._retired: list[CompiledFunction] = []
        self._module: CompiledModule | None = None
        # The session's options with this kernel's, made once (on first compile: the
        # default session and the libraries are resolved no earlier).
        self._options: CompileOptions | None = None
        # Where the stub is defined (no file read: read only to report an MLIR error).
        self._site = definition_site(stub)
        # The kernels linking this one (callbacks=): a Dependents made by the first watch().

    @property
    def session(self) -> Session:
        return self._session if self._session is not None else default_session()

    def compile(self) -> CompiledFunction:
        """Compile now (or fetch from the session's cache) and return the function."""
        function = self._compiled
        if function is not None:
            return function
        # Called again by a signal handler during this first call: no second compile.
        running = running_first_call(self, f"@mlir_kernel {self.name!r}")
        if running is not None:
            return running  # type: ignore[no-any-return]
        with first_call(self) as state:
            return self._compile(state)

    def _compile(self, state: FirstCall) -> CompiledFunction:
        session = self.session
        compile_targets(self, self._callbacks)  # first: outside this session's lock
        # Under the session's lock: compiling, clearing the cache and retiring functions
        # (invalidate) never interleave, so the vectorcall slot only ever points at the
        # entry of a function this kernel keeps.
        with building(), session.lock:  # a fork waits for the compile, then this lock
            if self._compiled is not None:  # another thread compiled it meanwhile
                return self._compiled
            # Subscribe before compiling: a callback redefined meanwhile (registries
            # notify without the session's lock) invalidates what this compile makes.
            session.watch(self)
            session.callbacks.watch(self)
            default_registry().watch(self)
            if self._options is None:
                self._options = session.options.overridden(self._overrides)
            source = self.source if isinstance(self.source, (str, Path)) else self.mlir
            try:
                module: CompiledModule = session.compile(
                    source, options=self._options, callbacks=self._callbacks,
                    cache=self._cache)
            except MLIRError as exc:  # on the user's line, naming the kernel
                raise located_mlir_error(exc, f"@mlir_kernel {self.name!r}",
                                         self.__dict__.get("_site"),
                                         self._located_text(source)) from None
            if isinstance(source, str) and self.__dict__.get("_site") is not None:
                # Failures then name its Python line.
                register_source(source, self._site, self._located_text(source))
            try:
                function = state.function = module[self.name]
            except KeyError as exc:
                raise SignatureError(f"@mlir_kernel {self.name!r}: {exc.args[0]}") from None
            stub = self.__wrapped__
            refuse_kept_gil(self.name, self.release_gil, module)  # threads calling Python
            if self.release_gil in (None, function.release_gil):
                function.ensure_native()  # shared by the copies below: built once
            if stub is not None:
                check_stub(stub, function.signature, self.name)
                names = list(inspect.signature(stub).parameters)
                if isinstance(source, str):  # shape checks' failures then name them
                    register_parameters(source, self.name, names)
                function = function.with_options(stub.__name__, names, self.release_gil)
            elif self.release_gil is not None:
                function = function.with_options(self.name,
                                                 [p.name for p in function.signature.params],
                                                 self.release_gil)
            native = function.ensure_native()
            self._purge()
            self._compiled = function
            self._module = module
            # Later calls go straight to the function's native entry, without this
            # class's __call__, until invalidate() points the kernel away from it.
            if native:
                assert function.native_entry is not None
                set_entry(self, function.native_entry, function._python_call,
                          function._python_call.in_flight)
            return function

    def invalidate(self) -> None:
        """Let go of the compiled function: the next call compiles (or hits the
        session's cache) again. Sessions and callback registries call this when the
        cache is cleared or a callback is (re)defined (see
        :class:`pymlirjit.callbacks.Invalidated`).

        The function's machine code lives on while calls still run in it: the kernel
        first stops calls from entering it, then keeps the function until its native
        entry counts no call in flight."""
        with self.session.lock:
            clear_entry(self)  # first: no call enters the old code from now on
            retired = self._compiled is not None
            if self._compiled is not None:
                self._retired.append(self._compiled)
                self._compiled = None
            self._purge()
        # Kernels linking this one (as an extern) relink too, if they may have linked
        # the function just retired (so a cycle of subscriptions ends); outside the lock
        # above when it is not held already (kernels of other sessions take theirs).
        dependents: Dependents | None = self.__dict__.get("_dependents")
        if retired and dependents is not None:
            dependents.invalidate()

    def watch(self, subscriber: Invalidated) -> None:
        """Call ``subscriber.invalidate()`` whenever this kernel lets go of its compiled
        function (kernels linking this one through ``callbacks=`` do; kept weakly)."""
        # setdefault: two threads watching first at once keep the same one.
        self.__dict__.setdefault("_dependents", Dependents()).add(subscriber)

    #: The same as :meth:`invalidate` (its name before the Invalidated protocol).
    forget = invalidate

    def _purge(self) -> None:
        """Drop the retired functions no call runs in any more (the session's lock held,
        and the GIL: calls count themselves in and out with the GIL held)."""
        self._retired = [f for f in self._retired if f.calls_in_flight]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compile()(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return copied_state(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        """Pickle by reference (module and qualified name) when importable, else by
        value: the MLIR text, the options, the session (its options and cache folder),
        the stub's names and the callbacks the kernel links (by reference, or by value
        through cloudpickle). Unpickled, it compiles on first call, from the disk cache
        when one is configured; unpickled twice in a process, it is one kernel."""
        return reduce_kernel(self)

    def __copy__(self) -> Kernel:
        # A copy (unlike an unpickled kernel) is a kernel of its own, compiling itself.
        copy: Kernel = object.__new__(type(self))
        copy.__dict__.update(self.__getstate__())
        copy.__dict__.pop("_pickle_token", None)
        return copy

    def __deepcopy__(self, memo: dict[int, Any]) -> Kernel:
        return self.__copy__()  # the source is text; sessions and callbacks are shared

    @property
    def signature(self) -> Signature:
        """The MLIR signature, with the stub's parameter names (compiles if needed)."""
        return self.compile().signature

    @property
    def engine(self) -> Any:
        """The ExecutionEngine that runs this kernel (compiles if needed)."""
        return self.compile().engine

    @property
    def address(self) -> int:
        """The C-ABI entry point called (compiles if needed)."""
        return self.compile().address

    @property
    def ctypes(self) -> Any:
        """A ctypes function pointer to :attr:`address` with the kernel's C-ABI
        prototype, for ``scipy.LowLevelCallable`` or numba ``@njit`` code (compiles if
        needed). It keeps the compiled code alive as long as it lives, even once the
        kernel recompiles or its session's cache is cleared (see docs/interop.md)."""
        function = self.compile()
        made = self.__dict__.get("_ctypes")
        if made is None or made[0] is not function:
            stub = self.__wrapped__
            made = self.__dict__["_ctypes"] = (function, function_pointer(
                function.address, function.signature, (function, function.module),
                None if isinstance(stub, StandInStub) else stub, f"@mlir_kernel {self.name!r}"))
        return made[1]

    @property
    def mlir(self) -> str:
        """The MLIR source as given (a callable's module: its text, built once)."""
        if isinstance(self.source, Path):
            return read_mlir_file(self.source)
        if isinstance(self.source, str):
            return self.source
        text = self.__dict__.get("_built_text")
        if text is None:
            text = self.__dict__["_built_text"] = built_text(self.source)
        return text

    @property
    def lowered_mlir(self) -> str:
        """The whole module after lowering to the LLVM dialect (compiles if needed)."""
        self.compile()
        assert self._module is not None
        return str(self._module.lowered_mlir)

    def inspect_llvm(self) -> str:
        """The module's LLVM IR after LLVM's optimizations at the kernel's opt level, as
        the JIT compiles it for this machine (compiles if needed). Every function of the
        module is there; this kernel's C-ABI entry is ``_mlir_ciface_<name>``."""
        from .runtime.llvmir import llvm_ir

        text = self.lowered_mlir
        assert self._options is not None  # set by the compile lowered_mlir ran
        return llvm_ir(text, self._options.opt_level)

    def inspect_asm(self) -> str:
        """The module's host assembly at the kernel's opt level, for this CPU (compiles
        if needed); see :meth:`inspect_llvm`."""
        from .runtime.llvmir import assembly

        text = self.lowered_mlir
        assert self._options is not None  # set by the compile lowered_mlir ran
        return assembly(text, self._options.opt_level)

    @property
    def signatures(self) -> list[dict[str, str]]:
        """The compiled bindings of the source's type aliases, as numba's dispatcher
        lists its signatures: one, and empty (no alias), once compiled; a generic
        kernel (:mod:`pymlirjit.generic`) lists one per binding."""
        return [{}] if self._compiled is not None else []

    def _located_text(self, source: str | Path) -> str | None:
        """The text as it sits in the Python file (``None``: not inline), which MLIR's
        line numbers in ``source`` refer to."""
        return source if isinstance(source, str) else None

    def specialize(self, **types: Any) -> Kernel:
        """This kernel bound to ``types``: itself, its source having no alias to bind
        (see :meth:`pymlirjit.generic.GenericKernel.specialize`)."""
        if types:
            raise TypeError(f"@mlir_kernel {self.name!r} is not generic: its source "
                            f"leaves no type alias ({', '.join(types)}) to bind")
        return self

    def __repr__(self) -> str:
        state = "compiled" if self._compiled is not None else "not compiled yet"
        return f"<mlir_kernel @{self.name} ({state})>"


class GenericKernel(GenericDispatch, Kernel):
    """An ``@mlir_kernel`` whose source uses type aliases it does not define (``!T``):
    generic over them, bound per call (see :mod:`pymlirjit.generic`)."""

    def _make_bound(self, stub: Any, text: str, binding: dict[str, str]) -> BoundKernel:
        t = self._template
        stand_in = None if stub is None else StandInStub(
            stub[0], self.__qualname__, self.__module__, self.__doc__, stub[1])
        kernel = BoundKernel(stand_in, text, self.name, callbacks=t._callbacks,
                             session=t._session, release_gil=t.release_gil, cache=t._cache,
                             **t._overrides.given())
        kernel.binding, kernel.generic = binding, self
        kernel._site = t.__dict__.get("_site")  # MLIR errors and failures name the Python line
        return kernel

    def __copy__(self) -> GenericKernel:
        return GenericKernel(self._template, self._text)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        """By reference when importable, else by value: its template, a kernel of the
        unbound source (pickled by value: the text, options and callbacks)."""
        return reduce_generic(self, self._template)


class BoundKernel(Kernel):
    """A generic kernel with every alias bound (``GenericKernel.specialize``): a kernel
    whose source starts with the alias definitions; ``binding``: alias -> MLIR type."""

    binding: dict[str, str]
    generic: GenericKernel

    def compile(self) -> CompiledFunction:
        """Compile now (or fetch from the cache); an MLIRError names the binding."""
        try:
            return super().compile()
        except MLIRError as exc:
            what = f"@mlir_kernel {self.name!r}"
            rest = exc.summary.removeprefix(what)  # " (file.py:5:8): ..." or ": ..."
            if rest == exc.summary:
                rest = ": " + rest
            raise MLIRError(f"{what} bound to {describe(self.binding)}{rest}",
                            exc.diagnostics) from exc

    def _located_text(self, source: str | Path) -> str | None:
        # The bound text is the user's, the binding put in front on its first line.
        return self.generic._text if isinstance(source, str) else None

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return reduce_bound(self.generic, self.binding)

    def __repr__(self) -> str:
        state = "compiled" if self._compiled is not None else "not compiled yet"
        return f"<mlir_kernel @{self.name} [{describe(self.binding)}] ({state})>"


def _generic_or_kernel(template: Kernel) -> Kernel:
    """``template``, or the generic kernel over it if its text leaves type aliases free
    (a file is read now if it can be; a module built in Python is never generic)."""
    source = template.source
    if isinstance(source, Path):
        try:
            text = read_mlir_file(source)
        except (OSError, ValueError):
            return template  # its compile reports it
    elif isinstance(source, str):
        text = source
    else:
        return template
    return GenericKernel(template, text) if free_aliases(text) else template


# How each kind of kernel pickled by value is made again (kernelpickling, with the class).
rebuilds("kernel")(functools.partial(rebuilt_kernel, Kernel))
rebuilds("generic")(functools.partial(rebuilt_generic, GenericKernel))
rebuilds("bound")(rebuilt_bound)


def mlir_kernel(*, source: str | Path | Any, name: str | None = None,
                pipeline: str | Sequence[str] | None = None, opt_level: int | None = None,
                callbacks: Iterable[Linkable] | None = None,
                shared_libs: Iterable[str] | None = None, session: Session | None = None,
                release_gil: bool | None = None, cache: bool | None = None,
                fastmath: bool | None = None, parallel: bool | None = None,
                boundscheck: bool | None = None,
                error_model: str | None = None) -> Callable[[Callable[..., Any]], Kernel]:
    """Turn the MLIR function named like the decorated stub (or ``name``) into a
    Python callable. The stub's body is unused; its annotations, where present, are
    checked against the MLIR signature. Compilation happens on first call.

    ``release_gil``: whether a call releases the GIL while compiled code runs. By
    default, modules using shared libraries (which may start threads) always release it;
    modules that call no Python callback release it when other Python threads exist;
    modules that call Python callbacks and use no shared libraries keep it (their
    callbacks would only take it back). Pass ``True`` or ``False`` to decide.

    ``cache=True`` keeps the machine code on disk (the session's ``cache_dir``, else
    :func:`pymlirjit.runtime.cache.default_cache_dir`), so that a new process skips compiling.

    Options named as numba's (``None``: the session's setting): ``fastmath=True`` puts
    fast-math flags on float ops, so that float reductions vectorize; ``parallel=True``
    runs ``scf.parallel``, ``scf.forall`` and linalg's parallel dimensions on several
    threads (``PYMLIRJIT_NUM_THREADS`` caps them; ``docs/threads.md``);
    ``boundscheck=True`` makes out-of-bounds memref accesses and invalid subviews raise
    ``IndexError`` naming the kernel and line; integer division by zero raises
    ``ZeroDivisionError``, or with ``error_model="numpy"`` gives 0 (``docs/checked-mode.md``).
    With the default pipeline, linalg ops get vectorized microkernels and schedules at
    the default ``opt_level`` (2) and at 3 (``opt_level=1`` or ``0``, or
    ``boundscheck=True``: plain loops); ``opt_level`` is also LLVM's level.
    """
    def decorate(stub: Callable[..., Any]) -> Kernel:
        if not callable(stub) and (stub is not None or not name):  # None: with name=
            raise TypeError(f"@mlir_kernel decorates a function, got {type(stub).__name__}")
        return _generic_or_kernel(Kernel(stub, source, name or stub.__name__, pipeline,
                                         opt_level, callbacks, shared_libs, session,
                                         release_gil, cache, fastmath, parallel,
                                         boundscheck, error_model))
    return decorate
