"""The card bench's face: its tables, its plot, and the command that runs it and writes the JSON (after every
row, with "complete": false until the last, so a run cut short keeps what it measured)."""

from __future__ import annotations

import json
from pathlib import Path

from sim.card_bench import CardBenchConfig, run


def table(result: dict):
    from rich.table import Table

    t = Table(title=f"simulated card through the PCIe model, host memory round trip {result['round_trip_ns']:g} ns")
    for col in ("link", "bytes", "descriptors", "GB/s", "of link", "GB/s steady", "latency ns", "doorbell->read",
                "cycles/write TLP", "cycles/completion", "checked"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(r["link"], f"{r['bytes']:,}", f"{r['descriptors']:,}", f"{r['gbps']:.3f}",
                  f"{r['line_rate_fraction']:.1%}", _num(r["gbps_steady"], ".3f"), f"{r['latency_ns']:,.0f}",
                  f"{r['doorbell_to_first_read_cycles']}", _num(r["cycles_per_write_tlp"]),
                  _num(r["cycles_per_completion"]), "ok" if r["verified"] else "[red]MISMATCH[/red]")
    return t


def _num(x, spec: str = "g") -> str:
    return "-" if x is None else format(x, spec)


def links_table(result: dict):
    from rich.table import Table

    t = Table(title="links simulated (UltraScale+ interface, cocotbext-pcie block model)")
    for col in ("link", "interface bits", "user clock MHz", "encoded GB/s", "payload-limited GB/s", "max payload B",
                "max read request B"):
        t.add_column(col, justify="right")
    for name, link in result["links"].items():
        t.add_row(name, str(link["interface_bits"]), f"{link['user_clk_mhz']:g}", f"{link['raw_gbps']:.3f}",
                  f"{link['payload_rate_gbps']:.3f}", str(link["max_payload_bytes"]),
                  str(link.get("max_read_request_bytes", "-")))
    return t


def model_table(name: str, model: dict):
    from sim.bench import model_table as terms_table

    return terms_table(model, title=f"MODEL: end-to-end GPU-driven latency, one {model['bytes']:,} B descriptor "
                                    f"through the simulated card ({name})")


def plot(result: dict, path: Path) -> None:
    """GB/s against message size per link beside the link's payload-limited rate (dashed); one link: each
    point labelled with its fraction of that rate; several: the fractions in a second panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.bench import _size_label

    several = len(result["links"]) > 1
    fig, axes = plt.subplots(1, 2 if several else 1, figsize=(12 if several else 7, 4.2), squeeze=False)
    ax, frac = axes[0][0], axes[0][1] if several else None
    sizes = sorted({r["bytes"] for r in result["rows"]})
    top = 0.0
    for name, link in result["links"].items():
        rows = [r for r in result["rows"] if r["link"] == name]
        line = ax.plot([r["bytes"] for r in rows], [r["gbps"] for r in rows], "o-", ms=4, label=f"{name}")[0]
        ax.axhline(link["payload_rate_gbps"], color=line.get_color(), ls="--", lw=1)
        top = max(top, link["payload_rate_gbps"])
        if frac is not None:
            frac.plot([r["bytes"] for r in rows], [r["line_rate_fraction"] for r in rows], "o-", ms=4,
                      color=line.get_color(), label=name)
        else:
            for r in rows:
                ax.annotate(f"{r['line_rate_fraction']:.1%}", (r["bytes"], r["gbps"]), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=7, color=line.get_color())
    ax.set(ylabel="GB/s (dashed: payload-limited rate)", ylim=(0, top * 1.1))
    ax.set_title(f"simulated card through the PCIe model, host memory round trip {result['round_trip_ns']:g} ns"
                 + ("" if several else "\nlabels: the fraction of the payload-limited rate"), fontsize=9)
    panels = [ax] + ([frac] if frac is not None else [])
    if frac is not None:
        frac.set(ylabel="fraction of the link's payload-limited rate", ylim=(0, 1.05))
        frac.set_title("line_rate_fraction", fontsize=9)
    for p in panels:
        p.set(xscale="log", xlabel="bytes per descriptor")
        p.set_xticks(sizes, [_size_label(s) for s in sizes], rotation=30, fontsize=8)
        p.minorticks_off()
        p.grid(True, which="both", alpha=0.3)
        p.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_and_report(config: CardBenchConfig, json_path: Path, png_path: Path) -> int:
    """The command: run, print the tables, write the JSON (after every row) and the plot. Non-zero when any
    byte came out wrong."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log: wide enough for the tables' columns
        console = Console(width=160)
    json_path.parent.mkdir(parents=True, exist_ok=True)

    def save(result: dict) -> None:
        json_path.write_text(json.dumps(result, indent=1))

    result = run(config, console, on_row=save)
    save(result)
    console.print(links_table(result))
    console.print(table(result))
    for name, link in result["links"].items():
        if link["end_to_end_model"]:
            console.print(model_table(name, link["end_to_end_model"]))
    plot(result, png_path)
    console.print(f"wrote {json_path} and {png_path}")
    if not result["verified"]:
        console.print("[red]some destination bytes differ from their source: see the rows marked MISMATCH[/red]")
        return 1
    return 0
