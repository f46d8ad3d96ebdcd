"""Compile options in one place: :class:`CompileOptions` (how a module is compiled, checked
and frozen) and :class:`OptionOverrides` (what a kernel or a call sets, the rest left to
its session).

Every option lives here once: a session's defaults, a kernel's overrides, a compile call's
keywords, the cache key and a kernel pickled by value all go through these two classes,
so an option added here reaches each of them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..lowering.pipeline import check_opt_level, normalize_pipeline, runtime_library
from .checks import ERROR_MODELS
from .parallel import thread_count
from .vectormath import cache_tag as vector_library_tag

__all__ = ["FLAGS", "NO_OVERRIDES", "TILING_OPT_LEVEL", "CompileOptions", "OptionOverrides",
           "listed_option"]

#: The boolean options, by name: each changes the code made, so each is in the cache key.
FLAGS = ("fastmath", "parallel", "boundscheck")

#: The lowest ``opt_level`` at which linalg ops are tiled and vectorized
#: (:attr:`CompileOptions.tiles_linalg`): the default level is fast; ``opt_level=1`` or
#: ``0`` lowers them naively (loops), which compiles faster and runs far slower.
TILING_OPT_LEVEL = 2


@dataclass(frozen=True)
class OptionOverrides:
    """The compile options a kernel (or one compile call) sets; ``None`` leaves an option
    to the session. Unchecked until :meth:`CompileOptions.overridden` applies them."""

    pipeline: str | Sequence[str] | None = None
    opt_level: int | None = None
    shared_libs: tuple[str, ...] | None = None
    #: Fast-math flags on float ops (numba's ``fastmath=True``).
    fastmath: bool | None = None
    #: Loops on several threads (numba's ``parallel=True``).
    parallel: bool | None = None
    #: Out-of-bounds memref accesses raise IndexError (numba's ``boundscheck=True``).
    boundscheck: bool | None = None
    #: What an integer division by zero does (numba's ``error_model``): ``"python"``
    #: raises ZeroDivisionError, ``"numpy"`` gives 0 and raises the CPU's flag.
    error_model: str | None = None

    @classmethod
    def of(cls, pipeline: str | Sequence[str] | None = None, opt_level: int | None = None,
           shared_libs: Iterable[str] | None = None, fastmath: bool | None = None,
           parallel: bool | None = None, boundscheck: bool | None = None,
           error_model: str | None = None) -> OptionOverrides:
        """Overrides from the keywords of ``mlir_kernel`` and ``Session.compile``; with
        none given, :data:`NO_OVERRIDES` (most kernels and compile calls: one shared)."""
        if (pipeline is None and opt_level is None and shared_libs is None and fastmath is None
                and parallel is None and boundscheck is None and error_model is None):
            return NO_OVERRIDES
        if pipeline is not None and not isinstance(pipeline, str):
            # a list given: kept as a value, like the rest
            pipeline = listed_option("pipeline", pipeline, "a pass pipeline string or a list "
                                     "of pass names", str)
        if shared_libs is not None:
            shared_libs = listed_option("shared_libs", shared_libs, "a list of libraries "
                                        "(paths, or MLIR runtime library names)",
                                        (str, os.PathLike))
        return cls(pipeline, opt_level, shared_libs, fastmath, parallel, boundscheck,
                   error_model)

    def given(self) -> dict[str, Any]:
        """The options set (not ``None``), by name."""
        # The instance's fields are its __dict__ (no slots): read once per unpickled kernel.
        return {name: value for name, value in vars(self).items() if value is not None}


#: The overrides of a kernel or compile call that sets no option (frozen: shared).
NO_OVERRIDES = OptionOverrides()


@dataclass(frozen=True)
class CompileOptions:
    """How a module is compiled: the pass ``pipeline`` (normalized), ``opt_level``, the
    ``shared_libs`` its code may call (resolved paths) and the :data:`FLAGS`. Immutable:
    with the source and the explicit callbacks, it is a session's in-memory cache key,
    and the input of the disk cache's key."""

    pipeline: str
    opt_level: int
    shared_libs: tuple[str, ...]
    #: Fast-math flags on float ops (numba's ``fastmath=True``).
    fastmath: bool = False
    #: Loops run on several threads (numba's ``parallel=True``; see
    #: :func:`pymlirjit.codegen.parallel.with_parallel_loops`).
    parallel: bool = False
    #: Out-of-bounds memref accesses raise IndexError (numba's ``boundscheck=True``).
    boundscheck: bool = False
    #: What an integer division by zero does: see :data:`pymlirjit.codegen.checks.ERROR_MODELS`.
    error_model: str = "python"
    #: How many threads a parallel loop is split for (``PYMLIRJIT_NUM_THREADS``, read by
    #: :meth:`resolved` when a parallel module compiles; 0 until then).
    threads: int = 0

    @classmethod
    def make(cls, pipeline: str | Sequence[str] | None = None, opt_level: int = 2,
             shared_libs: Iterable[str] = (), fastmath: bool = False,
             parallel: bool = False, boundscheck: bool = False,
             error_model: str = "python") -> CompileOptions:
        """Options from any accepted spelling, checked (``pipeline=None``: the default
        pipeline; libraries by path or by runtime library name)."""
        if (pipeline is None and opt_level == 2 and shared_libs == () and not fastmath
                and not parallel and not boundscheck and error_model == "python"):
            return _defaults()  # the common case (every Session()), made once
        return _defaults().overridden(OptionOverrides.of(
            pipeline, opt_level, shared_libs, fastmath=fastmath, parallel=parallel,
            boundscheck=boundscheck, error_model=error_model))

    def replace(self, pipeline: str | Sequence[str] | None = None,
                opt_level: int | None = None, shared_libs: Iterable[str] | None = None,
                fastmath: bool | None = None, parallel: bool | None = None,
                boundscheck: bool | None = None,
                error_model: str | None = None) -> CompileOptions:
        """These options with those given (not ``None``) instead, checked."""
        return self.overridden(OptionOverrides.of(
            pipeline, opt_level, shared_libs, fastmath=fastmath, parallel=parallel,
            boundscheck=boundscheck, error_model=error_model))

    def overridden(self, overrides: OptionOverrides) -> CompileOptions:
        """These options with ``overrides`` applied, checked."""
        if overrides is NO_OVERRIDES:  # a cache hit's common case: nothing to check
            return self
        # What equals its current value (same type: 1 is not True) needs no check; this
        # makes a Session() (and one unpickled) cheap.
        given = {name: value for name, value in overrides.given().items()
                 if not (type(value) is type(getattr(self, name)) and value == getattr(self, name))}
        if not given:
            return self
        if "pipeline" in given:
            given["pipeline"] = normalize_pipeline(given["pipeline"])
        if "opt_level" in given:
            given["opt_level"] = check_opt_level(given["opt_level"])
        if "shared_libs" in given:
            given["shared_libs"] = tuple(runtime_library(str(p)) for p in given["shared_libs"])
        for name in FLAGS:
            if name in given and not isinstance(given[name], bool):
                raise TypeError(f"{name} must be True or False, got {given[name]!r}")
        if given.get("error_model", "python") not in ERROR_MODELS:
            raise ValueError(f"error_model must be one of {', '.join(map(repr, ERROR_MODELS))}, "
                             f"got {given['error_model']!r}")
        return dataclasses.replace(self, **given)

    def resolved(self) -> CompileOptions:
        """These options with :attr:`threads` from ``PYMLIRJIT_NUM_THREADS`` if parallel."""
        if not self.parallel and not self.threads:
            return self
        return dataclasses.replace(self, threads=thread_count() if self.parallel else 0)

    @property
    def pipeline_key(self) -> str:
        """The pipeline with the flags that change the code it makes (a cache key)."""
        # Once only opt_level=3 tiled linalg: an entry stored then is not this code.
        flags = " +linalg-schedules" if self.tiles_linalg else ""
        flags += "".join(f" +{name}" for name in FLAGS if getattr(self, name))
        if self.error_model != "python":
            flags += f" +{self.error_model}-errors"
        return (self.pipeline + flags + (f"={self.threads}" if self.parallel else "")
                + (vector_library_tag() if self.fastmath else ""))

    @property
    def tiles_linalg(self) -> bool:
        """Whether the linalg ops of a module get the microkernels and schedules of
        :mod:`pymlirjit.codegen.optimize`: at ``opt_level`` :data:`TILING_OPT_LEVEL` and
        above (the default, 2, included) with the default pipeline (a pipeline given by
        the user is run as written), unless ``boundscheck``: checked mode runs linalg as
        plain loops, whose every access it checks (the microkernels' masked loads and
        stores it cannot). A module without linalg ops compiles as it would without
        (decided once it is parsed)."""
        return (self.opt_level >= TILING_OPT_LEVEL and not self.boundscheck
                and self.pipeline == normalize_pipeline(None))

    @property
    def parallel_loops(self) -> bool:
        """``parallel=True``, more than one thread and the default pipeline (not a user's)."""
        return (self.parallel and self.threads > 1
                and self.pipeline == normalize_pipeline(None))


def listed_option(name: str, value: Any, what: str,
                  item: type | tuple[type, ...]) -> tuple[Any, ...]:
    """``value``, a collection of ``item``, as a tuple; else ``TypeError`` naming ``name``
    (one string or path is not a list: iterating it would give its characters)."""
    if isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, Iterable):
        hint = f"; pass [{value!r}]" if isinstance(value, (str, os.PathLike)) else ""
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}{hint}")
    items = tuple(value)
    for entry in items:
        if not isinstance(entry, item):
            raise TypeError(f"{name} must be {what}, got an item {entry!r} of type "
                            f"{type(entry).__name__}")
    return items


@functools.cache
def _defaults() -> CompileOptions:
    return CompileOptions(normalize_pipeline(None), 2, ())
