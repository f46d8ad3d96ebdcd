"""The package version, and the versions of everything else that decides a module's
machine code, on the ground floor: the cache key and the CLI read them without importing
the package root (which would close an import cycle through the session)."""

from __future__ import annotations

import functools
import platform
import sys
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def build_environment() -> tuple[str, ...]:
    """What, besides the module, decides its machine code (read cheaply: a warm start
    must not pay for importlib.metadata or for loading LLVM)."""
    import llvmlite  # its version only; llvmlite.binding (LLVM itself) is not loaded
    import numpy as np

    return (f"pymlirjit={__version__}", f"mlir={_mlir_build()}",
            f"llvmlite={llvmlite.__version__}", f"python={sys.version}",
            f"numpy={np.__version__}", f"machine={platform.machine()}",
            f"cpu={_host_cpu()}")


def _mlir_build() -> str:
    """The installed MLIR bindings: their distribution's version (from its dist-info
    folder's name) and the size and time of their C API library."""
    import mlir._mlir_libs as libs

    folder = Path(libs.__file__).parent
    versions = sorted(p.name for p in folder.parent.parent.glob("xtc_mlir_python_bindings-*"))
    library = folder / "libMLIRPythonCAPI.so"
    try:
        stat = library.stat()
        identity = f"{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        identity = "unknown"
    return f"{','.join(versions)}|{identity}"


def _host_cpu() -> str:
    """The host CPU's model and features (what MLIR's engine generates code for)."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().split("\n\n", 1)[0].splitlines()
        fields = {k.strip(): v.strip() for k, v in
                  (line.split(":", 1) for line in lines if ":" in line)}
        model = fields.get("model name") or fields.get("CPU part", "")
        features = (fields.get("flags") or fields.get("Features") or "").split()
        if features:
            return f"{model}|{' '.join(sorted(features))}"
    except OSError:
        pass
    import llvmlite.binding as llvm  # elsewhere: ask LLVM

    return f"{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"
