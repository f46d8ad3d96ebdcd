"""MLIR preparation: what a session does to a module before lowering it.

:func:`prepare` parses the source, links each private declaration to the callback it
resolves to, marks public functions and callback declarations with
``llvm.emit_c_interface``, adds the ABI shims some types need, refuses reserved symbol
names and makes tensor arguments read-only; it returns a :class:`PreparedModule`.
:func:`lower` then runs the pipeline of the :class:`CompileOptions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .abi import (
    RESERVED_PREFIX,
    boundary_abi,
    callback_shim,
    callback_shim_symbol,
    ciface_symbol,
    entry_shim_symbol,
    kernel_shim,
)
from .callbacks import Callback
from .errors import Diagnostic, MLIRError
from .optimize import optimize, with_vector_lowering
from .pipeline import (
    check_opt_level,
    new_context,
    normalize_pipeline,
    parse_module,
    runtime_library,
)
from .pipeline import lower as lower_module
from .signature import Signature, from_func_op
from .types import TensorType

__all__ = ["CompileOptions", "PreparedModule", "lower", "prepare"]



@dataclass(frozen=True)
class CompileOptions:
    """How a module is compiled: the pass ``pipeline`` (normalized), ``opt_level`` and
    the ``shared_libs`` its code may call (resolved paths). Immutable: with the source
    and the explicit callbacks, it is a session's in-memory cache key, and the input of
    the disk cache's key."""

    pipeline: str
    opt_level: int
    shared_libs: tuple[str, ...]
    #: Fast-math flags on float ops (numba's ``fastmath=True``).
    fastmath: bool = False
    #: Room for numba's ``parallel=True`` (not used yet).
    parallel: bool = False

    @classmethod
    def make(cls, pipeline: str | Sequence[str] | None = None, opt_level: int = 2,
             shared_libs: Iterable[str] = (), fastmath: bool = False) -> CompileOptions:
        """Options from any accepted spelling, checked (``pipeline=None``: the default
        pipeline; libraries by path or by runtime library name)."""
        return cls(normalize_pipeline(pipeline), check_opt_level(opt_level),
                   tuple(runtime_library(str(p)) for p in shared_libs),
                   _check_flag("fastmath", fastmath))

    def replace(self, pipeline: str | Sequence[str] | None = None,
                opt_level: int | None = None,
                shared_libs: Iterable[str] | None = None,
                fastmath: bool | None = None) -> CompileOptions:
        """These options with those given (not ``None``) instead, checked."""
        if pipeline is None and opt_level is None and shared_libs is None and fastmath is None:
            return self
        return CompileOptions(
            self.pipeline if pipeline is None else normalize_pipeline(pipeline),
            self.opt_level if opt_level is None else check_opt_level(opt_level),
            self.shared_libs if shared_libs is None
            else tuple(runtime_library(str(p)) for p in shared_libs),
            self.fastmath if fastmath is None else _check_flag("fastmath", fastmath),
            self.parallel)

    @property
    def pipeline_key(self) -> str:
        """The pipeline with the flags that change the code it makes (a cache key)."""
        flags = "".join(f" +{name}" for name in ("fastmath", "parallel") if getattr(self, name))
        return self.pipeline + flags

    @property
    def tiles_linalg(self) -> bool:
        """Whether linalg ops are tiled and vectorized: at ``opt_level=3`` with the
        default pipeline (a pipeline given by the user is run as written)."""
        return self.opt_level >= 3 and self.pipeline == normalize_pipeline(None)


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


@dataclass
class PreparedModule:
    """A parsed module ready to lower (:func:`lower` lowers ``module`` in place).

    ``signatures`` maps each public function to its signature and C-ABI entry name;
    ``linked`` each declaration linked to a callback (by name); ``registrations`` each
    runtime symbol the compiled code calls to its callback; ``declared`` lists every
    private declaration. ``context`` owns ``module`` and must outlive it.
    """

    context: Any
    module: Any
    filename: str
    signatures: dict[str, tuple[Signature, str]]
    linked: dict[str, Callback]
    registrations: dict[str, Callback]
    declared: tuple[str, ...]


