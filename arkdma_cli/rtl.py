"""`arkdma rtl verilog`: the hardware engine's Verilog for given parameters (and `rtl estimate`, rtl_estimate.py)."""

from __future__ import annotations

import argparse

from arkdma_cli import rtl_estimate
from arkdma_cli.arguments import output_file, verilog_identifier
from arkdma_cli.engine_options import add_param_options, params_from
from driver.errors import ArkdmaError


def register(sub) -> None:
    p = sub.add_parser("rtl", help="the hardware engine: Verilog for given parameters, ECP5 estimate")
    rsub = p.add_subparsers(dest="rtl_command", required=True, metavar="ACTION")
    v = rsub.add_parser("verilog", help="write the engine's Verilog (module arkdma_engine) for given parameters",
                        description="Converts the Amaranth engine (rtl/engine.py) to Verilog. Ports: csr (AXI4-Lite "
                                    "slave, the registers), win (AXI4 slave, the submission windows), mem (AXI4 "
                                    "master, host memory), clk, rst (synchronous, active high).")
    v.add_argument("-o", "--output", type=output_file, required=True, metavar="FILE", help="Verilog file to write")
    v.add_argument("--name", type=verilog_identifier, default="arkdma_engine",
                   help="top module name (default arkdma_engine)")
    add_param_options(v)
    v.set_defaults(func=run_verilog)
    rtl_estimate.register(rsub)


def run_verilog(args: argparse.Namespace) -> int:
    params = params_from(args)
    try:
        from amaranth.back import verilog
    except ImportError as exc:
        raise ArkdmaError(f"Amaranth is missing ({exc.name}): pip install 'arkdma[hw]' (or run ./dev)") from exc
    from rtl.engine import Engine

    text = verilog.convert(Engine(params), name=args.name, emit_src=False)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}: module {args.name}, {len(text.splitlines())} lines, "
          + ", ".join(f"{k}={v}" for k, v in params.as_dict().items()))
    return 0
