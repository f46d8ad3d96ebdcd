"""MLIR text to the LLVM dialect: parsing and the pass pipeline (:mod:`.pipeline`), deeply
nested input kept off small stacks (:mod:`.deepinput`), the workarounds for what MLIR 22
would abort or fail on (:mod:`.passguards`, :mod:`.subbyte`, :mod:`.packs`,
:mod:`.vectorscan`, :mod:`.transformscripts`, :mod:`.checks`), LLVM's own options
(:mod:`.llvmoptions`) and native stderr captured as diagnostics (:mod:`.stderrcapture`).

It imports only :mod:`pymlirjit.boundary` and the ground modules. Modules are imported by
their own path; importing this package loads none of them.
"""
