"""Fast and checked code: the compile options (:mod:`.options`), fast-math and linalg
schedules (:mod:`.optimize`, :mod:`.linalg_schedules`, :mod:`.linalg_rewrites`,
:mod:`.linalg_tensors`, :mod:`.microkernels`), inline and vector math
(:mod:`.inlinemath`, :mod:`.vectormath`), parallel loops (:mod:`.parallel`,
:mod:`.scheduling`), checked mode (:mod:`.checks`) and ufunc inner loops
(:mod:`.ufunc_loops`): rewrites of a module before the pipeline lowers it.

It imports :mod:`pymlirjit.lowering`, :mod:`pymlirjit.boundary` and the ground modules.
Modules are imported by their own path; importing this package loads none of them.
"""
