"""Host object code for generated functions whose loops are already scheduled (the
matmul microkernels), made with llvmlite through a short LLVM pipeline.

MLIR's engine runs LLVM's whole default pipeline at its opt level: on a microkernel, ~60
of the ~85 ms its code cost there (75 of ~120 through llvmlite; Intel Xeon), to unroll,
vectorize and hoist what the schedules have already blocked and vectorized, with
unrolling and vectorization turned off on its loops anyway. Here the module is
translated to LLVM IR by MLIR, cleaned up by :data:`PASSES` (~20 ms), and compiled for
the host as the JIT would (its CPU and features, JIT code model and relocations, code
generation at the opt level): the same inner loops. llvmlite links the LLVM version
MLIR's bindings do (22).

Every call into LLVM here goes through llvmlite, which releases the GIL around each one
(holding its own lock): another thread's Python and MLIR work goes on meanwhile.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import MLIRError
from ..lowering.checks import check_lowered
from ..lowering.pipeline import check_opt_level

__all__ = ["MLIR_LLVM", "PASSES", "clean_up", "host_machine", "llvm_binding", "object_code",
           "translate_module"]

#: The major version of the LLVM that MLIR's bindings link (the pinned
#: xtc-mlir-python-bindings), whose IR llvmlite's LLVM must read.
MLIR_LLVM = 22

#: The LLVM passes run on the translated IR (llvmlite's names, without ``add_`` and
#: ``_pass``): promote what the translation left in memory, fold the descriptors'
#: address arithmetic, merge the blocks the lowering split, then rotate the loops and
#: number the values they repeat. Without the last two, matmuls took up to 1.06x the
#: time of the same microkernel through the default pipeline; with them, 0.95-1.04x
#: (median 1.01x; Intel Xeon, f32 and f64, 20 shapes from 64^3 to 2048^3), for ~6 ms
#: more. Without instcombine: up to 1.64x.
PASSES: tuple[str, ...] = ("sroa", "instruction_combine", "simplify_cfg", "loop_rotate",
                           "new_gvn")


def translate_module(module: Any, filename: str = "<microkernel>",
                     what: str = "a microkernel") -> str:
    """The LLVM IR that MLIR translates ``module`` (in the LLVM dialect; ``what``, from
    ``filename``, in the errors) to; an op of another dialect is an :class:`MLIRError`."""
    from mlir.dialects.llvm import translate_module_to_llvmir

    check_lowered(module, filename)  # MLIR's translation crashes on other ops
    try:
        return str(translate_module_to_llvmir(module.operation))
    except Exception as exc:  # the bindings raise their own types, or RuntimeError
        raise MLIRError(f"cannot translate {what} to LLVM IR: {exc}") from exc


def object_code(ir_text: str, opt_level: int = 2) -> bytes:
    """The host object code of the LLVM IR ``ir_text`` (:func:`translate_module`), cleaned
    up by :data:`PASSES` (none at ``opt_level`` 0) and generated at ``opt_level``, for the
    JIT's code model (loadable by :class:`~pymlirjit.runtime.objectfile.ObjectEngine`,
    linkable into a module's library). Safe on any thread."""
    level = check_opt_level(opt_level)
    llvm = llvm_binding()
    if llvm.llvm_version_info[0] < MLIR_LLVM:  # it cannot read what a later LLVM wrote
        import llvmlite

        raise MLIRError(f"llvmlite {llvmlite.__version__} links LLVM "
                        f"{'.'.join(map(str, llvm.llvm_version_info))}, older than MLIR's "
                        f"({MLIR_LLVM}): install llvmlite>=0.50")
    # A context and a target machine of its own: LLVM's are not thread-safe.
    context = llvm.create_context()
    machine = host_machine(level, jit=True)
    try:
        translated = llvm.parse_assembly(ir_text, context=context)
    except RuntimeError as exc:  # llvmlite's, with LLVM's message
        raise MLIRError(f"LLVM cannot read a microkernel's IR: {exc}") from exc
    translated.triple = machine.triple
    translated.data_layout = str(machine.target_data)
    clean_up(translated, machine, level)
    code: bytes = machine.emit_object(translated)
    translated.close()
    machine.close()
    return code


def clean_up(module: Any, machine: Any, opt_level: int) -> None:
    """Run :data:`PASSES` on ``module`` (llvmlite's, for ``machine``), in place; none at
    ``opt_level`` 0."""
    if not opt_level:
        return
    llvm = llvm_binding()
    builder = llvm.create_pass_builder(
        machine, llvm.create_pipeline_tuning_options(speed_level=opt_level))
    passes = llvm.create_new_module_pass_manager()
    for name in PASSES:
        getattr(passes, f"add_{name}_pass")()
    passes.run(module, builder)
    passes.close()
    builder.close()


def host_machine(opt_level: int, jit: bool) -> Any:
    """The host's target machine (its CPU and features) at ``opt_level``: with the JIT's
    code model and relocations (``jit``: code to load and run), or the default code
    model (code to show). One per use: LLVM's are not thread-safe."""
    llvm = llvm_binding()
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if jit:
        return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                            jit=True)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                        codemodel="default")


@functools.cache
def llvm_binding() -> Any:
    """``llvmlite.binding``, its native target and assembly printer initialized (LLVM
    loads only when code is compiled or shown)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm
