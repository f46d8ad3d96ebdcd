"""Sparse tensors at the C ABI: the flat signature and the MLIR wrapper that gives it.

A public function with a sparse tensor parameter or result (a
:class:`~pymlirjit.boundary.sparseformat.SparseTensorType`) is called through a wrapper
the session adds, ``@__pymlirjit_sparse_<name>``, whose signature (:func:`flat_signature`)
has only memrefs and ``index`` values, which the boundary passes as it passes any:

- a sparse parameter becomes its storage buffers (positions, coordinates, values: 1-D
  memrefs of the encoding's widths, in MLIR's storage order) and its level sizes; the
  wrapper builds the sparse tensor from them without copying, as MLIR's inline sparse
  code stores one (its buffers and a ``storage_specifier`` of their sizes);
- a sparse result becomes the buffers of the tensor the function returns (what
  ``sparse_tensor.positions``/``coordinates``/``values`` give) and its dim sizes.

MLIR 22's ``sparse-assembler`` pass would write such wrappers with
``sparse_tensor.assemble``, which only accepts static shapes; the wrapper here makes the
tensor the way the sparsifier's own codegen of ``assemble`` does, with the sizes of each
call.
"""

from __future__ import annotations

from .signature import Parameter, Signature
from .sparseformat import SparseTensorType
from .types import MemRefType, ScalarType, Type, i8, i16, i32, i64, index

__all__ = ["buffer_types", "disassembled", "flat_signature", "flat_types", "has_sparse",
           "sparse_wrapper", "sparse_wrapper_symbol"]

_WIDTHS: dict[int, ScalarType] = {0: index, 8: i8, 16: i16, 32: i32, 64: i64}


def has_sparse(signature: Signature) -> bool:
    """Whether ``signature`` has a sparse tensor parameter or result."""
    return any(isinstance(t, SparseTensorType)
               for t in (*signature.param_types, *signature.results))


def sparse_wrapper_symbol(name: str) -> str:
    """The wrapper :func:`sparse_wrapper` defines for ``@name`` (a reserved name)."""
    return f"__pymlirjit_sparse_{name}"


def buffer_types(t: SparseTensorType) -> tuple[MemRefType, ...]:
    """The 1-D memrefs of ``t``'s storage buffers, in MLIR's storage order."""
    widths = {"pos": _WIDTHS[t.pos_width], "crd": _WIDTHS[t.crd_width], "val": t.element}
    return tuple(MemRefType(widths[b.kind], (None,)) for b in t.format.buffers)


def flat_types(t: Type) -> list[Type]:
    if isinstance(t, SparseTensorType):
        return [*buffer_types(t), *(index,) * t.rank]
    return [t]


def flat_signature(signature: Signature) -> Signature:
    """The signature of ``signature``'s wrapper: each sparse tensor spelled as its
    buffers and then its sizes (a parameter's per level, a result's per dim)."""
    params: list[Parameter] = []
    for p in signature.params:
        flat = flat_types(p.type)
        names = [p.name] if len(flat) == 1 else [f"{p.name}_{i}" for i in range(len(flat))]
        params += [Parameter(n, t) for n, t in zip(names, flat)]
    results = [r for t in signature.results for r in flat_types(t)]
    return Signature(tuple(params), tuple(results))


def _encoding(t: SparseTensorType) -> str:
    return t.mlir[t.mlir.index("#sparse_tensor.encoding"):-1]


