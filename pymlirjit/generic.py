"""Generic kernels: one MLIR source for every element type it is called with.

A source that uses a type alias it does not define (``!T`` in ``memref<?x!T>`` and in
``arith.mulf %a, %b : !T``) is generic. Each call binds every such alias from the
arguments: an array's dtype binds the alias of its element type, a numpy scalar its own
type; a Python ``float`` binds a float alias to ``f64``, an ``int`` to ``i64`` (weakly:
an array or numpy scalar binding the same alias wins, and the Python value converts; a
scalar beside an array binding its alias binds nothing, and converts).
The binding is compiled once, as the source with ``!T = f32`` put in front of it (on
its first line: MLIR's line numbers stay the user's), and cached by that text in memory
and on disk like any other module.

For example (the README runs the same)::

    @mlir_kernel(source='''
    func.func @scale(%a: memref<?x!T>, %k: !T) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %a, %c0 : memref<?x!T>
      scf.for %i = %c0 to %n step %c1 {
        %x = memref.load %a[%i] : memref<?x!T>
        %y = arith.mulf %x, %k : !T
        memref.store %y, %a[%i] : memref<?x!T>
      }
      return
    }''')
    def scale(a: np.ndarray, k: float) -> None: ...
    a = np.ones(3, dtype=np.float32)
    scale(a, 2.0)          # binds !T = f32 (compiled once): a is now [2., 2., 2.]
    scale.signatures       # [{'T': 'f32'}]
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .boundary.aliases import Binder, ExactTypes, describe, free_aliases, header
from .boundary.identitycasts import identity_casts
from .boundary.typeparser import parsed_type
from .boundary.types import to_type
from .boundary.vectorcall import NativeCallable, clear_entry, set_entry
from .callbacks import default_registry
from .runtime.function import CompiledFunction

__all__ = ["GenericDispatch", "describe", "free_aliases"]

_header = header  # the name pymlirjit.ufunc imports it by


@functools.lru_cache(maxsize=256)
def _mlir_type_text(text: str) -> str:
    """``text`` as MLIR prints the type it spells (``"i32 "`` is ``"i32"``); TypeError when
    MLIR cannot parse it as one type. Checked when bound, not when the binding compiles: the
    binding is put in front of the source as ``!T = <text>``, where a comment or a second
    type would change the source."""
    with parsed_type(text, lambda reason: TypeError(f"not an MLIR type: {reason}")) as parsed:
        return str(parsed)


class _Link(NativeCallable):
    """One more compiled binding in a generic kernel's chain of native entries: the
    entry of one binding hands each call it does not take (another binding's) to the next."""

    def __init__(self, after: Callable[..., Any]) -> None:
        self.after = after

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.after(*args, **kwargs)


class GenericDispatch(NativeCallable):
    """What makes a kernel generic (:class:`pymlirjit.kernel.GenericKernel`): its source
    uses type aliases it does not define (:attr:`aliases`); each call binds them from its
    arguments and runs that binding, compiled once (:meth:`specialize`).
    :attr:`signatures` lists the compiled bindings.

    Calls go from one compiled binding's native entry to the next without Python:
    each takes exactly the calls :meth:`bind` gives its binding (by the dtypes of
    arrays, and the exact types of scalars binding an alias: see
    :meth:`pymlirjit.boundary.aliases.Binder.exact_types`) and hands the others on, finally to
    :meth:`dispatch`. The entries testing scalar types are generated once the kernel
    has dispatched :attr:`native_after` calls in Python, or by :meth:`compile`.
    """

    #: How many calls :meth:`dispatch` takes in Python before the kernel generates the
    #: native entries of bindings that scalars bind (which costs ~20 ms of code
    #: generation per batch, saving ~0.4 us per call: a process calling less does
    #: without). :meth:`compile` generates them at once.
    native_after = 10_000

    # Given by the kernel class this is mixed into.
    name: str
    __wrapped__: Any
    _retired: list[CompiledFunction]
    _compiled: CompiledFunction | None

    session: Any
    def _make_bound(self, stub: Any, text: str, binding: dict[str, str]) -> Any:
        """A kernel (:class:`pymlirjit.kernel.BoundKernel`) compiling ``text``."""
        raise NotImplementedError

    def __init__(self, template: Any, text: str) -> None:
        # The template's state (options, callbacks, stub, names): it is never compiled.
        self.__dict__.update(template.__getstate__())
        self.__dict__.pop("_pickle_token", None)
        self.__dict__.pop("_pickled_parts", None)
        self._template = template
        self._text = text
        stub = template.__wrapped__
        names = list(inspect.signature(stub).parameters) if stub is not None else None
        self._binder = binder = Binder(text, self.name, names)
        self.aliases, self._arrays = binder.aliases, binder.arrays
        self._chains = binder.problem is None
        self._native = False  # whether entries testing scalar types are chained
        self._python_calls = 0  # calls dispatched in Python so far (until _native)
        self._by_key: dict[Any, Any] = {}
        self._bound: dict[tuple[tuple[str, str], ...], Any] = {}
        self._linked: list[CompiledFunction] = []  # what the chain points into
        self._links: list[_Link] = []
        # Per binding: the argument types its entry tests (see Binder.exact_types).
        self._tests: dict[tuple[tuple[str, str], ...], ExactTypes | None] = {}
        # id(function) -> (function, address, code) of the entries that test them,
        # kept while the function is chained or retired.
        self._exact: dict[int, tuple[CompiledFunction, int, object]] = {}

    @property
    def signatures(self) -> list[dict[str, str]]:
        """The bindings compiled so far (alias -> MLIR type), in the order compiled."""
        return [dict(b) for b, k in self._bound.items() if k._compiled is not None]

    def specialize(self, **types: Any) -> Any:
        """The kernel bound to ``types`` (alias name -> a pymlirjit type, numpy type or
        MLIR type string), made once per binding; it compiles on first call or
        :meth:`Kernel.compile`."""
        binding = {}
        for alias in self.aliases:
            if alias not in types:
                raise TypeError(f"@mlir_kernel {self.name!r}: specialize() binds every alias "
                                f"({', '.join('!' + a for a in self.aliases)}); !{alias} "
                                f"is missing")
            value = types.pop(alias)
            try:
                binding[alias] = (_mlir_type_text(value) if isinstance(value, str)
                                  else to_type(value).mlir)
            except TypeError as exc:
                raise TypeError(f"@mlir_kernel {self.name!r}: specialize({alias}={value!r}): "
                                f"{exc}") from None
        if types:
            raise TypeError(f"@mlir_kernel {self.name!r} has no alias "
                            f"{', '.join('!' + a for a in types)} (its aliases: "
                            f"{', '.join('!' + a for a in self.aliases)})")
        key = tuple(binding.items())
        kernel = self._bound.get(key)
        if kernel is None:
            stub = self.__wrapped__
            stand_in = None if stub is None else (stub.__name__, tuple(
                inspect.signature(stub).parameters))
            # On the first line: the source's own line numbers stay as they are. Casts
            # between types the binding makes equal (extf of f64 to f64) are identities.
            text = (" ".join(f"!{a} = {v}" for a, v in binding.items()) + " "
                    + identity_casts(self._text, binding))
            kernel = self._make_bound(stand_in, text, binding)
            kernel = self._bound.setdefault(key, kernel)
        return kernel

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
        """The binding a call with these arguments runs (alias -> MLIR type)."""
        return self._binder.bind(args, kwargs)

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What the binding of a call depends on: the type of every positional
        argument, and the dtype of those binding an alias from an array (None, the
        call not being keyed, with keywords or too few arguments)."""
        if kwargs or (self._arrays and len(args) <= self._arrays[-1]):
            return None
        types = tuple(map(type, args))
        if not self._arrays:
            return types
        return types, tuple([getattr(args[i], "dtype", None) for i in self._arrays])

    def dispatch(self, *args: Any, **kwargs: Any) -> Any:
        """Run the binding of these arguments (compiled on first use)."""
        if not self._native:
            self._python_calls += 1
            if self._python_calls >= self.native_after:
                self._go_native()
        if not kwargs and not self._arrays:  # the hot path of scalar-bound aliases
            kernel = self._by_key.get(tuple(map(type, args)))
            if kernel is not None:
                return kernel(*args)
        return self._dispatch(args, kwargs)

    def _dispatch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = self._key(args, kwargs)
        kernel = self._by_key.get(key)
        if kernel is None:
            bound = self.bind(args, kwargs)
            binding = tuple((alias, bound[alias]) for alias in self.aliases)  # specialize's key
            made_now = binding not in self._bound
            kernel = self.specialize(**dict(binding))
            if kernel._compiled is None or (
                    self._chains and all(f is not kernel._compiled for f in self._linked)):
                try:
                    kernel.compile()
                except BaseException:
                    # A call's binding that does not compile (int arrays for arith.mulf)
                    # is not kept: compile(), .address and .ctypes would raise for it.
                    if made_now:
                        self._bound.pop(binding, None)
                    raise
                self._chain()
            if key is not None:
                self._by_key[key] = kernel
        return kernel(*args, **kwargs)

    __call__ = dispatch

    def _go_native(self) -> None:
        """From now on, chain the native entries that test scalar types too."""
        self._native = True
        if any(self._tests.values()):
            self._chain()

    def compile(self) -> CompiledFunction:
        """Compile every binding made so far (by calls or :meth:`specialize`) and return
        the function of the last one made; TypeError if none is made yet (a generic
        kernel has nothing to compile until its aliases are bound)."""
        if not self._bound:
            raise TypeError(f"@mlir_kernel {self.name!r} is generic over "
                            f"{', '.join('!' + a for a in self.aliases)}: nothing to "
                            f"compile until a call or specialize() binds them")
        functions: list[CompiledFunction] = [k.compile() for k in list(self._bound.values())]
        self._native = True  # compiled eagerly: dispatched natively at once
        self._chain()
        return functions[-1]

    def _last(self) -> Any:
        self.compile()
        return list(self._bound.values())[-1]

    @property
    def lowered_mlir(self) -> str:
        """The last binding's module after lowering (see :meth:`compile`)."""
        return str(self._last().lowered_mlir)

    def inspect_llvm(self) -> str:
        """The last binding's LLVM IR (see :meth:`compile`)."""
        return str(self._last().inspect_llvm())

    def inspect_asm(self) -> str:
        """The last binding's host assembly (see :meth:`compile`)."""
        return str(self._last().inspect_asm())


    def _entries(self) -> list[tuple[CompiledFunction, int]]:
        """Each compiled binding that calls may take natively, with the native entry
        taking exactly its calls (those testing argument types built now, in one
        batch: generated code for this process, whatever the cache)."""
        chosen: list[tuple[CompiledFunction, int | None]] = []
        wanted: list[tuple[CompiledFunction, ExactTypes]] = []
        for key, kernel in self._bound.items():
            function = kernel._compiled
            if function is None or function.native_entry is None:
                continue
            if key not in self._tests:
                self._tests[key] = self._binder.exact_types(dict(key))
            exact = self._tests[key]
            if exact is None:
                continue
            if exact and not self._native:
                continue  # Python dispatch, until the kernel proves hot (native_after)
            chosen.append((function, None if exact else function.native_entry))
            if exact and id(function) not in self._exact:
                wanted.append((function, exact))
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
        return [(f, a if a is not None else self._exact[id(f)][1]) for f, a in chosen]

    def _chain(self) -> None:
        """Point this kernel's vectorcall slot at the native entry of each compiled
        binding in turn, then at :meth:`dispatch`."""
        if not self._chains:
            return
        session = self.session
        with session.lock:
            session.watch(self)
            session.callbacks.watch(self)
            default_registry().watch(self)
            functions = [k._compiled for k in self._bound.values() if k._compiled is not None]
            self._clear()
            natives = self._entries()
            after: Any = self.dispatch
            self._dispatch_ref = after
            links = []
            for function, entry in reversed(natives[1:]):
                link = _Link(after)
                set_entry(link, entry, after, function._python_call.in_flight)
                links.append(link)
                after = link
            self._links = links
            self._linked = functions
            if natives:
                first, entry = natives[0]
                set_entry(self, entry, after, first._python_call.in_flight)

    def _clear(self, reuse: bool = True) -> None:
        """Take the chain apart; ``reuse``: keep the entries testing types of the
        bindings compiled (for the chain made next)."""
        clear_entry(self)  # first: no call enters the chain from now on
        self._by_key.clear()  # the next calls compile (and chain) again
        for link in self._links:
            clear_entry(link)
        self._retired.extend(self._linked)
        self._linked = []
        self._retired = [f for f in self._retired if f.calls_in_flight]
        # An entry testing types counts its calls in flight on its function's counter:
        # its code lives while that function is retired (or is to be chained again).
        keep = self._retired + [k._compiled for k in self._bound.values() if reuse]
        self._exact = {i: e for i, e in self._exact.items() if any(e[0] is f for f in keep)}

    def invalidate(self) -> None:
        """Let go of the chain of native entries (see :meth:`Kernel.invalidate`): the
        bound kernels compile again on their next call."""
        with self.session.lock:
            self._clear(reuse=False)

    forget = invalidate

    def __repr__(self) -> str:
        aliases = ", ".join("!" + a for a in self.aliases)
        return f"<generic mlir_kernel @{self.name} over {aliases} ({len(self.signatures)} " \
               f"compiled)>"
