"""`WorldProcess`: one rank of a World run by its own process on its own GPU, as `torchrun` starts one process per
GPU. Every process builds the same World and lowers it alike; the memory that ranks share is exchanged through a
`torch.distributed` store as CUDA IPC handles:

    import torch.distributed as dist
    dist.init_process_group("nccl")                       # or any store: WorldProcess(..., store=TCPStore(...))
    rank = dist.get_rank()
    with WorldProcess(World([build(r) for r in range(2)]), rank, device=rank) as wp:
        wp.set("x", x)
        wp.run(10); wp.wait()
        y = wp.get("y")

What the ranks share lives in one allocation per rank, its arena: the tensors of the rank's memory that another rank
reads or writes (a recv's buffer, an all-reduce's inputs), at offsets every process computes from the joined graph
alone (`arena_layout`), then the rank's counters. Each process allocates its arena and publishes its IPC handle under
its plan's digest (every rank must have planned the same World on the same kind of GPU: a rank that planned another
waits under another key, and times out saying so), opens every peer's arena, and launches its kernel. A tensor that only its own rank touches is allocated as one GPU's are, or bound (`bind`, by the
rank's names); a tensor a peer touches cannot be bound (set() it). `stop()` stops the kernel, then waits (bounded)
until every peer has stopped too before closing the peers' arenas and freeing its own, so no kernel writes into
memory that is gone; a peer that died is waited for no longer than `close_timeout_s`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from ark_runtime.lower import LowerError, LowerOptions
from ark_runtime.runtime.faults import LoopError
from ark_runtime.runtime.runtime import Runtime
from ark_runtime.runtime.scoped import StopsOnExit
from ark_runtime.runtime.tensors import TensorMemory, tensor_memory
from ark_runtime.runtime.world_runtime import _rank_runtime
from ark_runtime.scheduler import PLACEMENTS, DeviceSpec, device_family
from ark_runtime.world import Joined, World
from ark_runtime.world_plan import LoweredWorld, lower_world

ARENA_ALIGN = 256  # bytes: where each shared tensor starts in its rank's arena
KEY_PREFIX = "arkdma/world"


@dataclass(frozen=True)
class ArenaLayout:
    offsets: dict[int, int]  # per shared tensor (joined model id) of the rank: its offset in the arena
    counters_at: int
    nbytes: int


def shared_tensors(j: Joined) -> set[int]:
    """The tensors (their roots) that an op of another rank than their memory's reads or writes."""
    out = set()
    for op in j.model.ops:
        r = j.op_rank[op.id]
        for t in (*op.inputs, op.output):
            root = j.model.tensors[t].root
            if j.tensor_rank[root] != r:
                out.add(root)
    return out


