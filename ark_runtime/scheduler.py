"""Tiles placed on SMs: list scheduling in op order by estimated cost, each tile on the SM where it can start
first (of those, the SM whose iteration starts latest; see place), a wait on another SM's tile costing a cross-SM
synchronisation. A chain of ops whose tile i reads only tile i of the op before lands on one SM and waits for
nothing."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from ark_runtime.tiling import Tile


def device_family(name: str) -> str:
    """The GPU's model in a name the driver reports ("NVIDIA H200" -> "H200", "NVIDIA H100 80GB HBM3" -> "H100"): the
    device a measured table's rows name; the name itself where no model is in it."""
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Za-z]?)\b", name)
    return found.group(1) if found else name


@dataclass(frozen=True)
class DeviceSpec:
    """What the schedule's cost estimate assumes of the GPU (only the SM count changes the plan's shape)."""

    name: str = "H100"
    num_sms: int = 132
    memory_gbps: float = 3350.0  # HBM bandwidth, GB/s
    tensor_tflops: float = 990.0  # dense bf16/fp16 with fp32 accumulation
    sync_ns: float = 500.0  # a tile waiting on a tile of another SM (counter write, fence, poll)
    tile_overhead_ns: float = 200.0  # loading a tile's work and its shared-memory pipeline start
    wgmma: bool = True  # Hopper's warpgroup MMA (compute capability 9.0): large matmuls may take matmul_sm90.cuh

    def __post_init__(self) -> None:
        if isinstance(self.num_sms, bool) or not isinstance(self.num_sms, int) or not 1 <= self.num_sms <= 1024:
            raise ValueError(f"num_sms must be an int in 1..1024, not {self.num_sms!r}")
        for name in ("memory_gbps", "tensor_tflops"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        for name in ("sync_ns", "tile_overhead_ns"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be zero or more, not {getattr(self, name)!r}")

    def tile_ns(self, tile: Tile) -> float:
        """One SM's share of the GPU: the tile's bytes at 1/num_sms of the bandwidth, its flops at
        1/num_sms of the tensor throughput, whichever is longer."""
        per_sm_bytes_ns = self.memory_gbps / self.num_sms  # bytes per ns
        per_sm_flops_ns = self.tensor_tflops * 1e3 / self.num_sms  # flops per ns
        return self.tile_overhead_ns + max(tile.bytes / per_sm_bytes_ns, tile.flops / per_sm_flops_ns)

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Placement:
    sm: tuple[int, ...]  # per tile
    start_ns: tuple[float, ...]
    finish_ns: tuple[float, ...]

    @property
    def makespan_ns(self) -> float:
        return max(self.finish_ns, default=0.0)


PLACEMENTS = ("cost", "round-robin")
SINK_SLACK = 0.1  # of the schedule so far: how much later a tile that ends the iteration may start (place)
SINKS_PER_SM = 4  # ... where its op has no more such tiles than this many for each SM idle at the iteration's start


def place(tiles: list[Tile], deps: list[tuple[int, ...]], device: DeviceSpec, policy: str = "cost",
          group_of: list[int] | None = None, groups: int = 1, peer_sync_ns: float = 0.0) -> Placement:
    """Tiles in order (the model's op order is a topological order) onto the SM where each starts first
    ("cost"), or tile i onto SM i mod num_sms ("round-robin": every dependency of a chain crosses SMs, which
    is what a benchmark of the cross-SM wait wants). With "cost", of the SMs where a tile starts as soon, the one
    whose iteration starts latest; a tile that ends the iteration may wait up to SINK_SLACK of the schedule for such
    an SM, where its op has at most SINKS_PER_SM such tiles for each SM idle at the iteration's start.

    With `groups` (a World's ranks: `groups` GPUs of device.num_sms SMs each, SM g * num_sms + s being SM s of GPU
    g), tile t runs on an SM of GPU group_of[t], and a wait on a tile of another GPU costs peer_sync_ns more."""
    if policy not in PLACEMENTS:
        raise ValueError(f"placement {policy!r} is not one of {', '.join(PLACEMENTS)}")
    per = device.num_sms
    n = per * groups
    group = group_of if group_of is not None else [0] * len(tiles)
    if groups < 1 or len(group) != len(tiles) or any(not 0 <= g < groups for g in group):
        raise ValueError(f"group_of must name one of {groups} GPU(s) for each of the {len(tiles)} tiles")
    free = np.zeros(n)  # when each SM is next free
    first = np.full(n, np.inf)  # when each SM's first tile of the iteration starts (none yet: never)
    index = np.arange(n)
    sm, start, finish = [0] * len(tiles), [0.0] * len(tiles), [0.0] * len(tiles)
    sm_of, finish_of = np.zeros(len(tiles), np.int64), np.zeros(len(tiles))  # the same, for the deps' gathers
    marked = np.zeros(n, bool)
    read = {p for ds in deps for p in ds}  # tiles another tile reads in the iteration; the rest end it (sinks)
    sinks: dict[int, int] = {}  # per op, its tiles that end the iteration
    for t in tiles:
        if t.id not in read:
            sinks[t.op] = sinks.get(t.op, 0) + 1
    late = n  # SMs with no tile at the iteration's start
    makespan = 0.0
    for t in tiles:
        # the deps on SM s cost nothing more; every other dep costs a synchronisation: from SM s, the latest of the
        # other SMs' deps. So the SM of the latest dep (`top`; of several, the one a dep names first) can start at
        # the latest dep of the other SMs plus a synchronisation (`second`), and every other SM at the latest dep
        # plus one (`remote`)
        g = group[t.id]
        lo, hi = g * per, (g + 1) * per
        top, latest, remote, second = -1, 0.0, 0.0, 0.0
        on, at = None, None
        if deps[t.id]:
            ds = np.asarray(deps[t.id], np.int64)
            on, at = sm_of[ds], finish_of[ds]
            if groups > 1:  # a dep on another GPU's SM costs the peer's synchronisation too
                at = at + np.where((on < lo) | (on >= hi), peer_sync_ns, 0.0)
            latest = float(at.max())
            tops = on[at == latest]
            if (tops == tops[0]).all():
                top = int(tops[0])
            else:
                marked[tops] = True
                top = int(on[marked[on].argmax()])
                marked[tops] = False
            rest = at[on != top]
            remote = latest + device.sync_ns
            second = float(rest.max()) + device.sync_ns if rest.size else 0.0
        if policy == "round-robin":
            s = lo + t.id % per
            mine = at[on == s] if on is not None else ()
            local = float(mine.max()) if len(mine) else None
            others = remote if local is None or s != top else second
            best, best_start = s, max(float(free[s]), local or 0.0, others)
        else:
            begins = np.maximum(free, remote)
            if top >= 0:
                begins[top] = max(float(free[top]), latest, second)
            if groups > 1:
                begins[:lo] = np.inf
                begins[hi:] = np.inf
            soonest = float(begins.min())
            # of SMs where it starts as soon, the one whose iteration starts latest (or that has no tile yet): the
            # next iteration's first tiles, on the SMs that start early, then wait least behind this one. A tile that
            # ends the iteration (nothing reads it) may start up to SINK_SLACK of the schedule later for that: run
            # back to back, it then overlaps the next iteration's first tiles instead of holding some of them back
            slack = SINK_SLACK * max(makespan, soonest) \
                if t.id not in read and sinks[t.op] <= SINKS_PER_SM * late else 0.0
            if slack:
                cands = index[begins <= soonest + slack]
                best = int(cands[np.lexsort((cands, begins[cands], -first[cands]))[0]])
            else:
                cands = index[begins == soonest]
                best = int(cands[np.argmax(first[cands])])
            best_start = float(begins[best])
        late -= first[best] > 0.0 and best_start <= 0.0
        first[best] = min(first[best], best_start)
        sm[t.id], start[t.id] = best, best_start
        finish[t.id] = best_start + device.tile_ns(t)
        sm_of[t.id], finish_of[t.id] = best, finish[t.id]
        free[best] = finish[t.id]
        makespan = max(makespan, finish[t.id])
    return Placement(tuple(sm), tuple(start), tuple(finish))
