"""Names of the process-specific values native code refers to."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit.boundary.relocation import (
    _OBJECTS,
    array_from_descr,
    callback_slot,
    dtype_slot,
    name_of,
    well_known,
)
from pymlirjit.boundary.types import SCALARS


@pytest.mark.parametrize("name", sorted(_OBJECTS))
def test_well_known_objects_round_trip(name: str) -> None:
    assert name_of(well_known(name)) == name


@pytest.mark.parametrize("t", SCALARS, ids=lambda t: t.mlir)
def test_every_scalar_dtype_has_a_slot(t: object) -> None:
    assert well_known(dtype_slot(t.mlir)) is t.dtype  # type: ignore[attr-defined]


def test_unknown_names_and_objects_raise_key_error() -> None:
    with pytest.raises(KeyError):
        well_known("numpy.matrix")
    with pytest.raises(KeyError):
        name_of(np.matrix)


def test_array_from_descr_is_numpy_s_constructor() -> None:
    assert array_from_descr() == array_from_descr() != 0


def test_callback_slots_name_the_callback_and_the_value() -> None:
    assert callback_slot("step", "function") == "callback:step:function"
    assert callback_slot("a.b$c", "entry").rpartition(":") == ("callback:a.b$c", ":", "entry")
