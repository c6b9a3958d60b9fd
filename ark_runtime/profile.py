"""Where one iteration of the loop kernel spent its time, from the GPU clock stamps the kernel writes at the
start and end of every tile (`Program.tile_ns`): per op (tiles, SMs, time in tiles, the op's span) and per
SM (time running tiles against time waiting). Plain NumPy over the plan, so it is tested without a GPU."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ark_runtime.model import Model
from ark_runtime.ops import spec
from ark_runtime.plan import Plan


@dataclass(frozen=True)
class OpTime:
    op: int
    what: str  # kind and function, e.g. "matmul", "fused gelu+3"
    output: str
    tiles: int
    sms: int  # SMs that ran its tiles
    busy_us: float  # the tiles' times added up
    mean_tile_us: float
    max_tile_us: float
    start_us: float  # its first tile's start, from the iteration's first tile's start
    span_us: float  # first tile's start to last tile's end


@dataclass(frozen=True)
class SmTime:
    sm: int
    tiles: int
    busy_us: float  # running tiles
    idle_us: float  # the iteration's span less busy: waiting on counters, polling, the loop's own work


@dataclass(frozen=True)
class Profile:
    iteration_us: float  # the first tile's start to the last tile's end, across SMs
    ops: list[OpTime]
    sms: list[SmTime]

    def as_json(self) -> dict:
        return {"iteration_us": self.iteration_us, "ops": [asdict(o) for o in self.ops],
                "sms": [asdict(s) for s in self.sms]}

    @staticmethod
    def from_json(d: dict) -> Profile:
        return Profile(d["iteration_us"], [OpTime(**o) for o in d["ops"]], [SmTime(**s) for s in d["sms"]])

    def table(self, top: int = 12) -> str:
        """The ops that took longest (by span), one line each."""
        rows = sorted(self.ops, key=lambda o: -o.span_us)[:top]
        lines = [f"iteration {self.iteration_us:.1f} us (first tile start -> last tile end)",
                 f"{'op':>4} {'what':<22} {'tiles':>6} {'sms':>4} {'span us':>9} {'mean tile':>10} {'max tile':>9}"]
        lines += [f"{o.op:>4} {o.what[:22]:<22} {o.tiles:>6} {o.sms:>4} {o.span_us:>9.1f} {o.mean_tile_us:>10.2f} "
                  f"{o.max_tile_us:>9.2f}" for o in rows]
        busy = [s.busy_us for s in self.sms if s.tiles]
        if busy:
            lines.append(f"SMs busy {np.median(busy):.1f} us median, {max(busy):.1f} max, of {self.iteration_us:.1f}")
        return "\n".join(lines)


def _what(model: Model, op) -> str:
    return spec(op.kind).describe(op)


def build_profile(model: Model, plan: Plan, stamps: np.ndarray) -> Profile:
    """`stamps`: uint64 [tiles, 2], start and end (globaltimer ns) of each tile's last run. Only the tiles the plan's
    streams run count: a World's rank (world_runtime.py) has the World's tiles but its own SMs' streams, and stamps
    only the tiles it runs."""
    stamps = np.asarray(stamps, np.int64).reshape(len(plan.tiles), 2)
    sm_of = np.full(len(plan.tiles), -1, np.int64)
    for sm, stream in enumerate(plan.streams):
        for item in stream:
            if item["op"] == "run":
                sm_of[item["tile"]] = sm
    mine = sm_of >= 0
    if not mine.any():
        raise ValueError("this plan's SMs run no tiles: there is nothing to profile")
    if (stamps[mine, 0] == 0).any():
        raise ValueError("no complete iteration has been timed yet: run the model at least once")
    stamps, sm_of = stamps[mine], sm_of[mine]
    t0 = int(stamps[:, 0].min())
    dur = (stamps[:, 1] - stamps[:, 0]).clip(min=0) / 1e3
    op_of = np.array([t["op"] for t in plan.tiles])[mine]
    iteration = (int(stamps[:, 1].max()) - t0) / 1e3
    ops = []
    for op in model.ops:
        sel = op_of == op.id
        if not sel.any():
            continue
        s, d = stamps[sel], dur[sel]
        ops.append(OpTime(op.id, _what(model, op), model.tensors[op.output].name, int(sel.sum()),
                          len(set(sm_of[sel].tolist())), float(d.sum()), float(d.mean()), float(d.max()),
                          (int(s[:, 0].min()) - t0) / 1e3, (int(s[:, 1].max()) - int(s[:, 0].min())) / 1e3))
    sms = []
    for sm in range(len(plan.streams)):
        sel = sm_of == sm
        busy = float(dur[sel].sum())
        sms.append(SmTime(sm, int(sel.sum()), busy, max(iteration - busy, 0.0) if sel.any() else 0.0))
    return Profile(iteration, ops, sms)
