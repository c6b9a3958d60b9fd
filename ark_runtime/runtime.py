"""The loop-kernel runtime: a model launched once as one resident kernel (one CTA per SM), run again and
again by writing a word in mapped memory, with no kernel launch per run.

    with Runtime(model) as rt:
        rt.set("x", x)            # or Runtime(model, bind={"x": cupy_array_or_torch_tensor}): no copy
        rt.run(10)                # ten iterations, queued to the resident kernel
        rt.wait()                 # LoopFault / LoopTimeout instead of a hang
        y = rt.get("out")         # NumPy (float32 for bf16)

States: launched -> (run / wait)* -> stopped; a fault or a timeout stops the kernel, the GPU stays usable,
and the Runtime refuses further runs. run() first waits for the work queued on the caller's current stream
(CuPy's, and PyTorch's once it is in use), so inputs written by other kernels are in place when the resident
kernel reads them.

While the kernel is resident, CUDA calls that wait for the whole device wait for it, and so never return:
allocating or freeing GPU or pinned memory (cudaMalloc, cudaFree, cudaHostAlloc; a CuPy or PyTorch
expression that needs a new buffer from its pool) and loading a module, which includes a kernel's first
launch (lazy loading). Allocate and launch once what a program needs while the kernel runs before the
Runtime starts, read results with copies (get(), .get(), .cpu()), or stop() first. One Runtime per process
runs at a time for the same reason. A kernel already loaded runs on another stream while the loop kernel is
resident: the loop kernel uses no local memory (its arguments are __grid_constant__), and on the H100 we measured
no other kernel started while one that does was resident.
"""

from __future__ import annotations

import math
import os
import sys
import time
import weakref
from dataclasses import dataclass, replace

import numpy as np

from ark_runtime.host_values import from_bits, to_bits
from ark_runtime.kernel.codegen import INCLUDE_DIR, THREADS, tensor_maps_at
from ark_runtime.ops.matmul import SM90_TMA_ENV
from ark_runtime.kernel.program import build_program, tensor_words
from ark_runtime.kernel.codes import (FAULT_NAMES, FINISHED_WORDS, GRAPH_AHEAD, GRAPH_GATE, GRAPH_POOL, GRAPH_WAIT_TIMEOUT,
                                      GRAPH_WORDS, RELAUNCH_FAILED, RING)
from ark_runtime.kernel.records import CONTROL_DTYPE, PROGRAM_DTYPE, expected_offsets
from ark_runtime.model import Model
from ark_runtime.lower import SPLIT_K_ENV, LowerError, LowerOptions, lower
from ark_runtime.plan import Plan
from ark_runtime.profile import Profile, build_profile
from ark_runtime.scheduler import PLACEMENTS, DeviceSpec
from ark_runtime.tiling import switched_off

SM_COPY_MAX = 64 * 1024  # "auto" copies up to this many bytes with the CTA's own stores; larger ones by DMA
COPY_PATHS = ("auto", "sm", "engine", "graph")
DMA_ENGINES = ("card", "software-cuda")  # engines whose queues GPU code can post to, best first
# Device launches one run of the kernel's graph makes, below the fire-and-forget budget (120; a probe on the H100
# got 119 through): the kernel relaunches its graph every GRAPH_LAUNCHES_PER_RUN // (graph copies) iterations.
GRAPH_LAUNCHES_PER_RUN = 118
GRAPH_AHEAD_ENV = "ARK_GRAPH_AHEAD"  # "0": graph copies launched at the copy, never ahead behind a gate (copy.cuh)
GATE_THREADS = 32  # ark_graph_gate's block


TENSOR_ALIGN = 16  # bytes: where every tensor the kernel reads or writes must start


class LoopError(RuntimeError):
    """The runtime cannot do what was asked; the message says why and what to do."""


class LoopFault(LoopError):
    """The resident kernel stopped on a fault; the message names the tile, its op and what went wrong."""


class LoopTimeout(LoopError):
    """The kernel did not finish the iterations asked for in time; it was stopped."""


@dataclass(frozen=True)
class TransferReport:
    op: int
    tensor: str
    path: str  # "engine:<name>", "graph" (a device graph on a copy engine) or "sm"
    bytes: int
    time_us: float  # the last iteration's copy by the GPU clock: its longest tile (an SM copy's tiles run side by side)
    uses_sms: bool


_RESIDENT: weakref.WeakSet = weakref.WeakSet()  # runtimes whose kernel is on the GPU now


