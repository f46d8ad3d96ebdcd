"""MLIR text to the LLVM dialect: parsing and the pass pipeline (:mod:`.pipeline`), deeply
nested input kept off small stacks (:mod:`.deepinput`), the workarounds for what MLIR 22
would abort or fail on (:mod:`.passguards`, :mod:`.subbyte`, :mod:`.packs`,
:mod:`.vectorscan`, :mod:`.transformscripts`, :mod:`.checks`), LLVM's own options
(:mod:`.llvmoptions`), native stderr captured as diagnostics (:mod:`.stderrcapture`) and
the one walk over a module's operations (:mod:`.walk`, which codegen uses too).

It imports only :mod:`pymlirjit.boundary` and the ground modules. Modules are imported by
their own path; importing this package loads none of them.
"""
