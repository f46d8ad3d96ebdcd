"""The shared function builder: the CPython/numpy object layouts generated code reads,
checked against this interpreter."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import pytest

from pymlirjit.boundary.memref import DESCRIPTOR_FIELDS, descriptor_type
from pymlirjit.boundary.native.batch import _jit
from pymlirjit.boundary.native.builder import (
    ARRAY_FLAGS_BY_NAME,
    OBJECT_OFFSETS,
    check_object_layouts,
    descriptor_struct,
    layout_mismatches,
)


def test_object_layouts_are_this_interpreters() -> None:
    assert layout_mismatches() == []
    check_object_layouts()  # raises on a mismatch


def test_flags_match_numpys_own_view_of_them() -> None:
    array = np.zeros((3, 4))
    for name, bit in ARRAY_FLAGS_BY_NAME.items():
        assert bool(array.flags.num & bit) == bool(getattr(array.flags, name))
    array.flags.writeable = False
    assert not array.flags.num & ARRAY_FLAGS_BY_NAME["writeable"]


# Wrong tables read neighbouring fields of real objects: run where a crash hides nothing.
WRONG_TABLES = """
import json
from pymlirjit.boundary.native.builder import ARRAY_FLAGS_BY_NAME, OBJECT_OFFSETS, layout_mismatches
found = {}
for field, offset in OBJECT_OFFSETS.items():
    found[field] = layout_mismatches({**OBJECT_OFFSETS, field: offset - 8})
names = list(ARRAY_FLAGS_BY_NAME)
for name, other in zip(names, names[1:] + names[:1]):  # each flag given another's bit
    found[name] = layout_mismatches(flags={**ARRAY_FLAGS_BY_NAME,
                                           name: ARRAY_FLAGS_BY_NAME[other]})
print(json.dumps(found))
"""


def test_a_wrong_offset_or_flag_is_named() -> None:
    done = subprocess.run([sys.executable, "-c", WRONG_TABLES], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    found = json.loads(done.stdout)
    assert set(found) == set(OBJECT_OFFSETS) | set(ARRAY_FLAGS_BY_NAME)
    for field in OBJECT_OFFSETS:
        assert found[field], f"{field} moved by 8 bytes went unnoticed"
        assert found[field][0].startswith(field), found[field]
    for name in ARRAY_FLAGS_BY_NAME:
        assert found[name], f"a wrong bit for {name} went unnoticed"
        assert all(line.startswith(f"flag {name} ") for line in found[name]), found[name]


@pytest.mark.parametrize("rank", [0, 1, 2, 5])
def test_the_llvm_descriptor_is_the_ctypes_one(rank: int) -> None:
    struct = descriptor_struct(rank)
    ctypes_struct = descriptor_type(rank)
    target_data = _jit().machine.target_data
    assert struct.get_abi_size(target_data) == ctypes.sizeof(ctypes_struct)
    names = [field[0] for field in ctypes_struct._fields_]
    assert names == list(DESCRIPTOR_FIELDS[:len(struct.elements)])
    for index, name in enumerate(names):
        # Each field at the same byte offset as its ctypes twin.
        offset = getattr(ctypes_struct, name).offset
        assert sum(element.get_abi_size(target_data)
                   for element in struct.elements[:index]) == offset
