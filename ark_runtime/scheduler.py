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
    read = {p for ds in deps for p in ds}  # tiles another tile reads in the iteration; the rest end it (sinks)
    sinks: dict[int, int] = {}  # per op, its tiles that end the iteration
    for t in tiles:
        if t.id not in read:
            sinks[t.op] = sinks.get(t.op, 0) + 1
    late = n  # SMs with no tile at the iteration's start
    makespan = 0.0
    for t in tiles:
        ready_local: dict[int, float] = {}  # SM -> when the deps on that SM are done
        for p in deps[t.id]:
            if finish[p] >= ready_local.get(sm[p], 0.0):
                ready_local[sm[p]] = finish[p]
        # the deps on SM s cost nothing more; every other dep costs a synchronisation: from SM s, the latest of the
        # other SMs' deps (the first of the two latest SMs, unless that is s)
        g = group[t.id]
        lo, hi = g * per, (g + 1) * per
        if groups > 1:  # a dep on another GPU's SM costs the peer's synchronisation too
            ready_local = {k: v + (peer_sync_ns if not lo <= k < hi else 0.0) for k, v in ready_local.items()}
        top = sorted(ready_local.items(), key=lambda kv: -kv[1])[:2]
        ready_remote = top[0][1] + device.sync_ns if top else 0.0
        second = top[1][1] + device.sync_ns if len(top) > 1 else 0.0
        if policy == "round-robin":
            s = lo + t.id % per
            local = ready_local.get(s)
            others = ready_remote if local is None or s != top[0][0] else second
            best, best_start = s, max(float(free[s]), local or 0.0, others)
        else:
            begins = np.maximum(free, ready_remote)
            for s, local in ready_local.items():
                begins[s] = max(float(free[s]), local, second if s == top[0][0] else ready_remote)
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
        free[best] = finish[t.id]
        makespan = max(makespan, finish[t.id])
    return Placement(tuple(sm), tuple(start), tuple(finish))
