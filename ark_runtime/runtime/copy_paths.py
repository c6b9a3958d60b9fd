"""How each copy op moves its bytes: on the SMs, through a DMA engine's queue, or as a device graph on a copy engine;
choosing the path per copy (by the name of the tensor it writes), opening the DMA engine a path needs, and whether
the device-graph path can run here."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ark_runtime.model import Model
from ark_runtime.runtime.faults import LoopError

SM_COPY_MAX = 64 * 1024  # "auto" copies up to this many bytes with the CTA's own stores; larger ones by DMA
COPY_PATHS = ("auto", "sm", "engine", "graph")
DMA_ENGINES = ("card", "software-cuda")  # engines whose queues GPU code can post to, best first
# Device launches one run of the kernel's graph makes, below the fire-and-forget budget (120; a probe on the H100
# got 119 through): the kernel relaunches its graph every GRAPH_LAUNCHES_PER_RUN // (graph copies) iterations.
GRAPH_LAUNCHES_PER_RUN = 118
GRAPH_COPIES_ENV = "ARK_GRAPH_COPIES"  # "0": no copy takes the device-graph path


def graph_copies_unavailable() -> str | None:
    """None when copies can take the device-graph path here, else why not."""
    import cupy

    from driver.gpu.compile import cudadevrt_path

    if os.environ.get(GRAPH_COPIES_ENV, "1") == "0":
        return f"turned off by {GRAPH_COPIES_ENV}=0"
    if cupy.cuda.runtime.driverGetVersion() < 12000:
        return "device graph launch needs a CUDA 12 or later driver"
    if cudadevrt_path() is None:
        return ("no libcudadevrt.a (the CUDA device runtime, linked into a kernel that launches graphs): install "
                "the `gpu` extra or a CUDA toolkit")
    return None


@dataclass
class DmaEngine:
    """An open DMA engine with one queue GPU code posts to; regions registered for the copies' tensors."""

    name: str
    engine: object
    device: object  # driver.device.Device
    queue: object  # driver.gpu.queue.GpuQueue

    def region(self, ptr: int, nbytes: int, owner) -> int:
        """A region over [ptr, ptr + nbytes), `owner` kept alive while it is registered; its id."""
        return self.device.regions.register_unsafe(ptr, nbytes, keep=owner).id

    def status(self) -> str:
        return self.queue.status().describe()

    def close(self) -> None:
        self.queue.close()
        self.device.close()


def open_engine(engine: str, required: bool = True) -> DmaEngine | None:
    """The named engine ("auto": the first of DMA_ENGINES that can run) with one queue; None when it cannot run
    here and not `required`, else LoopError saying why."""
    from ark_runtime import engines
    from driver.device import Device
    from driver.gpu.queue import GpuQueue

    names = DMA_ENGINES if engine == "auto" else (engine,)
    reasons = []
    for name in names:
        reason = engines.provider(name).unavailable_reason()
        if reason is None:
            opened = engines.open_engine(name, num_queues=1, slots=64, num_regions=16)
            device = Device(opened)
            return DmaEngine(opened.name, opened, device, GpuQueue(device, 0, budget_s=5.0))
        reasons.append(f"{name}: {reason}")
    if engine != "auto" and required:
        raise LoopError(f"engine {engine} cannot run here: {'; '.join(reasons)}")
    return None


def choose_copy_paths(model: Model, engine: str | None, copy_path: str) -> tuple[dict[str, str], DmaEngine | None]:
    """Each copy op's path, by the name of the tensor it writes: "sm", "graph" or "engine:<name>", and the DMA
    engine opened for the "engine" ones (None when none is).

    "auto" keeps copies up to SM_COPY_MAX on the SMs (fastest for small ones) and gives larger ones to a copy
    engine, without SMs: the card's queue when a card is open, else a device graph, else the software engine's
    queue, else the SMs. `engine` names the DMA engine ("auto": the card, then software-cuda; None: none)."""
    copies = [op for op in model.ops if op.kind == "copy"]
    if not copies:
        return {}, None
    name_of = {op.id: model.tensors[op.output].name for op in copies}
    if copy_path == "sm":
        return {name_of[op.id]: "sm" for op in copies}, None
    if copy_path == "graph":
        reason = graph_copies_unavailable()
        if reason:
            raise LoopError(f"copy_path='graph': {reason}")
        if len(copies) > GRAPH_LAUNCHES_PER_RUN:
            raise LoopError(f"copy_path='graph' takes at most {GRAPH_LAUNCHES_PER_RUN} copy ops (each launches "
                            f"a graph every iteration); this model has {len(copies)}: give the rest 'engine'")
        return {name_of[op.id]: "graph" for op in copies}, None
    large = [op for op in copies if copy_path == "engine" or model.tensors[op.output].nbytes > SM_COPY_MAX]
    paths = {name_of[op.id]: "sm" for op in copies}
    if not large:
        return paths, None
    graphs_ok = graph_copies_unavailable() is None
    dma = None
    if copy_path == "engine" or engine in DMA_ENGINES:
        if engine not in (None, "none"):
            dma = open_engine(engine)
        if copy_path == "engine" and dma is None:
            raise LoopError("copy_path='engine' but no DMA engine is open here (engine=None, or none can run)")
    elif engine == "auto":
        dma = open_engine("card", required=False)
        if dma is None and not graphs_ok:
            dma = open_engine("software-cuda", required=False)
    graphs = 0
    for op in large:
        if dma is not None and (dma.name == "card" or copy_path == "engine" or engine == "software-cuda"):
            paths[name_of[op.id]] = f"engine:{dma.name}"
        elif graphs < GRAPH_LAUNCHES_PER_RUN and graphs_ok:
            paths[name_of[op.id]] = "graph"
            graphs += 1
        elif dma is not None:
            paths[name_of[op.id]] = f"engine:{dma.name}"
    return paths, dma
