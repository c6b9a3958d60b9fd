"""`arkdma`: builds the command line from the command modules and dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys

from driver.errors import ArkdmaError

# Each module defines register(subparsers); hardware commands import Amaranth/cocotb only when run.
COMMAND_MODULES = (
    "ark_runtime.cli.info",
    "ark_runtime.cli.demo",
    "ark_runtime.cli.abi",
    "ark_runtime.cli.fpga",
    "ark_runtime.cli.rtl",
    "ark_runtime.cli.bench",
    "ark_runtime.cli.sim",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arkdma", description="GPU-driven DMA: engines, runtime and tools")
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
        return 2


if __name__ == "__main__":
    sys.exit(main())
