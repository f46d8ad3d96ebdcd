"""pymlirjit: a numba-style JIT decorator framework over MLIR.

``@callback`` makes a type-annotated Python function callable from JIT-compiled MLIR;
``@mlir_kernel`` makes an MLIR function callable from Python with scalars and numpy
arrays; :class:`Session` compiles, links and caches; :class:`ExecutionEngine` is MLIR's
own engine without its traps.
"""

# Importing .engine loads the MLIR bindings at once, on purpose: one of MLIR's runtime
# libraries (which link libLLVM.so) loaded before them makes the first context abort.
from typing import TYPE_CHECKING

from ._version import __version__
from .boundary.signature import Parameter, Signature
from .callbacks import Callback, CallbackRegistry, callback
from .errors import (
    Diagnostic,
    EngineCreationError,
    LinkError,
    MLIRError,
    PyMLIRJitError,
    SignatureError,
)
from .jit import jit, prange
from .kernel import Kernel, mlir_kernel
from .lowering.pipeline import DEFAULT_PIPELINE
from .runtime.engine import ExecutionEngine
from .runtime.externs import Extern, extern
from .runtime.function import CompiledFunction
from .session import CompiledModule, Session, default_session, runtime_library
from .ufunc import mlir_gufunc, mlir_ufunc

if TYPE_CHECKING:  # type checkers read the names as annotations (see pymlirjit.typing)
    from .typing import (
        MemRef,
        Tensor,
        UnrankedMemRef,
        bf16,
        complex64,
        complex128,
        f8E4M3FN,
        f8E5M2,
        f16,
        f32,
        f64,
        i1,
        i8,
        i16,
        i32,
        i64,
        index,
        ptr,
    )
else:
    from .boundary.types import (
        MemRef,
        Tensor,
        UnrankedMemRef,
        bf16,
        complex64,
        complex128,
        f8E4M3FN,
        f8E5M2,
        f16,
        f32,
        f64,
        i1,
        i8,
        i16,
        i32,
        i64,
        index,
        ptr,
    )

__all__ = [
    "DEFAULT_PIPELINE",
    "Callback",
    "CallbackRegistry",
    "CompiledFunction",
    "CompiledModule",
    "Diagnostic",
    "EngineCreationError",
    "ExecutionEngine",
    "Extern",
    "Kernel",
    "LinkError",
    "MLIRError",
    "MemRef",
    "Parameter",
    "PyMLIRJitError",
    "Session",
    "Signature",
    "SignatureError",
    "Tensor",
    "UnrankedMemRef",
    "__version__",
    "bf16",
    "callback",
    "complex64",
    "complex128",
    "default_session",
    "extern",
    "f8E4M3FN",
    "f8E5M2",
    "f16",
    "f32",
    "f64",
    "i1",
    "i8",
    "i16",
    "i32",
    "i64",
    "index",
    "jit",
    "mlir_gufunc",
    "mlir_kernel",
    "mlir_ufunc",
    "prange",
    "ptr",
    "runtime_library",
]
