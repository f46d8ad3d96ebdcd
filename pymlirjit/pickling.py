"""Pickling kernels, callbacks and sessions for process pools and clusters (see
docs/distributed.md): the documented import path of what users touch in
:mod:`pymlirjit.boundary.pickling`, where the mechanism is defined.

``KEPT`` objects unpickled by value stay alive in a receiving process (so that sending the
same kernel again costs a lookup); :func:`forget_unpickled` lets go of them. ``KEPT`` read
or set here is the mechanism's own (``pymlirjit.pickling.KEPT = 16`` takes effect).
"""

import sys
import types

from .boundary import pickling as _mechanism
from .boundary.pickling import by_value, forget_unpickled

# KEPT is a property of the module's class below, not a name of the module.
__all__ = ["KEPT", "by_value", "forget_unpickled"]  # noqa: F822


class _PicklingModule(types.ModuleType):
    """This module, with ``KEPT`` forwarded to the mechanism's (a plain re-export would
    be a copy: setting it here would change nothing)."""

    @property
    def KEPT(self) -> int:
        return _mechanism.KEPT

    @KEPT.setter
    def KEPT(self, value: int) -> None:
        _mechanism.KEPT = value


sys.modules[__name__].__class__ = _PicklingModule