def _graph_fault(detail: int) -> str:
    """What a DEVICE_GRAPH fault's detail (copy.cuh, loop.cuh) means."""
    from cupy.cuda.runtime import CUDARuntimeError

    if detail == GRAPH_WAIT_TIMEOUT:
        return "the copy's device graph was launched but had not finished when the budget (budget_s) ran out"
    if detail >= RELAUNCH_FAILED:
        return f"relaunching the kernel's own graph (a tail launch) failed: {CUDARuntimeError(detail - RELAUNCH_FAILED)}"
    return f"the device-side launch of the copy's graph failed: {CUDARuntimeError(detail)}"


def graph_copies_unavailable() -> str | None:
    """None when copies can take the device-graph path here, else why not."""
    import cupy

    from driver.gpu.compile import cudadevrt_path

    if os.environ.get("ARK_GRAPH_COPIES", "1") == "0":
        return "turned off by ARK_GRAPH_COPIES=0"
    if cupy.cuda.runtime.driverGetVersion() < 12000:
        return "device graph launch needs a CUDA 12 or later driver"
    if cudadevrt_path() is None:
        return ("no libcudadevrt.a (the CUDA device runtime, linked into a kernel that launches graphs): install "
                "the `gpu` extra or a CUDA toolkit")
    return None

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int32": "int32"}


def _dtype_of(obj) -> str | None:
    name = str(getattr(obj, "dtype", "")).replace("torch.", "")
    return _DTYPES.get(name)


