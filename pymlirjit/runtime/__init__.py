"""From a checked module to running code, and keeping it: preparing a module for its
options and links (:mod:`.prepare`), the upstream-compatible engine (:mod:`.engine`,
:mod:`.asyncruntime`), compiled modules and functions (:mod:`.module`, :mod:`.function`),
native externs (:mod:`.externs`), shared libraries and object files (:mod:`.sharedlib`,
:mod:`.objectfile`), the disk cache (:mod:`.cache`, :mod:`.privatefiles`) and the LLVM IR
and assembly of a module (:mod:`.llvmir`).

It imports :mod:`pymlirjit.codegen`, :mod:`pymlirjit.lowering`, :mod:`pymlirjit.boundary`
and the ground modules. Modules are imported by their own path; importing this package
loads none of them.
"""
