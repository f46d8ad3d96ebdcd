"""The ``pymlirjit`` command line: ``pymlirjit demo``, ``pymlirjit --version``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    parts = [f"pymlirjit {__version__}"]
    for package in ("xtc-mlir-python-bindings", "llvmlite", "numpy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pymlirjit", description="Run MLIR from Python and call Python from MLIR.")
    parser.add_argument("--version", action="version", version=_versions())
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the callback round trip (MLIR calling Python)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pymlirjit`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        run_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
