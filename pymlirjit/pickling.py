"""Pickling kernels, callbacks and sessions for process pools and clusters (see
docs/distributed.md): the documented import path of what users touch in
:mod:`pymlirjit.boundary.pickling`, where the mechanism is defined.

``KEPT`` objects unpickled by value stay alive in a receiving process (so that sending the
same kernel again costs a lookup); :func:`forget_unpickled` lets go of them.
"""

from .boundary.pickling import KEPT, by_value, forget_unpickled

__all__ = ["KEPT", "by_value", "forget_unpickled"]
