"""The estimate on the real engine: synthesis of its smallest configuration always, the whole flow under `slow`."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from rich.console import Console

from arkdma_cli import rtl_estimate
from arkdma_cli.engine_options import params_from
from driver.errors import ArkdmaError
from fpga.errors import ToolMissing
from fpga.flow import estimate, ooc_flow, toolchain
from rtl.params import EngineParams

# the smallest engine EngineParams allows: one queue of two slots, one region, shallow everything
SMALLEST = EngineParams(data_width=64, num_queues=1, slots=2, num_regions=1, reads_outstanding=2,
                        writes_outstanding=4, buffer_bytes=1024, max_burst_beats=4, errlog_depth=1)


def _tools_or_skip() -> None:
    try:
        toolchain.find("yosys"), toolchain.find("nextpnr-ecp5")
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_smallest_engine_synthesizes_for_ecp5(tmp_path):
    _tools_or_skip()
    from rtl.engine import Engine

    result = ooc_flow.run(Engine(SMALLEST), tmp_path, seeds=(), console=Console(file=io.StringIO()))
    cells = result.cells
    assert not result.runs and result.seconds["synthesize"] > 0
    # the buffer (1 KiB) and the windows live in block or distributed RAM, not in flip-flops
    assert cells.get("DP16KD", 0) + cells.get("TRELLIS_DPR16X4", 0) >= 1
    assert cells["LUT4"] > 1000 and cells["TRELLIS_FF"] > 500
    assert not any(name.startswith("$") for name in cells)  # everything mapped to ECP5 cells


def test_estimate_command_options_build_engine_params():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    rtl_estimate.register(sub)
    args = parser.parse_args(["estimate", "--num-queues", "2", "--seeds", "1,2", "--json", "x.json"])
    params = params_from(args)
    assert params == EngineParams(data_width=64, num_queues=2)  # the ECP5 default width is 64
    assert args.seeds == (1, 2)
    args = parser.parse_args(["estimate", "--data-width", "96"])
    with pytest.raises(ArkdmaError, match="data_width must be one of"):
        params_from(args)
    for bad in (["--seeds", "one"], ["--part", "LFE5U-12F"], ["--freq", "nan"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["estimate", *bad])


@pytest.mark.slow
def test_smallest_engine_estimate_end_to_end(tmp_path):
    _tools_or_skip()
    report = estimate.estimate(SMALLEST, tmp_path, console=Console(file=io.StringIO()))
    data = json.loads(report.to_json())
    assert data["data_width"] == 64 and data["params"]["num_queues"] == 1
    assert 0 < data["fmax_mhz"] < 500 and data["luts"] > 1000 and data["ffs"] > 500
    assert data["meets_target"] == (data["fmax_mhz"] >= 125.0)
    assert data["critical_path"]["sources"], "the critical path should point at design source lines"