def prepare(text: str, options: CompileOptions, resolve: Callable[[str], Callback | None],
            filename: str = "<source>") -> PreparedModule:
    """Parse ``text`` and prepare it for ``options``; ``resolve(name)`` gives the callback
    a private declaration ``@name`` links to (``None``: left to shared libraries or the
    process). Raises :class:`MLIRError` for bad MLIR or reserved names and
    :class:`~pymlirjit.errors.SignatureError` if a callback disagrees with its
    declaration."""
    from mlir import ir

    del options  # nothing in the preparation depends on them yet (room for fastmath)
    context = new_context()
    module = parse_module(text, context, filename)
    _check_reserved_names(module, filename)
    unit = ir.UnitAttr.get(context)
    signatures: dict[str, tuple[Signature, str]] = {}
    linked: dict[str, Callback] = {}
    registrations: dict[str, Callback] = {}
    declared: list[str] = []
    shims: list[str] = []
    with context, ir.Location.unknown():
        for op in list(module.body.operations):
            if op.operation.name != "func.func":
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            signature = from_func_op(op)
            is_declaration = len(op.regions[0].blocks) == 0
            private = ("sym_visibility" in op.attributes
                       and ir.StringAttr(op.attributes["sym_visibility"]).value == "private")
            if is_declaration:
                declared.append(name)
                cb = resolve(name)
                if cb is None:  # left to shared libraries or the process, as written
                    continue
                cb.signature.check_matches(signature, f"callback @{name}",
                                           "its Python annotations", "its MLIR declaration")
                linked[name] = cb
                if boundary_abi(signature).needs_shim:
                    symbol = callback_shim_symbol(name)
                    shims.append(callback_shim(name, symbol, signature))
                    op.operation.erase()
                else:
                    symbol = name
                    op.attributes["llvm.emit_c_interface"] = unit
                registrations[ciface_symbol(symbol)] = cb
            elif not private:
                op.attributes["llvm.emit_c_interface"] = unit
                _make_tensor_arguments_read_only(op, signature)
                entry = name
                if boundary_abi(signature).needs_shim:
                    entry = entry_shim_symbol(name)
                    shims.append(kernel_shim(name, entry, signature))
                signatures[name] = (signature, entry)
        if shims:
            shim_module = parse_module("\n".join(shims), context, "<pymlirjit shims>")
            for op in list(shim_module.body.operations):
                shim_name = ir.StringAttr(op.attributes["sym_name"]).value
                if shim_name in signatures:  # the kernel's declaration: defined already
                    continue
                op.operation.detach_from_parent()
                module.body.append(op)
    return PreparedModule(context, module, filename, signatures, linked, registrations,
                          tuple(declared))


def lower(prepared: PreparedModule, options: CompileOptions) -> PreparedModule:
    """Lower ``prepared.module`` to the LLVM dialect with ``options.pipeline``, in place;
    returns ``prepared``."""
    def optimize_first(module: Any, pipeline: str) -> str:
        vectors = optimize(module, fastmath=options.fastmath, tile=options.tiles_linalg,
                           filename=prepared.filename)
        return with_vector_lowering(pipeline) if vectors else pipeline

    lower_module(prepared.module, options.pipeline, prepared.filename,
                 optimize_first if options.fastmath or options.tiles_linalg else None)
    return prepared


def _check_reserved_names(module: Any, filename: str) -> None:
    """Refuse symbols named like pymlirjit's shims: the session would call a function
    defined by the user with a shim's ABI."""
    from mlir import ir

    found = []
    for op in module.body.operations:
        attributes = op.operation.attributes
        if "sym_name" not in attributes:
            continue
        name = ir.StringAttr(attributes["sym_name"]).value
        if name.startswith(RESERVED_PREFIX):
            found.append(Diagnostic(
                "error", f"@{name}: symbols starting with {RESERVED_PREFIX!r} are reserved "
                f"for pymlirjit's own functions; rename it", str(op.location),
            ).renamed_source(filename))
    if found:
        raise MLIRError("reserved symbol names", found)


def _make_tensor_arguments_read_only(op: Any, signature: Signature) -> None:
    """Tell bufferization not to write into tensor arguments: they alias the caller's
    numpy arrays, and a tensor is a value."""
    from mlir import ir

    if not any(isinstance(t, TensorType) for t in signature.param_types):
        return
    existing = (list(ir.ArrayAttr(op.attributes["arg_attrs"])) if "arg_attrs" in op.attributes
                else [ir.DictAttr.get({})] * len(signature.params))
    updated = []
    for t, attrs in zip(signature.param_types, existing):
        entries = {named.name: named.attr for named in ir.DictAttr(attrs)}
        if isinstance(t, TensorType):
            entries["bufferization.writable"] = ir.BoolAttr.get(False)
        updated.append(ir.DictAttr.get(entries))
    op.attributes["arg_attrs"] = ir.ArrayAttr.get(updated)
