"""The command line's values: ARGs parsed by the entry's MLIR signature (scalars from
text, memrefs and tensors from ``.npy`` files, sparse tensors from scipy's ``.npz``
files), and results formatted and saved.

It also defines :class:`CLIError`, the failure every part of the command line reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["CLIError", "check_outputs", "format_result", "parse_argument", "parse_arguments",
           "save_outputs", "split_results"]


class CLIError(Exception):
    """A failure the command line reports as its one-line error message."""


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _parse_number(text: str, scalar: Any) -> Any:
    kind = scalar.kind
    if kind == "bool":
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(text)
    if kind == "int":
        try:
            return int(text, 0)  # also 0x1f, 0b101
        except ValueError:
            return int(text)  # leading zeros: "007"
    if kind == "float":
        return float(text)
    return complex(text.replace(" ", ""))


def _load_array(text: str, what: str) -> Any:
    import numpy as np

    try:
        return np.load(text, allow_pickle=False)
    except OSError as exc:
        raise CLIError(f"{what}: cannot read array file {text}: "
                       f"{exc.strerror or exc}") from exc
    except ValueError as exc:
        detail = "" if "pickle" in str(exc) else f": {exc}"
        raise CLIError(f"{what}: {text} is not a .npy file of numbers{detail}") from exc


def _load_sparse(text: str, what: str) -> Any:
    import scipy.sparse

    try:
        return scipy.sparse.load_npz(text)
    except OSError as exc:
        raise CLIError(f"{what}: cannot read sparse array file {text}: "
                       f"{exc.strerror or exc}") from exc
    # A .npy file loads as an array, which scipy then uses as a context manager: TypeError
    # on Python 3.11+, AttributeError on 3.10.
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CLIError(f"{what}: {text} is not a scipy.sparse .npz file "
                       f"(scipy.sparse.save_npz writes one)") from exc


def parse_argument(text: str, param: Any, position: int) -> Any:
    """The value of command-line argument ``text`` for ``param`` (a signature
    :class:`~pymlirjit.Parameter`; ``position`` counts from 1): a Python scalar for a
    scalar type, the array loaded from a ``.npy`` file for a memref or tensor, the
    scipy.sparse array of a ``.npz`` file for a sparse tensor."""
    from ..boundary.types import ScalarType, SparseTensorType, to_python_scalar

    what = f"argument {position} ({param.type.mlir})"
    if isinstance(param.type, SparseTensorType):
        return _load_sparse(text, what)
    if not isinstance(param.type, ScalarType):
        return _load_array(text, what)
    try:
        value = _parse_number(text, param.type)
    except ValueError:
        raise CLIError(f"{what}: cannot parse {text!r} as {param.type.mlir}") from None
    try:
        return to_python_scalar(param.type, value, what)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from exc


def parse_arguments(texts: Sequence[str], function: Any) -> list[Any]:
    """The Python values of ``texts`` for the compiled ``function``'s parameters."""
    params = function.signature.params
    if len(texts) != len(params):
        expected = ", ".join(p.type.mlir for p in params) or "none"
        raise CLIError(f"@{function.name} takes {len(params)} argument"
                       f"{'' if len(params) == 1 else 's'} ({expected}), got {len(texts)}")
    return [parse_argument(text, param, i)
            for i, (text, param) in enumerate(zip(texts, params), start=1)]


def format_result(value: Any, mlir_type: Any = None) -> str:
    """How the command prints one result: numpy's printing for arrays, plain ``repr``
    for scalars (f32/f16 and complex<f32> at their own precision)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return str(value)
    if type(value).__module__.startswith("scipy.sparse"):  # a sparse result
        return f"{value!r}\n{value}"
    narrow = {"f32": np.float32, "f16": np.float16, "complex<f32>": np.complex64}
    to_numpy = narrow.get(getattr(mlir_type, "mlir", ""))
    if to_numpy is not None:
        return str(to_numpy(value))
    return repr(value)


def split_results(value: Any, count: int) -> tuple[Any, ...]:
    """The results of a call returning ``count`` values, as a tuple."""
    if count == 0:
        return ()
    return value if count > 1 else (value,)


def check_outputs(paths: Sequence[str], function: Any) -> None:
    """Before running: fail if ``--output`` names more files than there are array results."""
    from ..boundary.types import ScalarType

    arrays = sum(not isinstance(t, ScalarType) for t in function.signature.results)
    if len(paths) > arrays:
        raise CLIError(f"--output given {len(paths)} time{'s' if len(paths) > 1 else ''}, "
                       f"but @{function.name} returns {arrays} array"
                       f"{'' if arrays == 1 else 's'}")


def save_outputs(paths: Sequence[str], results: Sequence[Any]) -> None:
    """Save the array results, in order, to the ``--output`` paths."""
    import numpy as np

    arrays = [r for r in results
              if isinstance(r, np.ndarray) or type(r).__module__.startswith("scipy.sparse")]
    for path, array in zip(paths, arrays):
        with open(path, "wb") as file:  # np.save(path) would add .npy to any other name
            if isinstance(array, np.ndarray):
                np.save(file, array)
            else:  # a sparse result: scipy's .npz
                import scipy.sparse

                scipy.sparse.save_npz(file, array)
