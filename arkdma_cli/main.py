"""`arkdma`: builds the command line from the command modules and dispatches.

Exit codes: 0 success, 1 a runtime error (one line on stderr saying what and what to do), 2 a usage
error (argparse's message), 130 interrupted (Ctrl-C; each command's context managers clean up).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

from driver.errors import ArkdmaError

# Each module defines register(subparsers); hardware commands import Amaranth/cocotb only when run.
COMMAND_MODULES = (
    "arkdma_cli.info",
    "arkdma_cli.demo",
    "arkdma_cli.abi",
    "arkdma_cli.fpga",
    "arkdma_cli.rtl",
    "arkdma_cli.bench",
    "arkdma_cli.sim",
    "arkdma_cli.plan",
)
RUNTIME_ERROR, USAGE_ERROR, INTERRUPTED = 1, 2, 130


def version() -> str:
    try:
        return metadata.version("arkdma")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arkdma", description="GPU-driven DMA: engines, runtime and tools")
    parser.add_argument("--version", action="version", version=f"arkdma {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArkdmaError as exc:
        print(f"arkdma {args.command}: {exc}", file=sys.stderr)
        return RUNTIME_ERROR
    except KeyboardInterrupt:
        print(f"arkdma {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except OSError as exc:  # a file or device the command was given could not be used
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"arkdma {args.command}: {exc.strerror or exc}{where}", file=sys.stderr)
        return RUNTIME_ERROR


if __name__ == "__main__":
    sys.exit(main())
