"""The symbol-name rules: the names abi gives are the ones a compiled module defines."""

from __future__ import annotations

import numpy as np

from pymlirjit import Session, callback, f16
from pymlirjit.boundary.abi import (
    CIFACE_PREFIX,
    RESERVED_PREFIX,
    callback_shim_symbol,
    ciface_name,
    ciface_symbol,
    entry_shim_symbol,
)


def test_c_interface_names_round_trip() -> None:
    assert ciface_symbol("add") == CIFACE_PREFIX + "add" == "_mlir_ciface_add"
    assert ciface_name(ciface_symbol("add")) == "add"
    assert ciface_name("malloc") == "malloc"  # not a C interface: unchanged


def test_shim_symbols_are_reserved_and_never_collide() -> None:
    entry, shim = entry_shim_symbol("f"), callback_shim_symbol("f")
    assert entry.startswith(RESERVED_PREFIX) and shim.startswith(RESERVED_PREFIX)
    assert entry != shim and entry.endswith("f") and shim.endswith("f")


def test_a_module_needing_shims_uses_the_names_abi_gives(session: Session) -> None:
    @callback(session=session)
    def halve(x: f16) -> f16:
        return x / 2

    module = session.compile("""
    func.func @k(%x: f16) -> f16 {
      %y = call @halve(%x) : (f16) -> f16
      return %y : f16
    }
    func.func private @halve(f16) -> f16
    """)
    engine = module.k.engine
    assert engine.function_address(ciface_symbol(entry_shim_symbol("k")))
    assert ciface_symbol(callback_shim_symbol("halve")) in engine.registered_symbols
    assert module.k(np.float16(3.0)) == np.float16(1.5)


def test_symbol_references_counts_plain_and_quoted_names() -> None:
    from pymlirjit.boundary.abi import symbol_references

    text = '''
    func.func private @cb(f64) -> f64
    func.func @"odd name"(%x: f64) -> f64 {
      %r = call @cb(%x) : (f64) -> f64
      %s = call @"odd name"(%r) : (f64) -> f64
      return %s : f64
    }'''
    assert symbol_references(text) == {"cb": 2, "odd name": 2}
