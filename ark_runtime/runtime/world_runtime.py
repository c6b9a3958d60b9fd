"""`WorldRuntime`: a World (ark_runtime/world.py) run by one process on several GPUs of one machine, rank r on
devices[r], each rank's loop kernel resident on its GPU:

    with WorldRuntime(World([build(0), build(1)])) as wr:
        wr.set(0, "x", x0); wr.set(1, "x", x1)
        wr.run(10); wr.wait()
        out = wr.get(1, "y")

The World is lowered once (world_plan.lower_world); every tensor is allocated on the GPU of the rank whose memory
holds it (or bound there: bind[r] by rank r's names), and every GPU maps every other's memory (CUDA peer access), so a
tile reads or writes a peer's tensor as its own and adds to a peer's counters. Ranks may share a GPU (a loopback
World, to test a program on one GPU): each then takes `sms` of its SMs, side by side. Each rank is a Runtime of its own
(`ranks[r]`: profile, iteration_ns) started from its part of the World's plan; run, wait and stop act on every
rank, and report() says, for each op that moves bytes between ranks, which rank's SMs moved how many of whose. A rank that faults, or waits past the budget on a peer that never signals (a peer that died), raises
LoopFault naming the rank, the tile and the op waited for, and every rank is stopped.

Peers must reach each other's memory (NVLink or PCIe peer access); GPUs that cannot are refused. Copies to host
memory inside a World are not taken yet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ark_runtime.lower import LowerError, LowerOptions, Lowered
from ark_runtime.runtime.faults import LoopError
from ark_runtime.runtime.runtime import Runtime, check_iterations, check_timeout
from ark_runtime.runtime.scoped import StopsOnExit
from ark_runtime.runtime.tensors import overlapping_binds, tensor_memory
from ark_runtime.scheduler import PLACEMENTS, DeviceSpec, device_family
from ark_runtime.world import World
from ark_runtime.world_plan import LoweredWorld, lower_world


@dataclass(frozen=True)
class WorldTransfer:
    rank: int  # the rank whose SMs ran the op
    op: int
    kind: str
    tensor: str  # the op's output
    peers: tuple[int, ...]  # the other ranks whose memory it read or wrote
    bytes: int  # of theirs, an iteration
    path: str  # "sm": the SMs' loads and stores over the link
    time_us: float  # the last iteration's, by the GPU clock: the op's longest tile


def enable_peer_access(devices: Sequence[int]) -> None:
    """Every device maps every other's memory; LoopError naming a pair that cannot."""
    from cupy.cuda import runtime

    for a in devices:
        for b in devices:
            if a == b:
                continue
            if not runtime.deviceCanAccessPeer(a, b):
                raise LoopError(f"GPU {a} cannot access GPU {b}'s memory (no peer access between them): a World in "
                                "one process needs every pair of its GPUs to reach each other (NVLink or PCIe peer "
                                "access)")
            with _on(a):
                try:
                    runtime.deviceEnablePeerAccess(b)
                except runtime.CUDARuntimeError as exc:
                    if "PeerAccessAlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                        raise


@contextlib.contextmanager
def _on(device: int):
    import cupy

    with cupy.cuda.Device(device):
        yield


