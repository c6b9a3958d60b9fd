"""`arkdma fpga probe`: a board over its UART bridge (--port), or a card on PCIe (--pcie): each step printed as it
ends (ok, FAILED with what to check next, skipped, unsupported), every step in --json FILE, exit 1 on a failure."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from driver.errors import ArkdmaError

PORT_ENV = "ARKDMA_CARD_UART"  # the card-uart engine's variable (fpga/link/provider.py)
STYLE = {"ok": "green", "FAILED": "bold red", "skipped": "dim", "unsupported": "yellow"}


def run_probe(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(highlight=False, soft_wrap=True)
    if args.pcie and args.port:
        raise ArkdmaError("--pcie probes a card on PCIe and --port a board over its UART: give one of them")
    if args.pcie:
        return run_pcie_probe(args, console)
    if args.device or args.sysfs or args.method or args.bytes:
        raise ArkdmaError("--device, --sysfs, --method and --bytes are for the PCIe probe: add --pcie")
    port = args.port or os.environ.get(PORT_ENV)
    if not port:
        raise ArkdmaError(f"which board? --pcie for a card on PCIe (found through sysfs), --port DEV for the ECP5 "
                          f"board's UART (e.g. /dev/ttyUSB1, or tcp://HOST:PORT), or set {PORT_ENV}")
    return run_uart_probe(args, port)


def run_uart_probe(args: argparse.Namespace, port: str) -> int:
    from fpga.link.serial_link import SerialLink, probe

    out: dict = {"link": "uart", "port": port}
    with SerialLink(port, args.baud, args.timeout or 1.0) as link:
        found = probe(link)
        out["identity"] = found
        for key, value in found.items():
            print(f"{key:>16} {value:#010x}" if isinstance(value, int) else f"{key:>16} {value}")
        if args.dma:
            if found["core"] != "engine":
                raise ArkdmaError("--dma needs the engine core; this board runs the scratch core")
            from fpga.link.board import loopback

            result = loopback(link)
            out["loopback"] = result
            print(f"loopback DMA: {result['bytes']} bytes copied and checked in {result['dma_seconds']} s "
                  f"(completion count {result['completed']})")
    _write_json(args.json, out)
    return 0


def run_pcie_probe(args: argparse.Namespace, console: Console) -> int:
    from driver import card_probe
    from driver.discovery import SYSFS_PCI

    def show(step) -> None:
        console.print(f"[{STYLE[step.status]}]{step.status:>11}[/] {step.name:<9} {escape(step.summary)}")
        for card in step.data.get("cards", ()):
            _print_card(console, card)
        if step.name == "registers" and "registers" in step.data:
            _print_registers(console, step.data)
        elif "registers" in step.data:
            _print_words(console, step.data["registers"])
        if step.hint:
            console.print(f"{'':>11} {'':<9} {'[bold]check:[/]' if step.status != 'ok' else 'note:'} "
                          f"{escape(step.hint)}")

    report = card_probe.probe(args.device, sysfs=args.sysfs or SYSFS_PCI, method=args.method or "auto",
                              timeout=args.timeout or 5.0, nbytes=args.bytes or 1 << 20, on_step=show)
    failed = [s.name for s in report.steps if s.status == "FAILED"]
    if failed:
        console.print(f"[bold red]probe FAILED[/] at {', '.join(failed)}")
    else:
        unsupported = [s.name for s in report.steps if s.status == "unsupported"]
        console.print("[green]probe ok[/]" + (f" ([yellow]not supported here: {', '.join(unsupported)}[/])"
                                              if unsupported else ""))
    _write_json(args.json, {"link": "pcie", **report.as_dict()})
    return 1 if failed else 0


def _print_card(console: Console, card: dict) -> None:
    bar = f"{card['bar0_bytes']:#x} bytes" if card["bar0_bytes"] else f"unassigned ({card['bar0_problem']})"
    disabled = ", device disabled" if card["enabled"] is False else ""
    group = "none (IOMMU off?)" if card["iommu_group"] is None else str(card["iommu_group"])
    console.print(f"{'':>11} {'':<9} {card['address']} {card['ids']}  link {card['link']['text']}  BAR0 "
                  f"{escape(bar)}{disabled}  driver {card['driver'] or 'none'}  IOMMU group {group}")


def _print_registers(console: Console, data: dict) -> None:
    regs = data["registers"]
    names = ("ID", "VERSION", "CAPS", "NUM_QUEUES", "SLOTS", "NUM_REGIONS", "DATA_BYTES", "WINDOW_BASE",
             "WINDOW_STRIDE", "CONTROL", "STATUS")
    _print_words(console, {n: regs[n] for n in names if n in regs})
    if data.get("unknown_caps"):
        console.print(f"{'':>11} {'':<9} CAPS bits this driver does not know: {data['unknown_caps']:#x}")


def _print_words(console: Console, words: dict[str, int]) -> None:
    for name, value in words.items():
        console.print(f"{'':>11} {'':<9}   {name:<22} {value:#010x}")


def _write_json(path: Path | None, data: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")
