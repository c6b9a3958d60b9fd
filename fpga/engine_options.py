"""Command-line options for the engine's build parameters (one per integer field of rtl.params.EngineParams)."""

from __future__ import annotations

import argparse
import dataclasses

from fpga.errors import FpgaFlowError

BOARD_DATA_WIDTH = 64  # ECP5 builds default to the 64-bit engine (issue 3's ECP5 target)


def _fields() -> list[dataclasses.Field]:
    from rtl.params import EngineParams  # plain Python (no Amaranth): cheap at parser build time

    return [f for f in dataclasses.fields(EngineParams) if f.type in (int, "int")]


def add_engine_options(parser: argparse.ArgumentParser, data_width: int = BOARD_DATA_WIDTH) -> None:
    group = parser.add_argument_group(
        "engine parameters", f"rtl.params.EngineParams; defaults are its own, except --data-width {data_width}")
    for f in _fields():
        group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=int, default=None, metavar="N")
    parser.set_defaults(engine_data_width_default=data_width)


def engine_params(args: argparse.Namespace):
    """EngineParams from the options given (the rest default); a rejected set is a clear error."""
    from rtl.params import EngineParams

    given = {f.name: getattr(args, f.name) for f in _fields() if getattr(args, f.name, None) is not None}
    given.setdefault("data_width", getattr(args, "engine_data_width_default", BOARD_DATA_WIDTH))
    try:
        return EngineParams(**given)
    except (TypeError, ValueError) as exc:
        raise FpgaFlowError(f"engine parameters rejected: {exc}") from exc