class WorldRuntime(StopsOnExit):
    _stopping = "the World"

    def __init__(self, world: World, devices: Sequence[int] | None = None, *, bind: Sequence[dict] | None = None,
                 budget_s: float = 10.0, placement: str = "cost", fuse_chains: bool = True,
                 split_k: bool | None = None, sms: int | None = None):
        import cupy

        from driver.gpu.launch import require_gpu

        if not isinstance(world, World):
            raise LoopError(f"WorldRuntime takes a World, not {type(world).__name__}")
        n = world.size
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not 0 < budget_s <= 3600:
            raise LoopError(f"budget_s must be a number of seconds in (0, 3600], not {budget_s!r}")
        if placement not in PLACEMENTS:
            raise LoopError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        bind = [{} for _ in range(n)] if bind is None else list(bind)
        if len(bind) != n or not all(isinstance(b, dict) for b in bind):
            raise LoopError(f"bind must be a list of {n} dicts (rank r's tensors by its names), not {bind!r}")
        for r, b in enumerate(bind):
            unknown = sorted(set(b) - {t.name for t in world.models[r].tensors})
            if unknown:
                raise LoopError(f"bind[{r}] names {', '.join(unknown)}, which rank {r}'s model has no tensor called")
        require_gpu()
        count = cupy.cuda.runtime.getDeviceCount()
        devices = list(range(n)) if devices is None else list(devices)
        if len(devices) != n or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < count
                                        for d in devices):
            raise LoopError(f"devices must name a GPU of this machine's {count} (0..{count - 1}) for each of the "
                            f"{n} ranks, not {devices!r}")
        self.world, self.devices = world, devices
        self.ranks: list[Runtime] = []
        enable_peer_access(sorted(set(devices)))
        props = [cupy.cuda.runtime.getDeviceProperties(d) for d in devices]
        fewest = min(p["multiProcessorCount"] // devices.count(d) for p, d in zip(props, devices))
        shared = len(set(devices)) < n  # ranks sharing a GPU (a loopback World): each takes its share of the SMs
        if sms is None and shared:
            raise LoopError(f"ranks share a GPU ({devices}): give sms, each rank's SMs, so that the ranks on a GPU "
                            f"fit on it side by side (at most {fewest} here)")
        if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= fewest):
            raise LoopError(f"sms={sms!r}: give 1..{fewest} (each rank's SMs: the fewest a rank's share of its GPU "
                            "has), or None")
        name = props[0]["name"].decode() if isinstance(props[0]["name"], bytes) else str(props[0]["name"])
        with _on(devices[0]):
            hopper = cupy.cuda.Device().compute_capability == "90"
        spec = DeviceSpec(name=device_family(name), num_sms=sms or fewest, wgmma=hopper)
        try:
            self.lowered: LoweredWorld = lower_world(world, spec, LowerOptions(fuse_chains=fuse_chains,
                                                                                split_k=split_k,
                                                                                placement=placement))
        except LowerError as exc:
            raise LoopError(str(exc)) from None
        j = self.lowered.joined
        host = [j.model.tensors[op.output].name for op in j.model.ops
                if op.kind == "copy" and j.model.tensors[op.output].placement == "host"]
        if host:
            raise LoopError(f"copies to host memory inside a World are not taken yet ({', '.join(host)}); copy on "
                            "the host after get()")
        try:
            memories = self._memory(bind)
            counters = []
            for d in devices:
                with _on(d):
                    counters.append(cupy.zeros(max(self.lowered.ranks[0].program.num_counters, 1), cupy.uint64))
            peers = [c.data.ptr for c in counters]
            for r in range(n):  # every rank made ready, then every kernel launched: allocating (the next rank's
                with _on(devices[r]):  # memory, its pinned control block) would wait for a resident kernel
                    self.ranks.append(_rank_runtime(self.lowered, r, devices[r], props[r], memories, counters[r],
                                                    peers, budget_s))
            for r, rt in enumerate(self.ranks):
                with _on(devices[r]):
                    rt._begin()
        except BaseException:
            self.stop(drain=False)
            raise

    def _memory(self, bind: list[dict]) -> list:
        """Every tensor of the joined model on its rank's GPU (bound, or new), a state's writes in its memory."""
        j = self.lowered.joined
        out: list = []
        given = {}
        for r, b in enumerate(bind):
            for name, value in b.items():
                given[f"r{r}.{name}"] = value
        for t in j.model.tensors:
            if t.alias is not None:
                if t.name in given:
                    raise LoopError(f"bind: {t.name} is state {j.model.tensors[t.alias].name} as written in place; "
                                    "bind the state")
                out.append(out[t.alias])
                continue
            device = self.devices[j.tensor_rank[t.id]]
            with _on(device):
                out.append(tensor_memory(t, given.get(t.name), device))
        overlap = overlapping_binds(j.model, out, set(given))
        if overlap:
            raise LoopError(overlap)
        return out

    # --- tensors and runs ----------------------------------------------------------------------------
    def _rank(self, rank) -> Runtime:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(self.ranks):
            raise LoopError(f"rank={rank!r}: give a rank of the World, 0..{self.world.size - 1}")
        return self.ranks[rank]

    def set(self, rank: int, name: str, value) -> None:
        """Rank `rank`'s tensor `name` (by its model's name) from a host value, between runs."""
        rt = self._rank(rank)
        with _on(self.devices[rank]):
            rt.set(f"r{rank}.{name}", value)

    def get(self, rank: int, name: str):
        rt = self._rank(rank)
        with _on(self.devices[rank]):
            return rt.get(f"r{rank}.{name}")

    def run(self, iterations: int = 1) -> None:
        """Queue `iterations` more runs of the program on every rank."""
        check_iterations(iterations)
        for r, rt in enumerate(self.ranks):
            with _on(self.devices[r]):
                rt.run(iterations)

    def wait(self, timeout: float = 30.0) -> None:
        """Until every rank has done every queued iteration; on a fault or timeout of any rank, every rank is
        stopped and the first rank's error raised, naming it."""
        check_timeout(timeout)
        for r, rt in enumerate(self.ranks):
            try:
                with _on(self.devices[r]):
                    rt.wait(timeout)
            except LoopError as exc:
                self.stop(drain=False)
                raise type(exc)(f"rank {r} (GPU {self.devices[r]}): {exc}") from None

    def report(self) -> list[WorldTransfer]:
        """Every op that moves bytes between ranks (a copy into a peer's memory, reduce_peers, gather_peers): which
        rank ran it, the peers it read or wrote, the bytes of theirs it moved, its path (SM loads and stores: "sm")
        and its last time by the GPU clock (its longest tile), between runs."""
        import numpy as np

        j = self.lowered.joined
        out = []
        for r, rt in enumerate(self.ranks):
            with _on(self.devices[r]):
                rt._idle("report")
                ns = rt._arrays["tile_ns"].get(stream=rt._io).reshape(-1, 2)
            for op in j.model.ops:
                if j.op_rank[op.id] != r:
                    continue
                peers = sorted({j.tensor_rank[j.model.tensors[t].root] for t in (*op.inputs, op.output)} - {r})
                if not peers:
                    continue
                moved = sum(j.model.tensors[t].nbytes for t in (*op.inputs, op.output)
                            if j.tensor_rank[j.model.tensors[t].root] != r)
                tiles = [t["id"] for t in self.lowered.plan.tiles if t["op"] == op.id]
                took = int((ns[tiles, 1].astype(np.int64) - ns[tiles, 0].astype(np.int64)).max())
                out.append(WorldTransfer(r, op.id, op.kind, j.model.tensors[op.output].name, tuple(peers), moved,
                                         self.lowered.ranks[r].copy_paths.get(op.id, "sm"), max(took, 0) / 1e3))
        return out

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop every rank (after its queued iterations with `drain`); idempotent."""
        first = None
        for r, rt in enumerate(self.ranks):
            try:
                with _on(self.devices[r]):
                    rt.stop(drain=drain, timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - every rank is stopped; the first error is raised after
                drain = False
                first = first or exc
        if first is not None:
            raise first



def _rank_runtime(lw: LoweredWorld, rank: int, device: int, props: dict, memories: list, counters, peers: list[int],
                  budget_s: float) -> Runtime:
    """Rank `rank`'s Runtime, launched on `device` (the current device) from its part of the World's plan."""
    import cupy

    from ark_runtime.runtime.graph_copies import CopyGraphs

    per = lw.plan.world["sms_per_rank"]
    part = lw.ranks[rank]
    plan = replace(lw.plan, streams=lw.plan.streams[rank * per:(rank + 1) * per])
    rt = Runtime.__new__(Runtime)
    rt._state = "starting"
    rt._kernel, rt._dma, rt._graphs = None, None, CopyGraphs()
    rt.source_model = lw.world.models[rank]
    rt._cupy, rt._device_id = cupy, device
    rt.device_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    rt._spec, rt._options = lw.device, lw.options
    rt.graph_ahead = False
    rt._paths_by_name = {}
    rt._paths = dict(part.copy_paths)
    rt._world_counters, rt._peer_counters = counters, list(peers)
    rt.lowered = Lowered(lw.world.models[rank], lw.joined.model, lw.device, lw.options, plan, part.source,
                         part.copy_paths, part.program)
    try:
        rt._start_lowered(props, memories, budget_s, defer=True)
    except BaseException:
        with contextlib.suppress(Exception):
            rt.stop(drain=False)
        raise
    return rt
