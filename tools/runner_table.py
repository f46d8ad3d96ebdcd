"""Run every RUN line of the mlir-runner tests under a folder three ways and print a table.

    python tools/runner_table.py /tmp/upstream-runner [--jobs N] [--only SUBSTRING]

The folder is typically a copy of upstream's runner tests (mlir/test/mlir-runner,
mlir/test/Integration/Dialect/*/CPU), kept outside the repository. Each RUN line runs as
tests/test_conformance.py runs it: the wheel's ``mlir-opt | mlir-runner | FileCheck`` is
the reference, then ``pymlirjit run`` on the lowered file, with the RUN line's passes as
``--pipeline``, and with the default pipeline. One row per RUN line, then the totals;
``--details`` adds why each way failed. A RUN line that only prepares a file for later
lines (``mlir-opt %s ... -o %t``, ``cp %s %t``) counts as running no mlir-runner; the
later lines run it first, in the same working directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_conformance import WAYS, Outcome, run_case, run_lines, runner_files

_MARK = {"pass": "ok", "fail": "FAIL", "abort": "ABORT", "skip": "-"}


def _line(path: Path, index: int) -> tuple[Path, int, list[Outcome]]:
    outcomes = []
    for way in WAYS:
        with tempfile.TemporaryDirectory() as work:
            outcomes.append(run_case(path, index, way, Path(work)))
        if outcomes[-1].status == "skip":  # the reference failed: the other ways would too
            break
    return path, index, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="only files whose path contains this")
    parser.add_argument("--details", action="store_true", help="say why each way failed")
    args = parser.parse_args(argv)
    args.folder = args.folder.resolve()
    jobs = [(path, i) for path in runner_files(args.folder) if args.only in str(path)
            for i, _ in enumerate(run_lines(path))]
    totals: Counter[str] = Counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        for path, index, outcomes in pool.map(lambda job: _line(*job), jobs):
            name = f"{path.relative_to(args.folder)}:{index}"
            if outcomes[0].status == "skip" and outcomes[0].detail.startswith("not an"):
                totals["other"] += 1
                runs = outcomes[0].detail.rsplit(": ", 1)[-1]
                print(f"{name:70} not a runner line (runs {runs})", flush=True)
                continue
            if outcomes[0].status == "skip":
                totals["reference fails"] += 1
                print(f"{name:70} reference fails: {outcomes[0].detail[:120]!r}", flush=True)
                continue
            totals["reference ok"] += 1
            cells = []
            for way, outcome in zip(WAYS, outcomes):
                totals[f"{way} {outcome.status}"] += 1
                cells.append(f"{way}={_MARK[outcome.status]}")
            print(f"{name:70} reference ok  {'  '.join(cells)}", flush=True)
            if args.details:
                for way, outcome in zip(WAYS, outcomes):
                    if outcome.status != "pass":
                        print(f"    {way}: {outcome.detail}", flush=True)
    files = len({path for path, _ in jobs})
    print(f"\n{files} files, {len(jobs)} RUN lines; mlir-runner passes "
          f"{totals['reference ok']} (fails {totals['reference fails']}; "
          f"{totals['other']} lines run no mlir-runner)")
    for way in WAYS:
        print(f"  {way:8} pass {totals[f'{way} pass']}, fail {totals[f'{way} fail']}, "
              f"abort {totals[f'{way} abort']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
