"""The types that cross the Python/MLIR boundary (``f32``, ``MemRef[...]``, ``to_type``...).

The documented import path of :mod:`pymlirjit.boundary.types`, where they are defined.

>>> from pymlirjit.types import MemRef, f32, to_type
>>> to_type("memref<?xf32>") == MemRef[f32, None]
True
"""

from .boundary.types import *  # noqa: F403
from .boundary.types import __all__ as __all__
