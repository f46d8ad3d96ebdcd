"""The Python path of a function with sparse tensor parameters or results.

Such a function is compiled behind a wrapper taking and returning flat buffers (see
:mod:`pymlirjit.boundary.sparse`); :class:`SparseCall` turns each scipy.sparse argument into
those buffers (:func:`~pymlirjit.boundary.sparsearrays.to_buffers`), calls the wrapper
through its own native entry (a ``CompiledFunction`` of the flat signature) and turns each
sparse result's buffers into a scipy.sparse array. It knows nothing of
``CompiledFunction``: it is given one (``inner``), so that the two modules import one way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..boundary.signature import Signature, argument_label
from ..boundary.sparse import flat_types
from ..boundary.sparsearrays import buffer_converter, from_buffers
from ..boundary.sparseformat import SparseTensorType

__all__ = ["SparseCall"]

_MISSING: Any = object()


class SparseCall:
    """Calls ``inner`` (the flat wrapper, a callable taking buffers, sizes and the other
    arguments unchanged) with a sparse function's arguments; ``in_flight`` is the
    counter of calls running in ``inner``'s code (a kernel keeps a function while it is
    not 0)."""

    def __init__(self, inner: Any, signature: Signature, display_name: str) -> None:
        self.inner = inner
        self.signature = signature
        self.display_name = display_name
        self.in_flight = inner._python_call.in_flight
        self.native_code: object = None
        self.positional: Any = None
        self.names = [p.name for p in signature.params]
        self.labels = [argument_label(i, p.name) for i, p in enumerate(signature.params)]
        self.converters = [self._converter(p.type, f"{display_name}() {label}",
                                           p.name if label != f"argument {i + 1}" else "x")
                           for i, (p, label) in enumerate(zip(signature.params, self.labels))]
        self.readers = [_reader(t) for t in signature.results]
        self.sparse_results = any(isinstance(t, SparseTensorType) for t in signature.results)
        self._plain = _straight_call(inner, self.converters)
        #: The whole call, as one function: the common case (positional, no sparse
        #: result) without this object's layers; the others through ``__call__``.
        self.fast: Callable[..., Any] = _fast_call(self, inner, self.converters)
        # How the wrapper's errors name each dense parameter, and how the function does.
        self._dense_labels: list[tuple[str, str]] = []
        flat_index = 0
        for p, label in zip(signature.params, self.labels):
            if not isinstance(p.type, SparseTensorType):
                self._dense_labels.append((argument_label(flat_index, p.name), label))
            flat_index += len(flat_types(p.type))

    @staticmethod
    def _converter(t: Any, what: str, name: str) -> Callable[[Any], list[Any]] | None:
        if isinstance(t, SparseTensorType):
            return buffer_converter(t, what, name)
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(self.converters):
            args = self._bind(args, kwargs)
        try:
            if not self.sparse_results:
                return self._plain(*args)
            flat: list[Any] = []
            for convert, value in zip(self.converters, args):
                if convert is None:
                    flat.append(value)
                else:
                    flat += convert(value)
            results = self.inner(*flat)
        except (TypeError, ValueError) as exc:
            raise self._renumbered(exc) from exc.__cause__
        return self._read(results, [a for a in flat if isinstance(a, np.ndarray)])

    def _renumbered(self, error: Exception) -> Exception:
        """``error`` naming a parameter as the wrapper counts it (after the buffers of
        the sparse ones) renamed as the function counts it."""
        message = str(error)
        for label, user_label in self._dense_labels:
            if message.startswith(f"{self.display_name}() {label}:"):
                message = message.replace(label, user_label, 1)
                renamed = type(error)(message)
                renamed.__traceback__ = error.__traceback__
                return renamed
        return error

    call_positional = __call__

    def _read(self, results: Any, inputs: list[np.ndarray]) -> Any:
        if not isinstance(results, tuple):
            results = (results,)
        values = []
        at = 0
        for read in self.readers:
            value, at = read(results, at, inputs)
            values.append(value)
        return values[0] if len(values) == 1 else tuple(values)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        arity = len(self.names)
        if len(args) > arity:
            raise TypeError(f"{self.display_name}() takes {arity} arguments, got {len(args)}")
        values = [*args, *(_MISSING,) * (arity - len(args))]
        for key, value in kwargs.items():
            if key not in self.names:
                raise TypeError(f"{self.display_name}() got an unexpected keyword argument "
                                f"{key!r}")
            i = self.names.index(key)
            if values[i] is not _MISSING:
                raise TypeError(f"{self.display_name}() got multiple values for "
                                f"{self.labels[i]}")
            values[i] = value
        missing = [label for label, value in zip(self.labels, values) if value is _MISSING]
        if missing:
            raise TypeError(f"{self.display_name}() missing {', '.join(missing)}")
        return tuple(values)


def _straight_call(inner: Any, converters: list[Callable[[Any], list[Any]] | None]
                   ) -> Callable[..., Any]:
    """``inner`` called with each argument converted, as one Python function written for
    these parameters (``def call(a0, a1): return inner(*c0(a0), a1)``): a loop over the
    parameters would cost about as much as the conversions themselves."""
    names = [f"a{i}" for i in range(len(converters))]
    passed = [f"*c{i}({n})" if c is not None else n
              for i, (n, c) in enumerate(zip(names, converters))]
    namespace: dict[str, Any] = {"inner": inner}
    namespace.update({f"c{i}": c for i, c in enumerate(converters) if c is not None})
    exec(f"def call({', '.join(names)}):\n    return inner({', '.join(passed)})\n",
         namespace)
    call: Callable[..., Any] = namespace["call"]
    return call


def _fast_call(call: SparseCall, inner: Any,
               converters: list[Callable[[Any], list[Any]] | None]) -> Callable[..., Any]:
    """``call`` (a :class:`SparseCall`) as one generated function whose common case,
    ``len(converters)`` positional arguments and no sparse result, converts and calls
    ``inner`` itself, renaming the parameters in errors as ``call`` does."""
    if call.sparse_results:
        return call
    names = [f"a{i}" for i in range(len(converters))]
    passed = [f"*c{i}({n})" if c is not None else n
              for i, (n, c) in enumerate(zip(names, converters))]
    unpack = f"    {', '.join(names)}, = args\n" if names else ""
    namespace: dict[str, Any] = {"inner": inner, "general": call,
                                 "renumbered": call._renumbered}
    namespace.update({f"c{i}": c for i, c in enumerate(converters) if c is not None})
    exec(f"def call(*args, **kwargs):\n"
         f"    if kwargs or len(args) != {len(names)}:\n"
         f"        return general(*args, **kwargs)\n"
         f"{unpack}"
         f"    try:\n"
         f"        return inner({', '.join(passed)})\n"
         f"    except (TypeError, ValueError) as exc:\n"
         f"        raise renumbered(exc) from exc.__cause__\n", namespace)
    fast: Callable[..., Any] = namespace["call"]
    return fast


Reader = Callable[[tuple[Any, ...], int, list[np.ndarray]], tuple[Any, int]]


def _reader(t: Any) -> Reader:
    """How result ``t`` is read from the flat results, from position ``at``."""
    if not isinstance(t, SparseTensorType):
        return lambda results, at, inputs: (results[at], at + 1)
    count = len(t.format.buffers)

    def read_sparse(results: tuple[Any, ...], at: int, inputs: list[np.ndarray]
                    ) -> tuple[Any, int]:
        buffers = list(results[at:at + count])
        shape = tuple(int(d) for d in results[at + count:at + count + t.rank])
        for i, buffer in enumerate(buffers):
            # A tensor is a value: buffers the kernel returned from an argument's own
            # (a function returning its parameter) are copied, not shared with it.
            if any(np.may_share_memory(buffer, a) for a in inputs):
                buffers[i] = buffer.copy()
        return from_buffers(t, buffers, shape), at + count + t.rank
    return read_sparse
