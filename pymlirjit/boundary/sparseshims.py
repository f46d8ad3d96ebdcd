"""The MLIR around sparse functions and callbacks, and callbacks given scipy views.

A public function with sparse tensors is called through :func:`sparse_entry_shims`: the
flat wrapper of :mod:`.sparse`, and the entry shim of :mod:`.abi` around it where its
other values cross widened (i1, f16, complex...).

Callbacks taking sparse tensors: compiled code hands them scipy.sparse views.

A declaration ``func.func private @cb(tensor<?x?xf64, #CSR>, f64) -> f64`` linked to a
callback becomes a small MLIR function ``@cb`` (:func:`sparse_callback_shim`) that reads
the tensor's buffers and dim sizes (``sparse_tensor.positions``/``coordinates``/
``values``, ``tensor.dim``) and calls ``@__pymlirjit_sparsecb_cb`` with them, flat, as
memrefs and ``index`` values. That symbol is served by :func:`flat_callback` of the
user's callback: a callback of the flat signature that makes the scipy.sparse array of
each sparse argument over the buffers (views of the kernel's memory, valid during the
call, as memref arguments are: copy what you keep) and calls the user's function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import Diagnostic, MLIRError, SignatureError
from .abi import RESERVED_PREFIX, boundary_abi, declaration, entry_shim_symbol, kernel_shim
from .callback import Callback
from .callframe import SPARSE_CALLBACK_PREFIX
from .signature import Signature
from .sparse import (
    buffer_types,
    disassembled,
    flat_signature,
    flat_types,
    has_sparse,
    sparse_wrapper,
    sparse_wrapper_symbol,
)
from .sparsearrays import from_buffers
from .sparseformat import SparseTensorType

__all__ = ["SPARSE_CALLBACK_PREFIX", "flat_callback", "sparse_callback_shim",
           "sparse_callback_symbol", "sparse_entry_shims", "with_flat_callbacks",
           "with_sparsifier_hint"]

#: The flat symbol of callback ``@cb``: ``__pymlirjit_sparsecb_cb`` (reserved).
assert SPARSE_CALLBACK_PREFIX.startswith(RESERVED_PREFIX)


def sparse_entry_shims(impl: str, name: str, signature: Signature) -> tuple[str, list[str]]:
    """The C-ABI entry of public function ``@name`` (defined as ``@impl``) with sparse
    tensors, and the MLIR that defines it: its flat wrapper, and the entry shim around
    that where other values cross widened."""
    wrapper = entry = sparse_wrapper_symbol(name)
    shims = [sparse_wrapper(impl, wrapper, signature)]
    if boundary_abi(signature).needs_shim:
        entry = entry_shim_symbol(name)
        flat = flat_signature(signature)
        shims.append(kernel_shim(wrapper, entry, flat).removesuffix(declaration(wrapper, flat)))
    return entry, shims


def sparse_callback_symbol(name: str) -> str:
    return SPARSE_CALLBACK_PREFIX + name


def _check(signature: Signature, name: str) -> None:
    if any(isinstance(t, SparseTensorType) for t in signature.results):
        raise SignatureError(f"callback @{name}: a callback cannot return a sparse tensor "
                             f"({signature}); return the dense array, or memrefs")


def sparse_callback_shim(name: str, signature: Signature) -> str:
    """``func.func private @name`` (the declaration's signature, sparse tensors
    included) calling the flat ``@__pymlirjit_sparsecb_<name>``, declared in the text
    with a C interface."""
    _check(signature, name)
    flat = flat_signature(signature)
    symbol = sparse_callback_symbol(name)
    params = ", ".join(f"%p{i}: {t.mlir}" for i, t in enumerate(signature.param_types))
    body: list[str] = []
    args: list[str] = []
    for i, t in enumerate(signature.param_types):
        if isinstance(t, SparseTensorType):
            ops, names = disassembled(t, f"%p{i}", f"%q{i}")
            body += ops
            args += names
        else:
            args.append(f"%p{i}")
    flat_params = ", ".join(t.mlir for t in flat.param_types)
    results = ", ".join(t.mlir for t in signature.results)
    call = f"call @{symbol}({', '.join(args)}) : ({flat_params}) -> ({results})"
    if signature.results:
        body += [f"%r:{len(signature.results)} = {call}",
                 "return " + ", ".join(f"%r#{i}" for i in range(len(signature.results)))
                 + f" : {results}"]
    else:
        body += [call, "return"]
    lines = "\n  ".join(body)
    return (f"func.func private @{symbol}({flat_params}) -> ({results}) "
            f"attributes {{llvm.emit_c_interface}}\n"
            f"func.func private @{name}({params}) -> ({results}) {{\n  {lines}\n}}\n")


def flat_callback(cb: Callback) -> Callback:
    """The callback serving ``@__pymlirjit_sparsecb_<name>`` for ``cb`` (one per
    callback, made once): it takes the flat arguments and calls ``cb``'s function with
    a scipy.sparse array for each sparse one."""
    made = cb.__dict__.get("_flat_callback")
    if made is not None:
        return made  # type: ignore[no-any-return]
    signature = cb.signature
    _check(signature, cb.name)
    function = cb.__wrapped__
    steps: list[tuple[SparseTensorType | None, int]] = [
        (t if isinstance(t, SparseTensorType) else None, len(flat_types(t)))
        for t in signature.param_types]

    def with_sparse_views(*flat: Any) -> Any:
        args = []
        at = 0
        for t, count in steps:
            if t is None:
                args.append(flat[at])
            else:
                buffers = len(buffer_types(t))
                shape = tuple(int(d) for d in flat[at + buffers:at + count])
                args.append(from_buffers(t, list(flat[at:at + buffers]), shape))
            at += count
        return function(*args)

    made = Callback(with_sparse_views, flat_signature(signature),
                    name=sparse_callback_symbol(cb.name))
    cb.__dict__["_flat_callback"] = made
    return made


def with_flat_callbacks(linkable: Mapping[str, Any], needed: Iterable[str]
                        ) -> Mapping[str, Any]:
    """``linkable`` (callbacks by name) with the flat callback of each sparse one that
    ``needed`` names by its flat symbol (a module loaded from the disk cache links them
    so)."""
    extra = {}
    for name in needed:
        user = linkable.get(name.removeprefix(SPARSE_CALLBACK_PREFIX))
        if (name.startswith(SPARSE_CALLBACK_PREFIX) and name not in linkable
                and isinstance(user, Callback) and has_sparse(user.signature)):
            extra[name] = flat_callback(user)
    return {**linkable, **extra} if extra else linkable


#: What MLIR 22 says when the sparsifier left an op on a sparse tensor as it was (a
#: linalg body it cannot sparsify): a sparse value's storage never materialized.
_UNSPARSIFIED = "failed to legalize unresolved materialization"

_HINT = ("the sparsifier could not make sparse code of an operation on this sparse tensor "
         "and left it as it was: MLIR 22 sparsifies linalg ops whose body is arith and math "
         "ops, with add, mul, and, or, xor reductions; a maximum reduction or a func.call in "
         "the body is not (sparse_tensor.reduce, unary and binary spell custom ones). MLIR "
         "said: ")


def with_sparsifier_hint(error: MLIRError) -> MLIRError:
    """``error``, or, where it is the sparsifier's failure on an op it left as it was,
    the same error with its diagnostics saying what to change."""
    def hinted(d: Diagnostic) -> Diagnostic:
        if d.message.startswith(_UNSPARSIFIED) and "sparse_tensor" in d.message:
            return Diagnostic(d.severity, _HINT + d.message, d.location, d.notes)
        return d

    diagnostics = [hinted(d) for d in error.diagnostics]
    if diagnostics == list(error.diagnostics):
        return error
    return MLIRError(error.summary, diagnostics)