def arena_layout(j: Joined, rank: int, num_counters: int) -> ArenaLayout:
    """Rank `rank`'s arena: its shared tensors in id order, each ARENA_ALIGN-aligned, then its counters."""
    offsets, at = {}, 0
    for t in sorted(shared_tensors(j)):
        if j.tensor_rank[t] == rank:
            offsets[t] = at
            at += -(-j.model.tensors[t].nbytes // ARENA_ALIGN) * ARENA_ALIGN
    counters_at = at
    return ArenaLayout(offsets, counters_at, counters_at + 8 * max(num_counters, 1))


def plan_digest(lw: LoweredWorld) -> str:
    return hashlib.sha256(lw.plan.dumps().encode()).hexdigest()[:16]


class WorldProcess(StopsOnExit):
    @property
    def _stopping(self) -> str:
        return f"rank {self.rank}"

    def __init__(self, world: World, rank: int, device: int | None = None, *, store=None, bind: dict | None = None,
                 budget_s: float = 10.0, placement: str = "cost", sms: int | None = None, timeout_s: float = 300.0,
                 close_timeout_s: float = 30.0, fuse_chains: bool = True, split_k: bool | None = None):
        import cupy

        from driver.gpu.launch import require_gpu

        if not isinstance(world, World):
            raise LoopError(f"WorldProcess takes a World, not {type(world).__name__}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world.size:
            raise LoopError(f"rank={rank!r}: give this process's rank of the World, 0..{world.size - 1}")
        if placement not in PLACEMENTS:
            raise LoopError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        for name, value in (("budget_s", budget_s), ("timeout_s", timeout_s), ("close_timeout_s", close_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
                raise LoopError(f"{name} must be a number of seconds in (0, 3600], not {value!r}")
        bind = dict(bind or {})
        unknown = sorted(set(bind) - {t.name for t in world.models[rank].tensors})
        if unknown:
            raise LoopError(f"bind names {', '.join(unknown)}, which rank {rank}'s model has no tensor called")
        require_gpu()
        self.world, self.rank = world, rank
        self.store = store if store is not None else _default_store()
        self.device = cupy.cuda.Device().id if device is None else device
        self.close_timeout_s = close_timeout_s
        self.runtime: Runtime | None = None
        self._arena = None
        self._opened: list[int] = []
        self._state = "starting"
        with cupy.cuda.Device(self.device):
            props = cupy.cuda.runtime.getDeviceProperties(self.device)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int)
                                    or not 1 <= sms <= props["multiProcessorCount"]):
                raise LoopError(f"sms={sms!r}: give 1..{props['multiProcessorCount']}, or None")
            spec = DeviceSpec(name=device_family(name), num_sms=sms or props["multiProcessorCount"],
                              wgmma=cupy.cuda.Device().compute_capability == "90")
            try:
                self.lowered = lower_world(world, spec, LowerOptions(fuse_chains=fuse_chains, split_k=split_k,
                                                                     placement=placement))
            except LowerError as exc:
                raise LoopError(str(exc)) from None
            # each run of this World through the store takes the next generation (every rank adds one: the i-th
            # run's ranks read i * n + 1 .. (i + 1) * n), so keys a finished run left are not read again
            base = f"{KEY_PREFIX}/{plan_digest(self.lowered)}"
            generation = (int(self.store.add(f"{base}/runs", 1)) - 1) // world.size
            self._prefix = f"{base}/{generation}"
            try:
                self._start(props, bind, budget_s, timeout_s)
            except BaseException:
                self.stop(drain=False)
                raise

    def _start(self, props: dict, bind: dict, budget_s: float, timeout_s: float) -> None:
        import cupy

        j, lw, n = self.lowered.joined, self.lowered, self.world.size
        shared = shared_tensors(j)
        for name in bind:
            t = j.tensor(self.rank, name)
            if t.root in shared:
                raise LoopError(f"bind[{name!r}]: another rank reads or writes {name}, so it lives in this rank's "
                                "shared arena: set() it instead")
        num_counters = lw.ranks[self.rank].program.num_counters
        layouts = [arena_layout(j, r, num_counters) for r in range(n)]
        mine = layouts[self.rank]
        self._arena = cupy.cuda.Memory(mine.nbytes)  # its own cudaMalloc: the base an IPC handle names
        cupy.cuda.runtime.memset(self._arena.ptr, 0, mine.nbytes)
        handle = cupy.cuda.runtime.ipcGetMemHandle(self._arena.ptr)
        self.store.set(f"{self._prefix}/{self.rank}/arena", bytes(handle))
        bases = {self.rank: self._arena.ptr}
        keys = [f"{self._prefix}/{r}/arena" for r in range(n) if r != self.rank]
        try:
            self.store.wait(keys, _timedelta(timeout_s))
        except Exception as exc:  # noqa: BLE001 - the store's own error type differs between stores
            raise LoopError(f"rank {self.rank}: not every rank published its memory within {timeout_s:.0f} s (the "
                            f"peers must run the same World on the same kind of GPU: a different plan waits under "
                            f"another key): {exc}") from None
        for r in range(n):
            if r != self.rank:
                got = self.store.get(f"{self._prefix}/{r}/arena")
                bases[r] = cupy.cuda.runtime.ipcOpenMemHandle(got, cupy.cuda.runtime.cudaIpcMemLazyEnablePeerAccess)
                self._opened.append(bases[r])
        given = {f"r{self.rank}.{k}": v for k, v in bind.items()}
        memories: list = []
        for t in j.model.tensors:
            root, owner = t.root, j.tensor_rank[t.root]
            if t.alias is not None:
                memories.append(memories[t.alias])
            elif root in shared:
                memories.append(TensorMemory(bases[owner] + layouts[owner].offsets[root], self._arena, "device"))
            elif owner == self.rank:
                memories.append(tensor_memory(t, given.get(t.name), self.device))
            else:
                memories.append(TensorMemory(0, None, "device"))  # another rank's own: never touched here
        counters = cupy.ndarray((max(num_counters, 1),), cupy.uint64,
                                cupy.cuda.MemoryPointer(self._arena, mine.counters_at))
        peers = [bases[r] + layouts[r].counters_at for r in range(n)]
        self.runtime = _rank_runtime(lw, self.rank, self.device, props, memories, counters, peers, budget_s)
        self.runtime._begin()
        self._state = "running"

    # --- as a Runtime ---------------------------------------------------------------------------------
    def _rt(self) -> Runtime:
        if self.runtime is None:
            raise LoopError(f"rank {self.rank}'s runtime is {self._state}")
        return self.runtime

    def set(self, name: str, value) -> None:
        self._rt().set(f"r{self.rank}.{name}", value)

    def get(self, name: str):
        return self._rt().get(f"r{self.rank}.{name}")

    def run(self, iterations: int = 1) -> None:
        """Queue iterations on this rank; every rank's process queues as many (SPMD)."""
        self._rt().run(iterations)

    def wait(self, timeout: float = 30.0) -> None:
        try:
            self._rt().wait(timeout)
        except LoopError as exc:
            raise type(exc)(f"rank {self.rank} (GPU {self.device}): {exc}") from None

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop this rank's kernel, then, once every peer has stopped (or close_timeout_s passed), close the peers'
        memory and free this rank's. Idempotent."""
        import cupy

        if self._state == "stopped":
            return
        first = None
        if self.runtime is not None:
            try:
                self.runtime.stop(drain=drain, timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - the memory is still released below
                first = exc
        if self._arena is not None:
            self.store.set(f"{self._prefix}/{self.rank}/stopped", b"1")
            peers = [f"{self._prefix}/{r}/stopped" for r in range(self.world.size) if r != self.rank]
            deadline = time.monotonic() + self.close_timeout_s
            for key in peers:  # a peer that died is not waited for past the deadline
                try:
                    self.store.wait([key], _timedelta(max(0.01, deadline - time.monotonic())))
                except Exception:  # noqa: BLE001,S112 - a peer gone: its kernel no longer writes here
                    continue
        with cupy.cuda.Device(self.device):
            for ptr in self._opened:
                try:
                    cupy.cuda.runtime.ipcCloseMemHandle(ptr)
                except Exception as exc:  # noqa: BLE001
                    first = first or exc
        self._opened = []
        self._arena = None
        self._state = "stopped"
        if first is not None:
            raise first



def _timedelta(seconds: float):
    import datetime

    return datetime.timedelta(seconds=seconds)


def _default_store():
    """The default process group's store (torch.distributed initialized), else LoopError saying what to give."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            from torch.distributed.distributed_c10d import _get_default_store

            return _get_default_store()
    except ImportError:
        pass
    raise LoopError("WorldProcess needs a torch.distributed store to exchange memory handles: initialize the default "
                    "process group (torch.distributed.init_process_group) or pass store=")
