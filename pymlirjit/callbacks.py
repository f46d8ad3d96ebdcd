"""``@callback``: a type-annotated Python function that compiled MLIR code can call.

The decorator makes a :class:`Callback` (see :mod:`pymlirjit.boundary.callback` for how
compiled code reaches it) and registers it by name, in a session's registry or in the
default one every session sees; kernels link their ``func.func private`` declarations to
callbacks of the same name.

>>> from pymlirjit import f32, i32
>>> @callback(registry=CallbackRegistry())
... def scale(x: f32, k: i32) -> f32:
...     return x / 2 + k / 2
>>> scale.signature
Signature('(f32, i32) -> f32')
>>> scale(42.0, 2)      # still an ordinary Python function
22.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from .boundary.callback import (
    Callback,
    CallbackRegistry,
    Invalidated,
    default_registry,
)
from .boundary.signature import Signature

__all__ = ["Callback", "CallbackRegistry", "Invalidated", "callback", "default_registry"]

F = TypeVar("F", bound=Callable[..., Any])


@overload
def callback(function: F) -> Callback: ...
@overload
def callback(function: str | Signature | None = None, *, name: str | None = None,
             session: Any = None, registry: CallbackRegistry | None = None,
             ) -> Callable[[F], Callback]: ...


def callback(function: Any = None, *, name: str | None = None, session: Any = None,
             registry: CallbackRegistry | None = None) -> Any:
    """Make a Python function callable from compiled MLIR code.

    Spellings: ``@callback``, ``@callback(name=..., session=...)``, and
    ``@callback("(f32, i32) -> f32")`` where the MLIR function type replaces the
    annotations. The callback is registered under its name in ``session`` (or the
    default registry that every session sees) and links to ``func.func private`` MLIR
    declarations of that name.
    """
    spec = None
    if isinstance(function, (str, Signature)):
        spec, function = function, None

    def decorate(fn: Callable[..., Any]) -> Callback:
        cb = Callback(fn, spec, name)
        target: object
        if registry is not None:
            target = registry
        elif session is not None:
            target = getattr(session, "callbacks", None)
        else:
            target = default_registry()
        if not isinstance(target, CallbackRegistry):  # a wrong session= or registry=
            given = ("registry", registry) if registry is not None else ("session", session)
            raise TypeError(f"@callback({given[0]}=...) takes a pymlirjit "
                            f"{'CallbackRegistry' if registry is not None else 'Session'}, "
                            f"got {type(given[1]).__name__}")
        return target.add(cb)

    if function is not None:
        return decorate(function)
    return decorate
