"""The command line's values: ARGs parsed by MLIR type, results printed at their precision."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit.boundary.signature import Parameter
from pymlirjit.boundary.types import f32, i1, i32, i64, index
from pymlirjit.cli import values as cli_values


@pytest.mark.parametrize("text, mlir_type, expected", [
    ("42", i32, 42), ("-7", i64, -7), ("0x1f", index, 31), ("007", i32, 7),
    ("2.5", f32, 2.5), ("-inf", f32, float("-inf")), ("1e3", f32, 1000.0),
    ("true", i1, True), ("0", i1, False), ("No", i1, False),
])
def test_parse_argument(text: str, mlir_type: object, expected: object) -> None:
    assert cli_values.parse_argument(text, Parameter("arg0", mlir_type), 1) == expected


def test_parse_argument_rejects_bad_text() -> None:
    message = r"argument 3 \(i1\): cannot parse 'maybe' as i1"
    with pytest.raises(cli_values.CLIError, match=message):
        cli_values.parse_argument("maybe", Parameter("arg2", i1), 3)


def test_format_result() -> None:
    assert cli_values.format_result(0.1, f32) == "0.1"  # f32 at its own precision
    assert cli_values.format_result(0.1) == "0.1"
    assert cli_values.format_result(True, i1) == "True"
    assert cli_values.format_result(np.arange(3)) == "[0 1 2]"


def test_split_results_by_count() -> None:
    assert cli_values.split_results(None, 0) == ()
    assert cli_values.split_results((1, 2), 1) == ((1, 2),)  # one result that is a tuple
    assert cli_values.split_results((1, 2), 2) == (1, 2)
