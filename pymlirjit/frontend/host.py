"""What the passes ask of the module being built (:class:`.program.Program`): callees
compiled into it, callbacks declared in it. A protocol, so that the passes import no
module above them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .diagnostics import Where
from .jtypes import JType
from .source import FunctionSource

__all__ = ["Host"]


class Host(Protocol):
    """The module a function is compiled into."""

    parallel: bool

    def callee(self, function: Callable[..., Any], params: tuple[JType, ...],
               where: Where | None) -> tuple[str, JType]: ...

    def use_callback(self, cb: Any) -> None: ...

    def auto_callback(self, function: Any, params: tuple[JType, ...],
                      result: JType) -> str: ...

    def print_callback(self, parts: tuple[str | None, ...], types: tuple[JType, ...],
                       options: dict[str | None, Any]) -> str: ...

    def raise_callback(self, cls: type, args: tuple[object, ...], where: str) -> str: ...

    def compile_source(self, source: FunctionSource, params: tuple[JType, ...], symbol: str,
                       private: bool, key: Any = None) -> tuple[str, JType]: ...

    def fresh_symbol(self, base: str) -> str: ...

    def declare(self, name: str, signature: str) -> None: ...

    def use_random_state(self) -> None: ...
