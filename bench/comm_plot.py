"""The PNG of `arkdma bench comm`: one-way put latency and all-reduce latency against size, all-reduce bus bandwidth,
and the burst, overlap and TP-block rows side by side; arkdma beside NCCL (and symmetric memory), p10 to p90 as
error bars where measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.comm import CommResult, Row

SERIES = (("arkdma", "arkdma", "C0"), ("NCCL", "nccl", "C1"), ("symmetric memory", "symm", "C2"))


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def _curves(ax, rows: list[Row], value: str, ylabel: str, title: str) -> None:
    """Each series' `value` ("us" or "gbps") against bytes, log-log, p10-p90 bars on the times."""
    for name, key, color in SERIES:
        pts = [(r.bytes, getattr(r, f"{key}_{value}", None), r) for r in rows]
        pts = [(b, v, r) for b, v, r in pts if v]
        if not pts:
            continue
        x = np.array([p[0] for p in pts], float)
        y = np.array([p[1] for p in pts], float)
        lo = np.array([getattr(p[2], f"{key}_p10_{value}", None) or p[1] for p in pts], float)
        hi = np.array([getattr(p[2], f"{key}_p90_{value}", None) or p[1] for p in pts], float)
        err = np.vstack([y - lo, hi - y]).clip(min=0.0)
        ax.errorbar(x, y, yerr=err, marker="o", ms=3, capsize=2, label=name, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    failed = [_size(r.bytes) for r in rows if r.error]
    if failed:
        ax.text(0.02, 0.02, "arkdma failed at " + ", ".join(failed), transform=ax.transAxes, fontsize=7, color="C3")


def _bars(ax, labels: list[str], values: dict[str, list], ylabel: str, title: str) -> None:
    x = np.arange(len(labels))
    width = 0.8 / max(len(values), 1)
    for i, (name, vals) in enumerate(values.items()):
        color = dict((n, c) for n, _, c in SERIES).get(name.split(" ")[0], f"C{i + 3}")
        ax.bar(x + (i - (len(values) - 1) / 2) * width, [v if v is not None else np.nan for v in vals], width,
               label=name, color=color)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if labels:
        ax.legend(fontsize=8)


def plot(result: CommResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {op: [r for r in result.rows if r.op == op] for op in ("put", "all_reduce", "put_rate", "overlap",
                                                              "tp_block")}
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    _curves(axes[0, 0], by["put"], "us", "one way, us (log)", "put + flag, one way (half a ping-pong)")
    _curves(axes[0, 1], by["all_reduce"], "us", "us per all-reduce (log)", "all_reduce latency (bf16)")
    _curves(axes[0, 2], by["all_reduce"], "gbps", "bus bandwidth, GB/s (log)", "all_reduce bus bandwidth")
    rate = by["put_rate"]
    _bars(axes[1, 0], [f"{r.detail.get('count', '?')} x {_size(r.bytes)}" for r in rate],
          {"arkdma": [r.arkdma_gbps for r in rate], "NCCL": [r.nccl_gbps for r in rate]}, "GB/s",
          "back-to-back puts")
    ov = by["overlap"]
    _bars(axes[1, 1], [f"all_reduce {_size(r.bytes)}" for r in ov],
          {"arkdma % of ideal": [r.pct_of_ideal for r in ov], "NCCL % of ideal": [r.nccl_pct_of_ideal for r in ov],
           "arkdma matmul slowdown %": [r.matmul_slowdown_pct for r in ov],
           "NCCL matmul slowdown %": [r.nccl_matmul_slowdown_pct for r in ov]},
          "%", "overlap with a bf16 matmul loop")
    tp = by["tp_block"]
    _bars(axes[1, 2], ["TP=2 block"] * len(tp),
          {"arkdma": [r.arkdma_us for r in tp], "NCCL": [r.nccl_us for r in tp]}, "us per iteration",
          "TP=2 transformer block, end to end")
    where = "loopback on one GPU" if result.loopback else f"GPUs {', '.join(map(str, result.devices))}"
    fig.suptitle(f"arkdma bench comm on {result.device} ({where}; torch {result.torch})", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
