"""A plan drawn as a timeline: one row per SM, each tile a bar from its estimated start to finish, coloured by
op, for `arkdma plan --png` (the times are the schedule's cost model, not a measurement)."""

from __future__ import annotations

from pathlib import Path

MAX_BARS = 20000  # more tiles than this are drawn as a sample, evenly spread


def draw(plan, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    est = plan.estimate
    tiles = plan.tiles
    step = max(1, len(tiles) // MAX_BARS)
    cmap = plt.get_cmap("tab20")
    rows = max(est["sm"], default=0) + 1
    fig, ax = plt.subplots(figsize=(12, max(3.0, min(14.0, rows * 0.08 + 2))))
    for t in tiles[::step]:
        i = t["id"]
        ax.barh(est["sm"][i], (est["finish_ns"][i] - est["start_ns"][i]) / 1e3, left=est["start_ns"][i] / 1e3,
                height=0.8, color=cmap(t["op"] % 20), linewidth=0)
    ax.set_xlabel("estimated time (us, cost model)")
    ax.set_ylabel("SM")
    ax.set_ylim(-1, rows)
    ax.invert_yaxis()
    stats = plan.stats()
    ax.set_title(f"{plan.model['name']}: {stats['tiles']} tiles of {stats['ops']} ops on {stats['sms_used']} of "
                 f"{stats['sms']} SMs, {stats['waits']} cross-SM waits, est. {stats['makespan_us']} us"
                 + (f" (1 tile in {step} drawn)" if step > 1 else ""))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
