"""The ``pymlirjit`` command: ``run`` an MLIR file as mlir-runner does, ``check`` a Python
file's kernels, the ``demo``. Others use :func:`main` (``pymlirjit.cli.main(argv)`` runs a
command in-process and returns its exit code); the modules are the command's own.
"""

from .commands import main

__all__ = ["main"]