class Runtime:
    def __init__(self, model: Model, *, engine: str | None = "auto", bind: dict | None = None,
                 sms: int | None = None, budget_s: float = 10.0, copy_path: str = "auto", placement: str = "cost",
                 fuse_chains: bool = True, split_k: bool | None = None):
        import cupy

        from driver.gpu.launch import require_gpu

        if not isinstance(model, Model):
            raise LoopError(f"Runtime takes a Model, not {type(model).__name__}")
        if copy_path not in COPY_PATHS:
            raise LoopError(f"copy_path {copy_path!r} is not one of {', '.join(COPY_PATHS)}")
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not 0 < budget_s <= 3600:
            raise LoopError(f"budget_s must be a number of seconds in (0, 3600], not {budget_s!r}")
        if split_k not in (None, True, False):
            raise LoopError(f"split_k is True, False or None (None: ${SPLIT_K_ENV}, on unless 0), not {split_k!r}")
        if not isinstance(fuse_chains, bool):
            raise LoopError(f"fuse_chains is True or False, not {fuse_chains!r}")
        if engine not in (None, "none", "auto", *DMA_ENGINES):
            raise LoopError(f"engine {engine!r} cannot take copies from GPU code; use one of "
                            f"{', '.join(DMA_ENGINES)}, 'auto' or None")
        if placement not in PLACEMENTS:
            raise LoopError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or sms < 1):
            raise LoopError(f"sms={sms!r}: give a positive int, at most the GPU's SMs (None: all of them)")
        bind = dict(bind or {})
        names = {t.name for t in model.tensors}
        unknown = sorted(set(bind) - names)
        if unknown:
            raise LoopError(f"bind names {', '.join(unknown)}, which model {model.name!r} has no tensor called")
        require_gpu()
        for other in list(_RESIDENT):
            if other._state == "running":
                raise LoopError(f"the loop kernel of model {other.model.name!r} is still resident; stop() that "
                                "Runtime first (CUDA cannot load another module while it runs)")
        self.source_model = model
        self._cupy = cupy
        self._state = "starting"
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        num_sms = props["multiProcessorCount"] if sms is None else sms
        if isinstance(num_sms, bool) or not isinstance(num_sms, int) or not 1 <= num_sms <= props["multiProcessorCount"]:
            raise LoopError(f"sms={sms!r}: this GPU has {props['multiProcessorCount']} SMs; give 1..that many")
        self.device_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        hopper = cupy.cuda.Device().compute_capability == "90"  # wgmma: sm_90a only
        self._spec = DeviceSpec(num_sms=num_sms, wgmma=hopper)
        self._options = LowerOptions(fuse_chains=fuse_chains, split_k=split_k, placement=placement)
        self._engine = self._device = self._queue = None
        self.graph_ahead = False  # graph copies launched ahead, held at a gate (_start; copy.cuh)
        self._graphs: list = []  # the graph copies' graphs, then the kernel's own (device_graphs.DeviceGraph)
        self._stream = None
        self._paths_by_name = self._choose_copy_paths(engine, copy_path)
        try:
            self._start(num_sms, placement, bind, budget_s)
        except BaseException:
            self.stop()  # the engine opened for the copies, if any
            raise

    # --- set-up ----------------------------------------------------------------------------------
    def _start(self, num_sms: int, placement: str, bind: dict, budget_s: float) -> None:
        """Plan (copies on the paths chosen), generate, compile, allocate, register and launch."""
        from driver.gpu import compile

        kinds = tuple((name, path.split(":")[0]) for name, path in self._paths_by_name.items())
        try:
            self.lowered = lower(self.source_model, self._spec, replace(self._options, copy_paths=kinds))
        except LowerError as exc:
            raise LoopError(str(exc)) from None
        self.model = model = self.lowered.model
        gone = sorted(set(bind) - {t.name for t in model.tensors})
        if gone:
            raise LoopError(f"bind names {', '.join(gone)}, which the kernel keeps in registers only (fused into "
                            "an elementwise chain); bind the chain's inputs and result, or make it a model output")
        self.plan: Plan = self.lowered.plan
        self.source = self.lowered.source
        self._paths = {op: self._paths_by_name[model.tensors[model.ops[op].output].name]
                       for op in self.lowered.copy_paths}
        self._graph_ops = self.lowered.graph_ops
        cupy = self._cupy
        try:
            module = compile.load(self.source.text, extra=(f"-I{INCLUDE_DIR}",), cooperative=True,
                                  rdc=self.source.graph_copies)
        except compile.CompileError as exc:
            if not self._graph_ops:
                raise
            raise LoopError(f"the kernel with device-graph copies could not be built: {exc}; use copy_path='sm' "
                            "or 'engine'") from None
        self._check_layout(module)
        self._fn = module.get_function("ark_loop")
        # opted in whatever the size: the kernel's own static arrays count against the 48 KiB default too
        self._fn.max_dynamic_shared_size_bytes = self.source.smem_bytes
        self._keep: list = []
        self._io = cupy.cuda.Stream(non_blocking=True)  # set() and get(): never ordered behind the loop kernel
        self._tensors = [self._memory(t, bind.get(t.name)) for t in model.tensors]
        self._copies = np.zeros((max(len(model.ops), 1), 4), np.int32)
        for op, path in self._paths.items():
            if path.startswith("engine:"):
                src, dst = model.ops[op].inputs[0], model.ops[op].output
                self._copies[op] = (1, self._region(src), self._region(dst), 0)
        self._gate = module.get_function("ark_graph_gate") if self._graph_ops else None
        self.graph_ahead = self._gate is not None and not switched_off(GRAPH_AHEAD_ENV) and self._gate_fits()
        for g, op in enumerate(self._graph_ops):
            self._copies[op] = (2, g, int(self.graph_ahead), 0)
        self._launch(budget_s)

    def _gate_fits(self) -> bool:
        """Whether ark_graph_gate can start while the loop kernel runs: a block of it fits beside the loop kernel's
        on an SM, and the loop kernel uses no local memory (on the H100 we measured, while a kernel with any local
        memory was resident no other kernel started, whatever room the SMs had). Else a copy launched ahead would
        never start, and the kernel launches each graph copy at the copy, without a gate."""
        from driver.gpu.launch import fit_together

        props = self._cupy.cuda.runtime.getDeviceProperties(self._cupy.cuda.Device().id)
        loop, gate = self._fn.attributes, self._gate.attributes
        return loop["local_size_bytes"] == 0 and fit_together(
            props, [(THREADS, loop["num_regs"], loop["shared_size_bytes"] + self.source.smem_bytes),
                    (GATE_THREADS, gate["num_regs"], gate["shared_size_bytes"])])

    def _check_layout(self, module) -> None:
        out = self._cupy.zeros(len(expected_offsets()), self._cupy.uint64)
        module.get_function("ark_layout")((1,), (1,), (out,))
        got = [int(v) for v in out.get()]
        if got != expected_offsets():
            raise LoopError(f"loop.cuh's Control/Program differ from ark_runtime/kernel/records.py: the GPU sees "
                            f"offsets {got}, records.py says {expected_offsets()}")

    def _memory(self, t, given):
        """(address, owner, kind) of tensor t: the bound array, else new GPU or pinned host memory."""
        cupy = self._cupy
        if given is not None:
            from driver.gpu.arrays import span_of

            try:
                span = span_of(given)
            except Exception as exc:
                raise LoopError(f"bind[{t.name!r}]: {exc}") from None
            dtype = _dtype_of(given)
            if dtype != t.dtype and not (t.dtype == "bf16" and str(getattr(given, "dtype", "")) == "uint16"):
                raise LoopError(f"bind[{t.name!r}] is {getattr(given, 'dtype', '?')}; tensor {t.name} is {t.dtype}")
            if span.nbytes != t.nbytes:
                raise LoopError(f"bind[{t.name!r}] holds {span.nbytes} bytes; tensor {t.name} {t.shape} needs {t.nbytes}")
            want = "device" if t.placement == "device" else "host"
            if span.kind != want:
                raise LoopError(f"bind[{t.name!r}] is {span.kind} memory; tensor {t.name} is placed on the {want}")
            if span.ptr % TENSOR_ALIGN:
                raise LoopError(f"bind[{t.name!r}] starts at {span.ptr:#x}, not on a {TENSOR_ALIGN}-byte boundary: the "
                                f"kernel loads tensors in {TENSOR_ALIGN}-byte pieces (vector loads, cp.async, TMA); "
                                "bind an array that starts on one (fresh CuPy and PyTorch allocations do), not a view "
                                "at an offset")
            if span.kind == "device" and span.device_id != cupy.cuda.Device().id:
                raise LoopError(f"bind[{t.name!r}] is on GPU {span.device_id}; this runtime runs on GPU "
                                f"{cupy.cuda.Device().id}")
            self._keep.append(given)
            return span.ptr, given, span.kind
        if t.placement == "host":
            mem = cupy.cuda.alloc_pinned_memory(t.nbytes)
            ptr = cupy.cuda.runtime.pointerGetAttributes(mem.ptr).devicePointer
            return ptr, mem, "host"
        arr = cupy.zeros(t.nbytes, cupy.uint8)
        return arr.data.ptr, arr, "device"

    def _choose_copy_paths(self, engine: str | None, copy_path: str) -> dict[str, str]:
        """Each copy op's path, by the name of the tensor it writes: "sm", "graph" or "engine:<name>" (opening the
        engine when one is wanted).

        "auto" keeps copies up to SM_COPY_MAX on the SMs (fastest for small ones) and gives larger ones to a copy
        engine, without SMs: the card's queue when a card is open, else a device graph, else the software engine's
        queue, else the SMs. `engine` names the DMA engine ("auto": the card, then software-cuda; None: none)."""
        model = self.source_model
        copies = [op for op in model.ops if op.kind == "copy"]
        if not copies:
            return {}
        if copy_path == "sm":
            return {model.tensors[op.output].name: "sm" for op in copies}
        if copy_path == "graph":
            reason = graph_copies_unavailable()
            if reason:
                raise LoopError(f"copy_path='graph': {reason}")
            if len(copies) > GRAPH_LAUNCHES_PER_RUN:
                raise LoopError(f"copy_path='graph' takes at most {GRAPH_LAUNCHES_PER_RUN} copy ops (each launches "
                                f"a graph every iteration); this model has {len(copies)}: give the rest 'engine'")
            return {model.tensors[op.output].name: "graph" for op in copies}
        large = [op for op in copies if copy_path == "engine" or model.tensors[op.output].nbytes > SM_COPY_MAX]
        paths = {model.tensors[op.output].name: "sm" for op in copies}
        if not large:
            return paths
        graphs_ok = graph_copies_unavailable() is None
        if copy_path == "engine" or engine in ("card", "software-cuda"):
            if engine not in (None, "none"):
                self._open_engine(engine)
            if copy_path == "engine" and self._device is None:
                raise LoopError("copy_path='engine' but no DMA engine is open here (engine=None, or none can run)")
        elif engine == "auto":
            self._open_engine("card", required=False)
            if self._device is None and not graphs_ok:
                self._open_engine("software-cuda", required=False)
        graphs = 0
        for op in large:
            if self._device is not None and (self._engine.name == "card" or copy_path == "engine"
                                             or engine == "software-cuda"):
                paths[model.tensors[op.output].name] = f"engine:{self._engine.name}"
            elif graphs < GRAPH_LAUNCHES_PER_RUN and graphs_ok:
                paths[model.tensors[op.output].name] = "graph"
                graphs += 1
            elif self._device is not None:
                paths[model.tensors[op.output].name] = f"engine:{self._engine.name}"
        return paths

    def _open_engine(self, engine: str, required: bool = True) -> None:
        from ark_runtime import engines
        from driver.device import Device
        from driver.gpu.queue import GpuQueue

        names = DMA_ENGINES if engine == "auto" else (engine,)
        reasons = []
        for name in names:
            reason = engines.provider(name).unavailable_reason()
            if reason is None:
                self._engine = engines.open_engine(name, num_queues=1, slots=64, num_regions=16)
                break
            reasons.append(f"{name}: {reason}")
        if self._engine is None:
            if engine != "auto" and required:
                raise LoopError(f"engine {engine} cannot run here: {'; '.join(reasons)}")
            return
        self._device = Device(self._engine)
        self._queue = GpuQueue(self._device, 0, budget_s=5.0)

    def _region(self, tid: int) -> int:
        ptr, owner, _ = self._tensors[tid]
        t = self.model.tensors[tid]
        return self._device.regions.register_unsafe(ptr, t.nbytes, keep=owner).id

    def _launch(self, budget_s: float) -> None:
        cupy = self._cupy
        prog = build_program(self.plan, self.source.op_cases)
        dev = lambda a: cupy.asarray(np.ascontiguousarray(a))  # noqa: E731
        self._arrays = {
            "ins": dev(prog.ins), "stream_start": dev(prog.stream_start), "members": dev(prog.members),
            "counters": cupy.zeros(max(prog.num_counters, 1), cupy.uint64),
            "finished": cupy.zeros(FINISHED_WORDS, cupy.uint64),
            "fault_flag": cupy.zeros(1, cupy.uint32),
            "tensors": dev(self._tensor_words()),
            "tile_ns": cupy.zeros(2 * len(self.plan.tiles), cupy.uint64), "copies": dev(self._copies),
            "graphs": cupy.zeros(max(len(self._graph_ops), 1) * GRAPH_POOL, cupy.uint64),
            "graph_words": cupy.zeros(max(len(self._graph_ops), 1) * GRAPH_WORDS, cupy.uint64),
            "done_ns": cupy.zeros(RING * self.plan.num_sms, cupy.uint64),  # [RING][CTAs]
        }
        self._control_mem = cupy.cuda.alloc_pinned_memory(CONTROL_DTYPE.itemsize)
        self.control = np.frombuffer(self._control_mem, CONTROL_DTYPE, 1)
        self.control[0] = np.zeros((), CONTROL_DTYPE)
        args = np.zeros(1, PROGRAM_DTYPE)
        for name, arr in self._arrays.items():
            args[name] = arr.data.ptr
        args["budget_ns"] = int(budget_s * 1e9)
        args["segment_iterations"] = GRAPH_LAUNCHES_PER_RUN // max(len(self._graph_ops), 1)
        args["control"] = cupy.cuda.runtime.pointerGetAttributes(self._control_mem.ptr).devicePointer
        from driver.dtypes import QUEUE_DTYPE

        queue = self._queue.handle() if self._queue is not None else np.zeros(1, QUEUE_DTYPE)
        blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(self._fn.kernel.ptr, THREADS,
                                                                             self.source.smem_bytes)
        if blocks < 1:
            raise LoopError(f"the loop kernel of {self.model.name!r} does not fit on an SM ({THREADS} threads, "
                            f"{self.source.smem_bytes} bytes of shared memory)")
        self._stream = cupy.cuda.Stream(non_blocking=True)
        if self._graph_ops:
            self._build_copy_graphs()
        cupy.cuda.runtime.deviceSynchronize()  # every bound input written before the kernel reads it
        if self._graph_ops:
            self._launch_in_graph(args, queue)
        else:
            with self._stream:
                self._fn((self.plan.num_sms,), (THREADS,), (args, queue), shared_mem=self.source.smem_bytes)
        self._args = args
        self._go = 0
        self._state = "running"
        _RESIDENT.add(self)

    def _tensor_words(self) -> np.ndarray:
        """Program.tensors: the tensors' addresses, then the maps the kernel's TMA loads read, each encoded over its
        tensor's memory (program.tensor_words)."""
        from driver.gpu.tensor_maps import TensorMapError, encode

        maps = {}
        for m in self.source.tensor_maps:
            try:
                maps[m.index] = encode(self._tensors[m.tensor][0], m.rows, m.cols, m.box_rows, m.box_cols)
            except TensorMapError as exc:
                raise LoopError(f"tensor {self.model.tensors[m.tensor].name}: {exc} (or set {SM90_TMA_ENV}=0 to load "
                                "it without TMA)") from None
        return tensor_words([p for p, _, _ in self._tensors], maps, tensor_maps_at(len(self._tensors)))

    def _build_copy_graphs(self) -> None:
        """Per graph copy, GRAPH_POOL device-launchable graphs: (with graph_ahead, ark_graph_gate holding the copy
        until the kernel opens its gate,) the copy, then its token into its done word."""
        from cupy.cuda import driver

        from driver.gpu.device_graphs import DeviceGraphError, copy_graph

        self._gate_args: list = []  # the gate launches' parameters, kept while the graphs live

        def gate(words: int, k: int):
            if not self.graph_ahead:
                return None
            args = (np.array([words], np.uint64), np.array([k], np.int32))
            params = np.array([a.ctypes.data for a in args], np.uintp)
            self._gate_args.append((args, params))

            def record():  # by the driver: CuPy launches every kernel of this module cooperatively (it is built
                # for the loop kernel), which a one-block gate has no use for
                driver.launchKernel(self._gate.kernel.ptr, 1, 1, 1, GATE_THREADS, 1, 1, 0, self._stream.ptr,
                                    params.ctypes.data, 0)
            return record

        words = self._arrays["graph_words"].data.ptr
        handles = np.zeros(len(self._graph_ops) * GRAPH_POOL, np.uint64)
        for g, op in enumerate(self._graph_ops):
            src, dst = self.model.ops[op].inputs[0], self.model.ops[op].output
            base = words + 8 * g * GRAPH_WORDS
            for k in range(GRAPH_POOL):
                try:
                    graph = copy_graph(self._stream, self._tensors[dst][0], self._tensors[dst][2], self._tensors[src][0],
                                       self._tensors[src][2], self.model.tensors[dst].nbytes, base + 8 * (2 + k), base,
                                       f"copy op {op} ({self.model.tensors[dst].name})", gate(base, k))
                except DeviceGraphError as exc:
                    raise LoopError(f"{exc}; use copy_path='sm' or 'engine'") from None
                self._graphs.append(graph)
                handles[g * GRAPH_POOL + k] = graph.handle
        self._arrays["graphs"].set(handles)

    def _launch_in_graph(self, args: np.ndarray, queue: np.ndarray) -> None:
        """The loop kernel as the one node of a device-launchable graph (device-side launches are allowed only
        from a kernel inside a graph; the kernel relaunches that graph itself), launched on the kernel's stream."""
        from cupy.cuda import driver

        from driver.gpu.device_graphs import DeviceGraphError, capture

        self._launch_args = (np.ascontiguousarray(args), np.ascontiguousarray(queue))
        self._launch_params = np.array([a.ctypes.data for a in self._launch_args], np.uintp)
        fn = self._fn.kernel.ptr

        def record():
            driver.launchCooperativeKernel(fn, self.plan.num_sms, 1, 1, THREADS, 1, 1, self.source.smem_bytes,
                                           self._stream.ptr, self._launch_params.ctypes.data)

        try:
            graph = capture(self._stream, record, "the loop kernel")
        except (DeviceGraphError, driver.CUDADriverError) as exc:
            raise LoopError(f"the loop kernel could not be put in a graph for device-graph copies: {exc}; use "
                            "copy_path='sm' or 'engine'") from None
        self._graphs.append(graph)
        graph.launch(self._stream)

    # --- tensors ---------------------------------------------------------------------------------
    def _tensor(self, name: str):
        for t in self.model.tensors:
            if t.name == name:
                return t
        if any(t.name == name for t in self.source_model.tensors):
            raise LoopError(f"tensor {name!r} is computed in registers inside a fused elementwise chain and never "
                            "stored; make it a model output (m.output(...)) to read it")
        raise LoopError(f"model {self.model.name!r} has no tensor {name!r}")

    def set(self, name: str, value) -> None:
        """Write a tensor from a host value (NumPy, lists), between runs."""
        self._idle("set")
        t = self._tensor(name)
        bits = np.ascontiguousarray(to_bits(t, value))
        self._copy(self._tensors[t.id][0], bits.ctypes.data, t.nbytes)

    def get(self, name: str) -> np.ndarray:
        """A tensor's values as NumPy (bf16 as float32), between runs."""
        self._idle("get")
        t = self._tensor(name)
        raw = np.empty(t.nbytes, np.uint8)
        self._copy(raw.ctypes.data, self._tensors[t.id][0], t.nbytes)
        return from_bits(t, raw)

    def _copy(self, dst: int, src: int, nbytes: int) -> None:
        """A copy that has landed when this returns (a cudaMemcpy from pageable memory returns once the bytes
        are staged, before they reach the GPU), on a stream of its own (never behind the loop kernel)."""
        rt = self._cupy.cuda.runtime
        rt.memcpyAsync(dst, src, nbytes, rt.memcpyDefault, self._io.ptr)
        self._io.synchronize()

    def address(self, name: str) -> int:
        return self._tensors[self._tensor(name).id][0]

    def _idle(self, what: str) -> None:
        if self._state == "running" and int(self.control["done"][0]) < self._go:
            raise LoopError(f"{what}() while iterations are in flight: wait() first")

    # --- running ---------------------------------------------------------------------------------
    def run(self, iterations: int = 1) -> None:
        """Queue `iterations` more runs of the model to the resident kernel (returns at once)."""
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise LoopError(f"iterations must be a positive int, not {iterations!r}")
        if self._state != "running":
            raise LoopError(f"the runtime is {self._state}; make a new Runtime")
        self._caller_work_done()
        self._go += iterations
        self.control["go"] = self._go

    def _caller_work_done(self) -> None:
        """Wait for what the caller queued on its current stream: the kernel reads bound inputs at once."""
        self._cupy.cuda.get_current_stream().synchronize()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.current_stream().synchronize()

    def wait(self, timeout: float = 30.0) -> None:
        """Until every queued iteration is done; LoopFault or LoopTimeout (the kernel stopped) otherwise."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise LoopError(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
        if self._state != "running":
            raise LoopError(f"the runtime is {self._state}; make a new Runtime")
        t0 = time.monotonic()
        nap = 2e-6
        while int(self.control["done"][0]) < self._go:
            if int(self.control["fault"][0]):
                raise self._fail()
            if time.monotonic() - t0 > timeout:
                done = int(self.control["done"][0])
                self._halt()
                self._state = "stopped after a timeout"
                raise LoopTimeout(f"{self.model.name}: {done} of {self._go} iterations done after {timeout:.1f} s; "
                                  f"the kernel was stopped{self._counter_summary()}")
            time.sleep(nap)
            nap = min(nap * 2, 1e-4)

    def _fail(self) -> LoopFault:
        c = self.control[0]
        code = int(c["fault"])
        tile = int(c["fault_tile"])
        self._halt()
        self._state = "stopped after a fault"
        where = self._describe_tile(tile)
        what = FAULT_NAMES.get(code, f"code {code}")
        if code == 1:
            counter = self.plan.counters[int(c["fault_counter"])]
            awaited = (f"tile {counter['of']} ({self._describe_tile(counter['of'])})" if counter["kind"] == "tile"
                       else f"every tile of op {counter['of']}")
            detail = (f"waited {int(c['fault_detail']) / 1e6:.1f} ms for {awaited} to reach {int(c['fault_expected'])}"
                      f" (it read {int(c['fault_observed'])})")
        elif code == 2:
            detail = f"row {int(c['fault_detail']) - 1} holds an id outside the table"
        elif code == 3:
            status = self._queue.status().describe() if self._queue is not None else "no queue"
            detail = f"the DMA engine returned device code {int(c['fault_detail'])}: {status}"
        elif code == 5:
            detail = _graph_fault(int(c["fault_detail"]))
        else:
            detail = f"detail {int(c['fault_detail'])}"
        return LoopFault(f"{self.model.name}: {what} on SM {int(c['fault_sm'])} at tile {tile} ({where}): {detail}; "
                         "the kernel stopped")

    def _describe_tile(self, tile: int) -> str:
        if not 0 <= tile < len(self.plan.tiles):
            return "no tile"
        t = self.plan.tiles[tile]
        op = self.model.ops[t["op"]]
        return f"op {op.id} {op.fn} -> {self.model.tensors[op.output].name}, rows {t['writes'][1]}:{t['writes'][2]}"

    def _counter_summary(self) -> str:
        try:
            counters = self._arrays["counters"].get()
        except Exception:  # noqa: BLE001 - the summary is a courtesy; the timeout is the error
            return ""
        behind = [i for i, v in enumerate(counters) if v < self._go][:5]
        return f"; counters behind the last iteration: {behind}" if behind else ""

    def _halt(self, grace_s: float = 5.0) -> None:
        """Ask the kernel to leave and wait (bounded) until it has."""
        self.control["stop"] = 1
        begun = time.monotonic()
        deadline = begun + grace_s
        opened = False
        while not self._stream.done:
            if not opened and self.graph_ahead and time.monotonic() > begun + 0.2:
                opened = self._open_gates()
            if time.monotonic() > deadline:
                raise LoopError(f"the loop kernel of {self.model.name} did not leave within {grace_s:.0f} s of "
                                "being stopped; the GPU may need a reset")
            time.sleep(1e-4)
        self._stream.synchronize()
        _RESIDENT.discard(self)

    def _open_gates(self) -> bool:
        """A kernel that left without opening the gate of a copy it launched ahead (copy.cuh's open_gates does it as
        a CTA leaves) would keep its graph, so its stream, busy: the host opens it instead."""
        words = self._arrays["graph_words"]
        got = words.get(stream=self._io).reshape(-1, GRAPH_WORDS)
        for g, row in enumerate(got):
            if row[GRAPH_AHEAD] > row[GRAPH_GATE]:
                words[g * GRAPH_WORDS + GRAPH_GATE:g * GRAPH_WORDS + GRAPH_GATE + 1].set(
                    row[GRAPH_AHEAD:GRAPH_AHEAD + 1], stream=self._io)
        self._io.synchronize()
        return True

    def stop(self) -> None:
        """Let the kernel leave (after the iterations queued) and free what the runtime opened. Idempotent."""
        if self._state == "running":
            try:
                self.wait()
            finally:
                self._halt()
                self._state = "stopped"
        if self._state != "running" and (self._stream is None or self._stream.done):
            for graph in self._graphs:  # the kernel and its copies are gone: nothing can launch these now
                graph.close()
            self._graphs = []
        if self._queue is not None:
            self._queue.close()
            self._queue = None
        if self._device is not None:
            self._device.close()
            self._device = None

    def report(self) -> list[TransferReport]:
        """Each copy op's path, bytes and last time (GPU clock), and whether it used SMs."""
        self._idle("report")
        ns = self._arrays["tile_ns"].get().reshape(-1, 2)
        out = []
        for op in self.model.ops:
            if op.kind != "copy":
                continue
            tiles = [i for i, t in enumerate(self.plan.tiles) if t["op"] == op.id]
            # the longest of its tiles: an SM copy's tiles run side by side on as many SMs (their stamps may come
            # from different iterations, since CTAs that wait for no other run ahead, so no span is taken)
            took = int((ns[tiles, 1].astype(np.int64) - ns[tiles, 0].astype(np.int64)).max())
            out.append(TransferReport(op.id, self.model.tensors[op.output].name, self._paths[op.id],
                                      self.model.tensors[op.output].nbytes, max(took, 0) / 1e3,
                                      self._paths[op.id] == "sm"))
        return out

    def profile(self) -> Profile:
        """Where the last iteration's time went, per op and per SM, from the GPU clock stamps of every tile."""
        self._idle("profile")
        try:
            return build_profile(self.model, self.plan, self._arrays["tile_ns"].get())
        except ValueError as exc:
            raise LoopError(f"profile(): {exc}") from None

    def iteration_ns(self) -> np.ndarray:
        """When each of the last (up to RING) iterations was done, by the GPU's clock (ns), oldest first: the
        differences are the time per iteration with no host on the path. An iteration is done when its last CTA
        finished it (each CTA stamps its own end of every iteration)."""
        self._idle("iteration_ns")
        done = self.iterations_done
        ends = self._arrays["done_ns"].get().reshape(RING, self.plan.num_sms).max(axis=1)
        its = range(max(0, done - RING), done)
        return np.array([int(ends[i % RING]) for i in its], np.int64)

    @property
    def iterations_done(self) -> int:
        """Iterations the kernel has told the host are done: every one after `wait()`; while a run goes on, the
        kernel tells the host every 16th (loop.cuh's PUBLISH_EVERY), so the count moves in steps."""
        return int(self.control["done"][0])

    @property
    def state(self) -> str:
        return self._state

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.stop()
        else:
            try:
                if self._state == "running":
                    self._halt()
                    self._state = "stopped"
            finally:
                self.stop()
