"""A kernel's stub checked against its MLIR function: the stub's parameter count, and its
annotations where present (parameters and results), each error naming the kernel, the
parameter or result, and the MLIR signature."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_args, get_origin

from .boundary.signature import Signature, annotations_of, argument_label, check_annotation
from .errors import SignatureError

__all__ = ["check_stub"]


def check_stub(stub: Callable[..., Any], signature: Signature, name: str) -> None:
    """Check the stub's annotations, where present, against the MLIR signature."""
    try:
        hints = annotations_of(stub)
    except Exception as exc:
        raise SignatureError(f"@mlir_kernel {name!r}: cannot evaluate the stub's "
                             f"annotations: {exc}") from exc
    params = list(inspect.signature(stub).parameters)
    if len(params) != len(signature.params):
        raise SignatureError(f"@mlir_kernel {name!r}: the stub takes {len(params)} parameters, "
                             f"@{name} in MLIR takes {len(signature.params)} "
                             f"({signature.mlir})")
    for i, (param, actual) in enumerate(zip(params, signature.param_types)):
        if param in hints:
            check_annotation(hints[param], actual,
                             f"@mlir_kernel {name!r}: {argument_label(i, param)}",
                             f"@{name} is {signature.mlir}")
    if "return" in hints:
        annotation = hints["return"]
        if annotation is None or annotation is type(None):
            expected: tuple[Any, ...] = ()
        elif get_origin(annotation) is tuple:
            expected = get_args(annotation)
        else:
            expected = (annotation,)
        if len(expected) != len(signature.results):
            raise SignatureError(f"@mlir_kernel {name!r}: the stub returns {len(expected)} "
                                 f"values, @{name} in MLIR returns {len(signature.results)} "
                                 f"({signature.mlir})")
        for i, (want, got) in enumerate(zip(expected, signature.results)):
            check_annotation(want, got, f"@mlir_kernel {name!r}: result #{i}",
                             f"@{name} is {signature.mlir}")
