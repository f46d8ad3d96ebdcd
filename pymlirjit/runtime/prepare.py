"""MLIR preparation: what a session does to a module before lowering it.

:func:`prepare` parses the source, links each private declaration to the callback it
resolves to, marks public functions and callback declarations with
``llvm.emit_c_interface``, adds the ABI shims some types need, refuses reserved symbol
names and makes tensor arguments read-only; it returns a :class:`PreparedModule`.
:func:`lower` then runs the pipeline of the :class:`CompileOptions`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..boundary.abi import (
    CIFACE_PREFIX,
    boundary_abi,
    c_interface_wrapper,
    callback_shim,
    callback_shim_symbol,
    ciface_symbol,
    entry_shim_symbol,
    kernel_shim,
)
from ..boundary.callback import Callback
from ..boundary.callbackwidths import at_declared_widths
from ..boundary.failures import FAIL_SYMBOL, raise_failure, source_id
from ..boundary.identitycasts import fold_identity_casts
from ..boundary.signature import Signature, as_signature, from_func_op
from ..boundary.sparse import has_sparse
from ..boundary.sparseshims import (
    flat_callback,
    sparse_callback_shim,
    sparse_callback_symbol,
    sparse_entry_shims,
    with_sparsifier_hint,
)
from ..boundary.types import ScalarType, TensorType, i32, i64
from ..codegen.checks import insert_assert_checks, insert_checks
from ..codegen.deallocations import insert_deallocations
from ..codegen.linalg_schedules import hoist_allocas_out_of_loops
from ..codegen.optimize import (
    LOOP_ANNOTATIONS_BEFORE,
    attach_loop_annotations,
    optimize,
    with_vector_lowering,
)
from ..codegen.options import CompileOptions
from ..codegen.parallel import parallel_hooks, with_parallel_loops
from ..codegen.readonly import read_only_parameters
from ..codegen.shapechecks import insert_shape_checks
from ..codegen.vectormath import use_vector_library
from ..errors import MLIRError, SignatureError
from ..lowering.deepinput import shallow
from ..lowering.packs import BUFFERIZATION, decompose_packs
from ..lowering.pipeline import lower as lower_module
from ..lowering.pipeline import (
    names_small_floats,
    new_context,
    normalize_pipeline,
    parse_module,
)
from .externs import LinkedExtern
from .microkernelcache import CompiledMicrokernel, split_off
from .runnerprint import print_callbacks, print_symbols_to_bind
from .runtimelibraries import external_declarations, needed_runtime_libraries
from .symbolnames import check_reserved_names, rename_definitions_named_like_c_functions

__all__ = ["CompileOptions", "PreparedModule", "builtin_callbacks", "lower",
           "prepare"]



@dataclass
class PreparedModule:
    """A parsed module ready to lower (:func:`lower` lowers ``module`` in place).

    ``signatures`` maps each public function to its signature and C-ABI entry name;
    ``linked`` each declaration linked to a callback (by name); ``registrations`` each
    runtime symbol the compiled code calls to its callback; ``declared`` lists every
    private declaration. ``uncallable`` maps each public function Python cannot call
    (its types cannot cross, or it has no C interface once lowered) to why: it stays
    in the module for the code that calls it. ``context`` owns ``module`` and must
    outlive it.
    """

    context: Any
    module: Any
    filename: str
    signatures: dict[str, tuple[Signature, str]]
    linked: dict[str, Callback]
    registrations: dict[str, Callback]
    declared: tuple[str, ...]
    uncallable: dict[str, str] = field(default_factory=dict)
    runtime_libs: tuple[str, ...] = ()
    source: str = ""  # the text's checks.source_id (messages of checks carry it)
    #: Runtime symbols defined by native code (:mod:`pymlirjit.runtime.externs`), by symbol.
    externs: dict[str, LinkedExtern] = field(default_factory=dict)
    #: Parsed from text :func:`~pymlirjit.lowering.deepinput.shallow` enough to lower on the
    #: caller's thread.
    shallow: bool = False
    #: The text names bf16: LLVM may call ``__truncsfbf2`` for it (see
    #: :data:`~pymlirjit.runtime.runtimelibraries.BF16_LIBRARY`).
    names_bf16: bool = False
    #: The text names f8, f6 or f4 types (see :func:`.names_small_floats`).
    small_floats: bool = False
    #: The matmul microkernels the lowered module declares, compiled apart, by symbol
    #: (:mod:`pymlirjit.runtime.microkernelcache`).
    microkernels: dict[str, CompiledMicrokernel] = field(default_factory=dict)

    def shared_libs(self, options: CompileOptions) -> tuple[str, ...]:
        """The libraries the code links: ``options``' and the runtime libraries the
        lowered module needs (:attr:`runtime_libs`)."""
        return options.shared_libs + tuple(
            lib for lib in self.runtime_libs if lib not in options.shared_libs)


#: The dialects loaded in a compile's context from the start: those whose ops pymlirjit
#: creates from Python while compiling (checks, optimize, vectormath), which would be
#: unregistered ops if created before their dialect loads. Parsing and passes load the
#: others as needed (loading every dialect would cost several ms per compile).
COMPILE_DIALECTS = ("builtin", "func", "arith", "math", "scf", "cf", "memref", "vector",
                    "llvm", "ub")


def prepare(text: str, options: CompileOptions,
            resolve: Callable[[str], Callback | LinkedExtern | None],
            filename: str = "<source>") -> PreparedModule:
    """Parse ``text`` and prepare it for ``options``; ``resolve(name)`` gives the callback
    a private declaration ``@name`` links to (``None``: left to shared libraries or the
    process). Raises :class:`MLIRError` for bad MLIR or reserved names and
    :class:`~pymlirjit.errors.SignatureError` if a callback disagrees with its
    declaration."""
    from mlir import ir

    del options  # nothing in the preparation depends on them yet (room for fastmath)
    context = new_context(COMPILE_DIALECTS)
    is_shallow = shallow(text)
    module = parse_module(text, context, filename, is_shallow)
    if "unrealized_conversion_cast" in text:  # as a generic kernel's binding makes them
        fold_identity_casts(module)
    check_reserved_names(module, filename)
    public_names = rename_definitions_named_like_c_functions(module)
    unit = ir.UnitAttr.get(context)
    signatures: dict[str, tuple[Signature, str]] = {}
    linked: dict[str, Callback] = {}
    registrations: dict[str, Callback] = {}
    declared: list[str] = []
    shims: list[str] = []
    uncallable: dict[str, str] = {}
    externs: dict[str, LinkedExtern] = {}
    with context, ir.Location.unknown():
        for op in list(module.body.operations):
            kind = op.operation.name
            if kind not in ("func.func", "llvm.func"):
                continue
            symbol_name = ir.StringAttr(op.attributes["sym_name"]).value
            name = public_names.get(symbol_name, symbol_name)  # the name Python knows
            is_declaration = len(op.regions[0].blocks) == 0
            if is_declaration:
                declared.append(name)
                cb = resolve(name)
                if cb is None:  # left to shared libraries or the process, as written:
                    continue    # its types are the linker's business, not Python's
                signature = _signature(op)
                if has_sparse(signature) and not isinstance(cb, LinkedExtern):
                    cb.signature.check_matches(signature, f"callback @{name}",
                                               "its Python annotations",
                                               "its MLIR declaration")
                    if boundary_abi(signature).needs_shim:
                        raise SignatureError(
                            f"callback @{name}: a callback taking sparse tensors cannot "
                            f"take or return i1, f16, bf16, f8 or complex values yet "
                            f"({signature})")
                    linked[name] = cb  # served flat, with scipy.sparse views
                    shims.append(sparse_callback_shim(symbol_name, signature))
                    registrations[ciface_symbol(sparse_callback_symbol(symbol_name))] = (
                        flat_callback(cb))
                    op.operation.erase()
                    continue
                if has_sparse(signature):
                    raise SignatureError(f"extern @{name}: sparse tensors cannot cross into "
                                         f"externs ({signature})")
                if isinstance(cb, LinkedExtern):
                    cb.signature.check_matches(signature, f"extern @{name}",
                                               f"its target ({cb.what or 'native code'})",
                                               "its MLIR declaration", annotated=False)
                else:
                    cb = at_declared_widths(cb, signature)  # int: i32 where declared so
                    cb.signature.check_matches(signature, f"callback @{name}",
                                               "its Python annotations",
                                               "its MLIR declaration")
                    linked[name] = cb
                registered: dict[str, Any] = (externs if isinstance(cb, LinkedExtern)
                                              else registrations)
                if kind == "llvm.func":  # called by its plain C symbol
                    if boundary_abi(signature).needs_shim:
                        raise SignatureError(
                            f"callback @{name}: an llvm.func declaration is called with "
                            f"the plain C ABI, which cannot pass {signature}; declare it "
                            f"with func.func instead")
                    registered[name] = cb
                    continue
                if boundary_abi(signature).needs_shim:
                    symbol = callback_shim_symbol(name)
                    shims.append(callback_shim(name, symbol, signature))
                    op.operation.erase()
                else:
                    symbol = name
                    op.attributes["llvm.emit_c_interface"] = unit
                registered[ciface_symbol(symbol)] = cb
            elif _is_public(op) and not name.startswith("_mlir_"):
                try:
                    signature = _signature(op)
                    abi = boundary_abi(signature)
                except (SignatureError, TypeError, ValueError) as exc:
                    # Not a reason to refuse the module: other code may call it.
                    uncallable[name] = f"@{name} cannot be called from Python: {exc}"
                    continue
                if kind == "llvm.func":
                    if abi.needs_shim or not _all_scalars(signature):
                        uncallable[name] = (
                            f"@{name} cannot be called from Python: an llvm.func is "
                            f"called with the plain C ABI, which cannot pass {signature}")
                    else:  # lower() gives it a C interface
                        signatures[name] = (signature, name)
                    continue
                if has_sparse(signature):  # called through a wrapper taking its buffers
                    entry, added = sparse_entry_shims(symbol_name, name, signature)
                    shims += added
                    signatures[name] = (signature, entry)
                    op.attributes["sym_visibility"] = ir.StringAttr.get("private")
                    continue
                op.attributes["llvm.emit_c_interface"] = unit
                _make_tensor_arguments_read_only(op, signature)
                signature = signature.with_read_only(read_only_parameters(op))
                entry = symbol_name
                if abi.needs_shim:
                    entry = entry_shim_symbol(name)
                    shims.append(kernel_shim(symbol_name, entry, signature))
                signatures[name] = (signature, entry)
        if shims:
            shim_module = parse_module("\n".join(shims), context, "<pymlirjit shims>")
            for op in list(shim_module.body.operations):
                shim_name = ir.StringAttr(op.attributes["sym_name"]).value
                if shim_name in signatures or shim_name in public_names:
                    # the kernel's declaration: defined already
                    continue
                op.operation.detach_from_parent()
                module.body.append(op)
    return PreparedModule(context, module, filename, signatures, linked, registrations,
                          tuple(declared), uncallable, source=source_id(text),
                          names_bf16="bf16" in text, small_floats=names_small_floats(text),
                          externs=externs, shallow=is_shallow)


#: The pass lowering a module with sparse tensors (``SPARSE_PIPELINE``), all at once.
SPARSIFIER = "sparsifier"
#: The first top-level pass after convert-vector-to-scf in the default pipeline.
VECTOR_BUFFERS_MADE_BEFORE = "lower-affine"


def lower(prepared: PreparedModule, options: CompileOptions) -> PreparedModule:
    """Lower ``prepared.module`` to the LLVM dialect with ``options.pipeline``, in place;
    returns ``prepared``."""
    tiled: list[bool] = []  # whether the schedules changed the module
    microkernels: dict[str, CompiledMicrokernel] = {}  # compiled once per process

    def optimize_first(module: Any, pipeline: str) -> str:
        # Shapes are checked before linalg ops are tiled, where checked mode runs after.
        # Only with the default pipeline: the checks' index ops need its lowering.
        if options.error_model != "numpy" and options.pipeline == normalize_pipeline(None):
            insert_shape_checks(module, prepared.filename)
        if not (options.fastmath or options.tiles_linalg or options.parallel_loops):
            return pipeline
        vectors = optimize(module, fastmath=options.fastmath, tile=options.tiles_linalg,
                           threads=options.threads, filename=prepared.filename,
                           parallel=options.parallel_loops, deferred_microkernels=True)
        tiled.append(vectors)
        if options.fastmath:  # math on vectors, and in loops LLVM vectorizes, by libmvec
            use_vector_library(module)
        if options.parallel_loops and "sparsifier" not in pipeline:  # its loops: serial
            pipeline = with_parallel_loops(pipeline, options.threads)
        if not vectors:
            return pipeline
        pipeline = with_vector_lowering(pipeline)
        # Defines the microkernels deferred (and not compiled before): microkernelcache.
        microkernels.update(split_off(module, options))
        return pipeline

    inserted: list[int] = []  # failure calls the checks added (pymlirjit.codegen.checks)

    def add_checks(module: Any) -> None:
        insert_deallocations(module)  # the buffers a function forgets
        # Calls unwind at a failure unless the module links shared libraries (the async
        # runtime of parallel loops, MLIR's APFloat runtime for f8 arithmetic included).
        unwinds = not (options.shared_libs or options.parallel_loops)
        inserted.append(insert_checks(
            module, boundscheck=options.boundscheck, filename=prepared.filename,
            source=prepared.source, error_model=options.error_model,
            unwinds=lambda: unwinds and not prepared.small_floats))

    def add_assert_checks(module: Any) -> None:
        # The sparsifier lowers in one pass: the shape checks become failures before it,
        # on tensors; where a failure cannot unwind the call, each also skips its op.
        inserted.append(insert_assert_checks(
            module, filename=prepared.filename, source=prepared.source,
            unwinds=not (options.shared_libs or prepared.small_floats)))

    hooks = parallel_hooks(options.threads) if options.parallel_loops else {}
    hooks[SPARSIFIER] = add_assert_checks
    # Checks go in before parallel loops are outlined as tasks (a failure then names the
    # kernel, not the outlined function), else where memref accesses and scf still exist.
    at = "async-parallel-for" if options.parallel_loops else "convert-scf-to-cf"
    hooks[at] = _in_order(add_checks, hooks.get(at))
    hooks[BUFFERIZATION] = _in_order(lambda module: decompose_packs(module, prepared.filename),
                                     hooks.get(BUFFERIZATION))
    if options.tiles_linalg:  # the microkernels' loops say how LLVM may transform them
        # The buffers convert-vector-to-scf makes for the schedules' masked transfers sit
        # in their loops: out of them, or every turn takes new stack (an f16 batch matmul
        # of 32x256x256 overflowed 8 MB on CPUs without AVX512-FP16).
        hooks[VECTOR_BUFFERS_MADE_BEFORE] = _in_order(
            hooks.get(VECTOR_BUFFERS_MADE_BEFORE),
            lambda module: any(tiled) and hoist_allocas_out_of_loops(module))
        hooks[LOOP_ANNOTATIONS_BEFORE] = _in_order(
            lambda module: any(tiled) and attach_loop_annotations(module),
            hooks.get(LOOP_ANNOTATIONS_BEFORE))

    def keep(name: str) -> bool:  # a declaration linked to Python or native code
        return name in prepared.registrations or name in prepared.externs

    try:
        lower_module(prepared.module, options.pipeline, prepared.filename, optimize_first,
                     hooks, keep, prepared.shallow)
    except MLIRError as exc:
        raise with_sparsifier_hint(exc) from None
    if any(inserted):  # they record failures through a built-in callback
        prepared.linked[FAIL_SYMBOL] = prepared.registrations[ciface_symbol(FAIL_SYMBOL)] = (
            builtin_callbacks()[FAIL_SYMBOL])
    prepared.microkernels = microkernels
    _add_c_interfaces(prepared)
    prepared.runtime_libs = needed_runtime_libraries(prepared.module, prepared.names_bf16)
    printers = print_callbacks()  # printF64, vector.print's calls: through sys.stdout
    for symbol in print_symbols_to_bind(external_declarations(prepared.module),
                                        (*prepared.registrations, *prepared.externs),
                                        options.shared_libs):
        cb = printers[symbol]
        prepared.linked[cb.name] = prepared.registrations[symbol] = cb
    return prepared


def _in_order(*hooks: Callable[[Any], object] | None) -> Callable[[Any], None]:
    """One pipeline hook running ``hooks`` (those not ``None``) in order."""
    def run(module: Any) -> None:
        for hook in hooks:
            if hook is not None:
                hook(module)
    return run


@functools.cache
def builtin_callbacks() -> dict[str, Callback]:
    """The callbacks a lowered module may link without declaring them, by name: the one
    checked code calls to raise (see :mod:`pymlirjit.codegen.checks`) and MLIR's print
    utilities through ``sys.stdout`` (see :mod:`pymlirjit.runtime.runnerprint`)."""
    # Its signature built from types, not parsed: parsing needs an MLIR context (~10 ms),
    # which a module loaded from the disk cache otherwise never makes.
    signature = Signature.of([i32, i64, i64, i64, i64], [])
    printers = {cb.name: cb for cb in print_callbacks().values()}
    return {FAIL_SYMBOL: Callback(raise_failure, signature, name=FAIL_SYMBOL), **printers}


def _is_public(op: Any) -> bool:
    from mlir import ir

    attributes = op.attributes
    if ("sym_visibility" in attributes
            and ir.StringAttr(attributes["sym_visibility"]).value == "private"):
        return False
    linkage = str(attributes["linkage"]) if "linkage" in attributes else ""
    return not any(word in linkage for word in ("internal", "private"))


_LLVM_FUNCTION_TYPE = re.compile(r"^!llvm\.func<(?P<result>.+?) \((?P<params>.*)\)>$")


def _signature(op: Any) -> Signature:
    """The signature of a ``func.func`` or an ``llvm.func``; SignatureError naming the
    type that cannot cross the Python boundary."""
    from mlir import ir

    if op.operation.name == "func.func":
        return from_func_op(op)
    name = ir.StringAttr(op.attributes["sym_name"]).value
    text = str(ir.TypeAttr(op.attributes["function_type"]).value)
    match = _LLVM_FUNCTION_TYPE.match(text)
    if match is None or "..." in match["params"]:
        raise SignatureError(f"@{name}: {text} (variadic) cannot cross the Python boundary")
    result = "" if match["result"] == "void" else match["result"]
    try:
        return as_signature(f"({match['params']}) -> ({result})")
    except SignatureError:
        raise SignatureError(f"@{name}: {text} cannot cross the Python boundary (an "
                             f"llvm.func is called by the plain C ABI: scalars only)"
                             ) from None


def _all_scalars(signature: Signature) -> bool:
    return all(isinstance(t, ScalarType)
               for t in (*signature.param_types, *signature.results))


def _add_c_interfaces(prepared: PreparedModule) -> None:
    """Give each entry without a C interface after lowering (an ``llvm.func`` given as
    such, or a function of a bare-pointer pipeline) one where its types are scalars,
    which the plain C ABI passes alike; the others become uncallable from Python."""
    from mlir import ir

    defined = set()
    for op in prepared.module.body.operations:
        if op.operation.name == "llvm.func" and len(op.regions[0].blocks) > 0:
            defined.add(ir.StringAttr(op.attributes["sym_name"]).value)
    wrappers: list[str] = []
    for name, (signature, entry) in list(prepared.signatures.items()):
        if ciface_symbol(entry) in defined:
            continue
        if entry in defined and _all_scalars(signature) and len(signature.results) <= 1:
            wrappers.extend(c_interface_wrapper(entry, signature))
            continue
        del prepared.signatures[name]
        prepared.uncallable[name] = (
            f"@{name} cannot be called from Python: the pipeline gave it no C interface "
            f"(@{ciface_symbol(entry)}), as with the bare-pointer memref calling "
            f"convention, and the plain C ABI cannot pass {signature}")
    if wrappers:
        extra = parse_module("\n".join(wrappers), prepared.context, "<pymlirjit shims>")
        with prepared.context:
            for op in list(extra.body.operations):
                if not ir.StringAttr(op.attributes["sym_name"]).value.startswith(
                        CIFACE_PREFIX):
                    continue  # the entry's declaration, there for the verifier
                op.operation.detach_from_parent()
                prepared.module.body.append(op)




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
