"""m. What checked code costs (issue 29 item 8): case f's 5-point stencil compiled
unchecked, with ``boundscheck=True``, and with one ``cf.assert`` (a shape check) before
its loops, timed interleaved in the same run. The checks of a loop whose accesses are
``iv + c`` run once before it (``pymlirjit/codegen/checks_hoisting.py``), and an assert
checks its condition only; numba's ``boundscheck=True`` costs it about 1.06x."""

from __future__ import annotations

import numpy as np

from pymlirjit import Session

from ._kernel_sources import MLIR
from ._timing import CaseResult, Config, Target, interleaved, per_call

__all__ = ["run"]

_SHAPE_CHECK = """
  %square = arith.cmpi eq, %rows, %cols : index
  cf.assert %square, "the grid must be square"
  %last_row = arith.subi %rows, %c1 : index"""


def run(config: Config) -> CaseResult:
    """The stencil unchecked, with boundscheck=True and with one cf.assert."""
    size = config.pick(1000, 64)
    result = CaseResult("m", f"checked code: 5-point stencil f64 {size}^2, ns per call")
    source = MLIR["stencil", "scf"]
    asserted = source.replace("\n  %last_row = arith.subi %rows, %c1 : index", _SHAPE_CHECK)
    assert asserted != source
    kernels = {"unchecked": Session().compile(source).stencil,
               "boundscheck": Session(boundscheck=True).compile(source).stencil,
               "assert": Session().compile(asserted).stencil}
    grid = np.random.default_rng(0).random((size, size))
    outputs = {name: np.zeros_like(grid) for name in kernels}
    for name, kernel in kernels.items():
        kernel(grid, outputs[name])
    if not all(np.array_equal(outputs[name], outputs["unchecked"]) for name in kernels):
        result.notes.append("wrong result: a checked stencil differs from the unchecked one")
    calls = config.pick(200, 5)
    samples = interleaved(*(lambda k=kernel, o=outputs[name]: per_call(
        k, (grid, o), calls=calls, repeat=1) for name, kernel in kernels.items()),
        repeat=config.repeat)
    labels = {"unchecked": "stencil, unchecked (default options)",
              "boundscheck": "stencil, boundscheck=True",
              "assert": "stencil, one cf.assert before the loops"}
    for (name, label), measured in zip(labels.items(), samples):
        result.add(name, label, measured, "unchecked")
    for name, goal in (("boundscheck", 1.5), ("assert", 1.1)):
        ratio = result.ratio(name, "unchecked")
        result.targets.append(Target(f"{labels[name]}: <= {goal}x unchecked", ratio <= goal,
                                     f"{ratio:.2f}x"))
    return result