def _assembled(t: SparseTensorType, first: int, out: str) -> list[str]:
    """Ops making the sparse tensor ``out`` from the wrapper's arguments ``%a<first>...``
    (buffers, then level sizes)."""
    buffers = buffer_types(t)
    spec_type = f"!sparse_tensor.storage_specifier<{_encoding(t)}>"
    lines = [f"{out}_s = sparse_tensor.storage_specifier.init : {spec_type}"]
    spec = f"{out}_s"
    lines.append(f"{out}_c0 = arith.constant 0 : index")

    def setting(field: str, value: str) -> None:
        nonlocal spec
        new = f"{out}_s{len(lines)}"
        lines.append(f"{new} = sparse_tensor.storage_specifier.set {spec} "
                     f"{field} with {value} : {spec_type}")
        spec = new

    for level in range(t.rank):
        setting(f"lvl_sz at {level}", f"%a{first + len(buffers) + level}")
    for i, (buffer, memref) in enumerate(zip(t.format.buffers, buffers)):
        size = f"{out}_n{i}"
        lines.append(f"{size} = memref.dim %a{first + i}, {out}_c0 : {memref.mlir}")
        field = "val_mem_sz" if buffer.kind == "val" else f"{buffer.kind}_mem_sz at {buffer.level}"
        setting(field, size)
    arguments = ", ".join(f"%a{first + i}" for i in range(len(buffers)))
    types = ", ".join(m.mlir for m in buffers)
    lines.append(f"{out} = builtin.unrealized_conversion_cast {arguments}, {spec} : "
                 f"{types}, {spec_type} to {t.mlir}")
    return lines


def disassembled(t: SparseTensorType, value: str, out: str) -> tuple[list[str], list[str]]:
    """Ops reading the buffers and dim sizes of the sparse tensor ``value``, and the
    values they define."""
    lines: list[str] = []
    names: list[str] = []
    for i, (buffer, memref) in enumerate(zip(t.format.buffers, buffer_types(t))):
        name = f"{out}_b{i}"
        if buffer.kind == "val":
            op = f"sparse_tensor.values {value}"
        elif buffer.stride > 1:
            op = f"sparse_tensor.coordinates_buffer {value}"
        else:
            what = "positions" if buffer.kind == "pos" else "coordinates"
            op = f"sparse_tensor.{what} {value} {{level = {buffer.level} : index}}"
        lines.append(f"{name} = {op} : {t.mlir} to {memref.mlir}")
        names.append(name)
    for dim in range(t.rank):
        lines.append(f"{out}_i{dim} = arith.constant {dim} : index")
        lines.append(f"{out}_d{dim} = tensor.dim {value}, {out}_i{dim} : {t.mlir}")
        names.append(f"{out}_d{dim}")
    return lines, names


def sparse_wrapper(impl: str, wrapper: str, signature: Signature) -> str:
    """``func.func @wrapper``, public with a C interface, taking and returning
    :func:`flat_signature`'s values and calling ``@impl`` (declared in the text too, so
    that it parses alone: drop that declaration)."""
    flat = flat_signature(signature)
    params = []
    for i, t in enumerate(flat.param_types):
        read_only = " {bufferization.writable = false}" if t.mlir.startswith("tensor") else ""
        params.append(f"%a{i}: {t.mlir}{read_only}")
    body: list[str] = []
    args: list[str] = []
    first = 0
    for i, t in enumerate(signature.param_types):
        if isinstance(t, SparseTensorType):
            body += _assembled(t, first, f"%t{i}")
            args.append(f"%t{i}")
        else:
            args.append(f"%a{first}")
        first += len(flat_types(t))
    types = ", ".join(t.mlir for t in signature.param_types)
    results = ", ".join(t.mlir for t in signature.results)
    call = f"call @{impl}({', '.join(args)}) : ({types}) -> ({results})"
    returned: list[str] = []
    if signature.results:
        body.append(f"%r:{len(signature.results)} = {call}")
        for i, t in enumerate(signature.results):
            if isinstance(t, SparseTensorType):
                ops, names = disassembled(t, f"%r#{i}", f"%o{i}")
                body += ops
                returned += names
            else:
                returned.append(f"%r#{i}")
    else:
        body.append(call)
    flat_results = ", ".join(t.mlir for t in flat.results)
    ret = f"return {', '.join(returned)} : {flat_results}" if returned else "return"
    lines = "\n  ".join([*body, ret])
    return (f"func.func private @{impl}({types}) -> ({results})\n"
            f"func.func @{wrapper}({', '.join(params)}) -> ({flat_results}) "
            f"attributes {{llvm.emit_c_interface}} {{\n  {lines}\n}}\n")
