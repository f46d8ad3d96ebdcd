"""The type aliases of generic kernels (see :mod:`pymlirjit.generic`): which a source
leaves free, how a call's arguments bind them (:meth:`Binder.bind`), and the exact
argument types the native entry of a binding takes, which mirror those rules
(:meth:`Binder.exact_types`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import SignatureError
from .types import ScalarType, to_type

__all__ = ["Binder", "ExactTypes", "Role", "TypeTest", "describe", "free_aliases", "header",
           "roles"]

# String literals and comments hold no types.
_NOT_CODE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')
# `!name` not followed by `.` (a dialect type, `!llvm.ptr`) nor `<` (`!dialect<...>`).
_ALIAS = re.compile(r"!([A-Za-z_][\w$]*)(?![\w$.<])")
_DEFINED = re.compile(r"^\s*!([A-Za-z_][\w$.]*)\s*=", re.MULTILINE)
_SHAPED = re.compile(r"^(?:memref|tensor)<\s*(?:\*x|(?:[0-9?]+x)*)(.*?)\s*(?:,.*)?>$", re.S)
_BARE = re.compile(r"^!([A-Za-z_][\w$]*)$")
_COMPLEX = re.compile(r"^complex<\s*!([A-Za-z_][\w$]*)\s*>$")
# What a Python scalar binds a `!T` parameter to, weakest first: the strongest one given wins.
_WEAK = {bool: "i1", int: "i64", float: "f64", complex: "complex<f64>"}
_WEAK_ORDER = list(_WEAK.values())
# The scalar types whose instances bind by type alone: those an entry may test for.
_SCALAR_TYPES: tuple[type, ...] = (
    *_WEAK, np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)


#: Exact types of arguments by position: ``((position, (type, ...)), ...)``.
TypeTest = tuple[tuple[int, tuple[type, ...]], ...]
#: The calls a native entry takes by their arguments' exact types: those for which, in
#: every group, one route ``(allowed, required)`` holds: the argument at each position
#: of ``allowed`` has one of the types given for it, and (unless ``required`` is empty)
#: one at a position of ``required`` has one of those.
ExactTypes = tuple[tuple[tuple[TypeTest, TypeTest], ...], ...]


def free_aliases(text: str) -> tuple[str, ...]:
    """The type aliases ``text`` uses without defining them, in order of first use: the
    aliases a generic kernel binds (empty for any other source)."""
    code = _NOT_CODE.sub("", text)
    defined = set(_DEFINED.findall(code))
    return tuple(dict.fromkeys(a for a in _ALIAS.findall(code) if a not in defined))

def header(text: str, name: str) -> list[tuple[str, str]]:
    """(SSA name, type) of each parameter of ``func.func @name``, read from the text."""
    code = _NOT_CODE.sub("", text)
    match = re.search(r"func\.func\s+(?:\w+\s+)*@" + re.escape(name) + r"\s*\(", code)
    if match is None:
        raise SignatureError(f"@mlir_kernel {name!r}: the source defines no func.func @{name}")
    items, depth, start = [], 0, match.end()
    for i in range(start, len(code)):
        c = code[i]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}" and not (c == ">" and code[i - 1] == "-"):
            if depth == 0:
                items.append(code[start:i])
                break
            depth -= 1
        elif c == "," and depth == 0:
            items.append(code[start:i])
            start = i + 1
    params = []
    for item in items:
        ssa, _, rest = item.strip().partition(":")
        if not rest:
            continue  # `()`: no parameters
        depth = 0
        for i, c in enumerate(rest):  # the type ends at its attributes or location
            if depth == 0 and (c == "{" or rest.startswith("loc(", i)):
                rest = rest[:i]
                break
            depth += (c in "(<[") - (c in ")>]")
        params.append((ssa.strip().lstrip("%"), rest.strip()))
    return params

class Role:
    """How one parameter binds an alias: ``array`` (its element type) or not (its own
    type), ``complex`` (the alias is the component type of ``complex<!T>``)."""

    def __init__(self, position: int, name: str, alias: str, array: bool,
                 complex_: bool) -> None:
        self.position, self.name, self.alias = position, name, alias
        self.array, self.complex = array, complex_
        self.label = f"argument {position + 1} ({name!r})"

    def bind(self, value: Any) -> tuple[int, str]:
        """(strength, MLIR type) ``value`` binds the alias to: 2 an array, 1 a numpy
        scalar, 0 a Python scalar (weak)."""
        if self.array:
            if not isinstance(value, np.ndarray) and not _scipy_sparse(value):
                raise TypeError(f"{self.label} must be a numpy array (its dtype binds "
                                f"!{self.alias}), got {type(value).__name__}")
            return 2, self._component(self._type(value.dtype), value.dtype)
        if isinstance(value, np.generic):
            return 1, self._component(self._type(type(value)), value.dtype)
        for python_type, mlir in _WEAK.items():
            if type(value) is python_type or (python_type is not bool
                                              and isinstance(value, python_type)):
                return 0, ("f64" if self.complex else mlir)
        raise TypeError(f"{self.label} binds no type to !{self.alias}: expected a numpy "
                        f"scalar or a Python bool, int, float or complex, got "
                        f"{type(value).__name__}")

    def binds(self, scalar_type: type) -> tuple[int, str] | None:
        """What :meth:`bind` gives for any value of exactly ``scalar_type`` (a Python or
        numpy scalar type whose instances it tells by type alone), or ``None`` if it
        raises."""
        try:
            return self.bind(scalar_type())
        except TypeError:
            return None

    def _type(self, spelling: Any) -> ScalarType:
        try:
            found = to_type(spelling)
        except TypeError as exc:
            raise TypeError(f"{self.label} binds no type to !{self.alias}: {exc}") from None
        assert isinstance(found, ScalarType)
        return found

    def _component(self, t: ScalarType, dtype: Any) -> str:
        if not self.complex:
            return t.mlir
        if t.kind != "complex":
            raise TypeError(f"{self.label} binds !{self.alias} in complex<!{self.alias}>: "
                            f"expected complex values, got {dtype}")
        return "f32" if t.bits == 64 else "f64"


def _scipy_sparse(value: Any) -> bool:
    """A scipy.sparse matrix or array (a sparse tensor's argument: its values' dtype
    binds), told without importing scipy."""
    return type(value).__module__.startswith("scipy.sparse") and hasattr(value, "dtype")


def roles(text: str, name: str, names: list[str] | None) -> list[Role]:
    """How each parameter of ``func.func @name`` binds an alias (none for the others)."""
    made = []
    for position, (ssa, type_text) in enumerate(header(text, name)):
        shaped = _SHAPED.match(type_text)
        element = shaped.group(1).strip() if shaped else type_text
        for pattern, complex_ in ((_BARE, False), (_COMPLEX, True)):
            found = pattern.match(element)
            if found:
                label = names[position] if names and position < len(names) else ssa
                made.append(Role(position, label, found.group(1), shaped is not None,
                                 complex_))
    return made


def describe(binding: dict[str, str]) -> str:
    """``!T = f32, !U = i64``: a binding as errors and reprs name it."""
    return ", ".join(f"!{alias} = {t}" for alias, t in binding.items())


class Binder:
    """How the calls of the kernel ``name`` bind the aliases its source ``text`` leaves
    free (:attr:`aliases`); ``names`` are the stub's parameter names, if any. A source
    without the function is reported by :meth:`bind` (:attr:`problem`), as any kernel's
    is when called."""

    def __init__(self, text: str, name: str, names: list[str] | None) -> None:
        self.name, self.names = name, names
        self.aliases = free_aliases(text)
        self.problem: SignatureError | None = None
        try:
            self.roles = roles(text, name, names)
        except SignatureError as exc:
            self.roles, self.problem = [], exc
        #: The positions of the parameters binding an alias by an array's dtype.
        self.arrays = sorted({r.position for r in self.roles if r.array})

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
        """The binding a call with these arguments runs (alias -> MLIR type)."""
        if self.problem is not None:
            raise self.problem
        given = []
        for role in self.roles:
            if role.position < len(args):
                given.append((role, args[role.position]))
            elif self.names and role.name in kwargs:
                given.append((role, kwargs[role.name]))
            # else missing: the bound kernel's call says so
        found: dict[str, tuple[int, str, str]] = {}
        # Arrays first: a scalar beside an array binding its alias binds nothing (it
        # converts to the array's type, as any argument does).
        for role, value in sorted(given, key=lambda given: not given[0].array):
            if not role.array and found.get(role.alias, (0,))[0] == 2:
                continue
            try:
                strength, t = role.bind(value)
            except TypeError as exc:
                raise TypeError(f"@mlir_kernel {self.name!r}: {exc}") from None
            seen = found.get(role.alias)
            if seen is None or strength > seen[0]:
                found[role.alias] = (strength, t, role.label)
            elif strength == seen[0] and t != seen[1]:
                if strength == 0:  # Python scalars: the widest kind
                    if _WEAK_ORDER.index(t) > _WEAK_ORDER.index(seen[1]):
                        found[role.alias] = (strength, t, role.label)
                    continue
                raise TypeError(f"@mlir_kernel {self.name!r}: {role.label} binds "
                                f"!{role.alias} to {t}, but {seen[2]} binds it to {seen[1]}")
        missing = [a for a in self.aliases if a not in found]
        if missing:
            raise TypeError(f"@mlir_kernel {self.name!r}: no argument binds "
                            f"{', '.join('!' + a for a in missing)} (bind it with "
                            f"kernel.specialize({missing[0]}=...))")
        return {a: found[a][1] for a in self.aliases}

    def exact_types(self, binding: dict[str, str]) -> ExactTypes | None:
        """The exact argument types of the calls :meth:`bind` gives ``binding``, as the
        native entry of that binding tests them (it checks arrays' dtypes itself); ``()``
        if there is nothing to test (no scalar binds an alias), ``None`` if no call's
        arguments bind it (made by :meth:`specialize` only).

        Mirrors :meth:`bind`, for the scalar types told by type alone (the entry tests
        those it unboxes; it hands any other type on): where an array
        binds an alias, it decides (the entry checks its dtype; the scalars beside it
        bind nothing). Else each scalar binding the alias must bind a type (a
        ``np.uint8`` binds none), and either numpy scalars decide (at least one given,
        all binding the same type: Python scalars beside them convert), or, with only
        Python scalars, the widest kind given does."""
        scalars = [r for r in self.roles if not r.array]
        by_array = {r.alias for r in self.roles if r.array}
        kinds = {r.position: {t: k for t in _SCALAR_TYPES if (k := r.binds(t)) is not None}
                 for r in scalars if r.alias not in by_array}

        def of(p: int, strength: int, binds: list[str]) -> tuple[type, ...]:
            """The types binding the alias at ``p`` with ``strength`` to one of ``binds``."""
            return tuple(t for t, (s, m) in kinds[p].items() if s == strength and m in binds)

        groups: list[tuple[tuple[TypeTest, TypeTest], ...]] = []
        for alias in self.aliases:
            if alias in by_array:
                continue
            bound, routes = binding[alias], []
            positions = [r.position for r in scalars if r.alias == alias]
            numpy = {p: of(p, 1, [bound]) for p in positions}
            if any(numpy.values()):
                routes.append((
                    tuple((p, numpy[p] + of(p, 0, _WEAK_ORDER)) for p in positions),
                    tuple((p, numpy[p]) for p in positions if numpy[p])))
            if bound in _WEAK_ORDER:
                narrower = _WEAK_ORDER[:_WEAK_ORDER.index(bound) + 1]
                widest = {p: of(p, 0, [bound]) for p in positions}
                if any(widest.values()):
                    routes.append((tuple((p, of(p, 0, narrower)) for p in positions),
                                   tuple((p, widest[p]) for p in positions if widest[p])))
            if not routes:
                return None
            groups.append(tuple(routes))
        return tuple(groups)

