"""`arkdma sim board`: the ECP5 board's engine core simulated (sim/board.py), its serial line served on a TCP
port, so `arkdma fpga probe|peek|poke --port tcp://...` and the `card-uart` engine run against it as against
a board."""

from __future__ import annotations

import argparse

from arkdma_cli.arguments import bounded_int, positive_int
from driver.errors import ArkdmaError


def register(ssub) -> None:
    b = ssub.add_parser(
        "board", help="the board's engine core simulated, its UART served on a TCP port (no board needed)",
        description="Builds the engine core as it goes on the ECP5 board (UART bridge, 64-bit engine, on-chip RAM) "
                    "under Verilator and serves its serial line on 127.0.0.1:PORT until interrupted. Then "
                    "`arkdma fpga probe --port tcp://127.0.0.1:PORT` answers as a board does, and "
                    "ARKDMA_CARD_UART=tcp://127.0.0.1:PORT runs the card-uart engine (demo, conformance) on it.")
    b.add_argument("--port", type=bounded_int(1024, 65535, "TCP port"), default=5555, help="TCP port (default 5555)")
    b.add_argument("--num-queues", type=positive_int, default=4, help="queues (default 4)")
    b.add_argument("--slots", type=positive_int, default=16, help="window slots per queue (default 16)")
    b.add_argument("--num-regions", type=positive_int, default=16, help="regions (default 16)")
    b.set_defaults(func=run_board)


def run_board(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sim.board import BoardSimulation, board_params
    from sim.toolchain import missing

    try:
        params = board_params(num_queues=args.num_queues, slots=args.slots, num_regions=args.num_regions)
    except ValueError as exc:
        raise ArkdmaError(f"board settings rejected: {exc}") from exc
    reason = missing()
    if reason:
        raise ArkdmaError(f"cannot simulate here: {reason}")
    console = Console()
    sim = BoardSimulation(params, console=console, port=args.port, once=False).start()
    console.print(f"simulated board on {sim.url} ({params.tag()}); try: arkdma fpga probe --port {sim.url}\n"
                  f"or: ARKDMA_CARD_UART={sim.url} ./dev test tests/conformance -k card-uart-rule\n"
                  "Ctrl-C stops it.")
    try:
        sim.wait(timeout_s=None)
    except KeyboardInterrupt:
        pass
    return 0
