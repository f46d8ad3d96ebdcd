"""What crosses between Python and compiled code: the types (:mod:`.types`, parsed by
:mod:`.typeparser`), signatures (:mod:`.signature`), the C ABI (:mod:`.abi`), scalar and
array conversion (:mod:`.convert`, :mod:`.memref`), call records and unwinding
(:mod:`.callframe`, :mod:`.failures`, :mod:`.sourcelines`), callbacks as C symbols
(:mod:`.callback`), native entry points and trampolines (:mod:`.native`, generated with
llvmlite), vectorcall objects, ctypes prototypes (:mod:`.ffi`, :mod:`.cprototype`).

It imports only :mod:`pymlirjit.errors` and :mod:`pymlirjit._version` from outside.
Modules are imported by their own path (``from ..boundary.memref import ...``): importing
this package loads none of them, so llvmlite and MLIR load only when a path needs them.
"""
