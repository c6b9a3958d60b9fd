"""`Runtime`: a model lowered and launched once as one resident loop kernel, then driven from the host: tensors bound or
set and read (set/get), iterations queued and waited for (run/wait), the kernel halted (stop) or stepped aside for
other CUDA work (suspend), and what the last iteration did (report, profile, iteration_ns). The package's docstring
describes its use; the modules beside this one hold its parts."""

from __future__ import annotations

import contextlib
import functools
import math
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ark_runtime.host_values import from_bits, to_bits
from ark_runtime.kernel.codegen import INCLUDE_DIR, THREADS, tensor_maps_at
from ark_runtime.kernel.codes import FINISHED_WORDS, GRAPH_POOL, GRAPH_WORDS, RING
from ark_runtime.kernel.program import tensor_words
from ark_runtime.kernel.records import PROGRAM_DTYPE, expected_offsets
from ark_runtime.ops.matmul import SM90_TMA_ENV
from ark_runtime.lower import SPLIT_K_ENV, LowerError, LowerOptions, lower
from ark_runtime.model import Model
from ark_runtime.plan import Plan
from ark_runtime.profile import Profile, build_profile
from ark_runtime.runtime.control import ControlBlock, Waited, publish_every_options
from ark_runtime.runtime.copy_paths import (COPY_PATHS, DMA_ENGINES, GRAPH_LAUNCHES_PER_RUN, DmaEngine,
                                            choose_copy_paths)
from ark_runtime.runtime.faults import FaultRecord, LoopError, LoopFault, LoopTimeout, fault_message
from ark_runtime.runtime.go import GoSignal
from ark_runtime.runtime.graph_copies import GRAPH_AHEAD_ENV, CopyGraphs, gate_fits, open_gates
from ark_runtime.runtime.resident import INTERRUPT_GRACE_S, STOP_GRACE_S, ResidentKernel, others_resident
from ark_runtime.runtime.scoped import StopsOnExit
from ark_runtime.runtime.tensors import overlapping_binds, tensor_memory
from ark_runtime.scheduler import PLACEMENTS, DeviceSpec, device_family
from ark_runtime.tiling import switched_off


@dataclass(frozen=True)
class TransferReport:
    op: int
    tensor: str
    path: str  # "engine:<name>", "graph" (a device graph on a copy engine) or "sm"
    bytes: int
    time_us: float  # the last iteration's copy by the GPU clock: its longest tile (an SM copy's tiles run side by side)
    uses_sms: bool


def check_iterations(iterations) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise LoopError(f"iterations must be a positive int, not {iterations!r}")
    return iterations


def check_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise LoopError(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
    return float(timeout)


def _launcher(fn, num_sms: int, smem_bytes: int, args: np.ndarray, queue: np.ndarray, stream):
    """Queues the loop kernel on `stream` (CuPy launches it cooperatively: its module is built so)."""
    def start() -> None:
        with stream:
            fn((num_sms,), (THREADS,), (args, queue), shared_mem=smem_bytes)
    return start


def _collected(kernel: ResidentKernel, dma: DmaEngine | None, go_signal: GoSignal) -> None:
    """A Runtime was collected with its kernel resident: halt it at once, then close its DMA engine and go."""
    go_signal.close()
    if kernel.halt_quietly(INTERRUPT_GRACE_S) and dma is not None:
        with contextlib.suppress(Exception):
            dma.close()


class Runtime(StopsOnExit):
    _world_counters = None  # a World's rank (world_runtime.py): this rank's counter array, which peers add to
    _peer_counters: list[int] = []  # ... and every rank's counter array's address, rank by rank

    def __init__(self, model: Model, *, engine: str | None = "auto", bind: dict | None = None,
                 sms: int | None = None, budget_s: float = 10.0, copy_path: str = "auto", placement: str = "cost",
                 fuse_chains: bool = True, split_k: bool | None = None, knobs: dict | None = None):
        """`knobs`: per op (by the name of the tensor it writes, in the model as run), some of its spec's knobs set
        rather than chosen ({"h": {"block": (128, 128), "loader": "tma"}}: what a tuner tries; OpSpec.knobs)."""
        import cupy

        from driver.gpu.launch import require_gpu

        self._state = "starting"
        self._kernel: ResidentKernel | None = None
        self._dma: DmaEngine | None = None
        self._graphs = CopyGraphs()
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
        if knobs is not None and (not isinstance(knobs, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) for k, v in knobs.items())):
            raise LoopError(f"knobs is a dict of tensor names to dicts of knob values, not {knobs!r}")
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
        others = others_resident()
        if others:
            raise LoopError(f"the loop kernel of model {others[0].name!r} is still resident; stop() that "
                            "Runtime first (CUDA cannot load another module while it runs)")
        self.source_model = model
        self._cupy = cupy
        self._device_id = cupy.cuda.Device().id
        props = cupy.cuda.runtime.getDeviceProperties(self._device_id)
        num_sms = props["multiProcessorCount"] if sms is None else sms
        if not 1 <= num_sms <= props["multiProcessorCount"]:
            raise LoopError(f"sms={sms!r}: this GPU has {props['multiProcessorCount']} SMs; give 1..that many")
        self.device_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        hopper = cupy.cuda.Device().compute_capability == "90"  # wgmma: sm_90a only
        self._spec = DeviceSpec(name=device_family(self.device_name), num_sms=num_sms, wgmma=hopper)
        self._options = LowerOptions(fuse_chains=fuse_chains, split_k=split_k, placement=placement,
                                     knobs=tuple((name, tuple(v.items())) for name, v in (knobs or {}).items()))
        self.graph_ahead = False  # graph copies launched ahead, held at a gate (_start; copy.cuh)
        self._paths_by_name, self._dma = choose_copy_paths(model, engine, copy_path)
        try:
            self._start(props, bind, budget_s)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and self._kernel is not None:
                self._state = "stopped after an interrupt"  # no longer grace than an interrupt's
                self._kernel.halt_quietly(INTERRUPT_GRACE_S)
            try:
                self.stop(drain=False)  # the kernel, if it started, and the engine opened for the copies
            except Exception as again:  # noqa: BLE001 - the first error is the one to see
                exc.add_note(f"stopping after it: {again}")
            raise

    # --- set-up ----------------------------------------------------------------------------------
    def _start(self, props: dict, bind: dict, budget_s: float) -> None:
        """Plan (copies on the paths chosen), generate, compile, allocate, register and launch."""
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
        self._paths = {op: self._paths_by_name[model.tensors[model.ops[op].output].name]
                       for op in self.lowered.copy_paths}
        tensors = []
        for t in model.tensors:  # a state written in place is its state's memory
            if t.alias is not None and t.name in bind:
                raise LoopError(f"bind[{t.name!r}]: {t.name} is state {model.tensors[t.alias].name} as written in place; "
                                f"bind {model.tensors[t.alias].name}")
            tensors.append(tensors[t.alias] if t.alias is not None
                           else tensor_memory(t, bind.get(t.name), self._device_id))
        overlap = overlapping_binds(model, tensors, set(bind))
        if overlap:
            raise LoopError(overlap)
        self._start_lowered(props, tensors, budget_s)

    def _start_lowered(self, props: dict, tensors: list, budget_s: float, defer: bool = False) -> None:
        """Compile, check, and launch `self.lowered` over the tensors' memory (`tensors`, per tensor id); `defer`:
        everything but the launch, which _begin() makes (a World's ranks: every GPU's memory and module made before
        any kernel is resident, since allocating waits for a resident kernel)."""
        from driver.gpu import compile

        self.model = model = self.lowered.model
        self.plan: Plan = self.lowered.plan
        self.source = self.lowered.source
        self._graph_ops = self.lowered.graph_ops
        cupy = self._cupy
        try:
            module = compile.load(self.source.text, extra=(f"-I{INCLUDE_DIR}", *publish_every_options()),
                                  cooperative=True, rdc=self.source.graph_copies)
        except compile.CompileError as exc:
            if not self._graph_ops:
                raise
            raise LoopError(f"the kernel with device-graph copies could not be built: {exc}; use copy_path='sm' "
                            "or 'engine'") from None
        self._check_layout(module)
        self._fn = module.get_function("ark_loop")
        # opted in whatever the size: the kernel's own static arrays count against the 48 KiB default too
        self._fn.max_dynamic_shared_size_bytes = self.source.smem_bytes
        self._io = cupy.cuda.Stream(non_blocking=True)  # set() and get(): never ordered behind the loop kernel
        self._tensors = tensors
        self._copies = np.zeros((max(len(model.ops), 1), 4), np.int32)
        for op, path in self._paths.items():
            if path.startswith("engine:"):
                src, dst = model.ops[op].inputs[0], model.ops[op].output
                self._copies[op] = (1, self._region(src), self._region(dst), 0)
        gate = module.get_function("ark_graph_gate") if self._graph_ops else None
        self.graph_ahead = (gate is not None and not switched_off(GRAPH_AHEAD_ENV)
                            and gate_fits(props, self._fn, gate, self.source.smem_bytes))
        for g, op in enumerate(self._graph_ops):
            self._copies[op] = (2, g, int(self.graph_ahead), 0)
        self._launch(budget_s, gate if self.graph_ahead else None, defer)

    def _check_layout(self, module) -> None:
        out = self._cupy.zeros(len(expected_offsets()), self._cupy.uint64)
        module.get_function("ark_layout")((1,), (1,), (out,))
        got = [int(v) for v in out.get()]
        if got != expected_offsets():
            raise LoopError(f"loop.cuh's Control/Program differ from ark_runtime/kernel/records.py: the GPU sees "
                            f"offsets {got}, records.py says {expected_offsets()}")

    def _region(self, tid: int) -> int:
        ptr, owner, _ = self._tensors[tid]
        return self._dma.region(ptr, self.model.tensors[tid].nbytes, owner)

    def _launch(self, budget_s: float, gate, defer: bool = False) -> None:
        cupy = self._cupy
        prog = self.lowered.program  # made with the plan (and cached with it)
        dev = lambda a: cupy.asarray(np.ascontiguousarray(a))  # noqa: E731
        self._arrays = {
            "ins": dev(prog.ins), "stream_start": dev(prog.stream_start), "members": dev(prog.members),
            "counters": (self._world_counters if self._world_counters is not None
                         else cupy.zeros(max(prog.num_counters, 1), cupy.uint64)),
            "finished": cupy.zeros(FINISHED_WORDS, cupy.uint64),
            "fault_flag": cupy.zeros(1, cupy.uint32),
            "tensors": dev(self._tensor_words()),
            "tile_ns": cupy.zeros(2 * self.plan.num_tiles, cupy.uint64), "copies": dev(self._copies),
            "graphs": cupy.zeros(max(len(self._graph_ops), 1) * GRAPH_POOL, cupy.uint64),
            "graph_words": cupy.zeros(max(len(self._graph_ops), 1) * GRAPH_WORDS, cupy.uint64),
            "done_ns": cupy.zeros(RING * self.plan.num_sms, cupy.uint64),  # [RING][CTAs]
        }
        self._control = ControlBlock.pinned()
        args = np.zeros(1, PROGRAM_DTYPE)
        for name, arr in self._arrays.items():
            args[name] = arr.data.ptr
        args["budget_ns"] = int(budget_s * 1e9)
        args["segment_iterations"] = GRAPH_LAUNCHES_PER_RUN // max(len(self._graph_ops), 1)
        args["control"] = self._control.device_ptr
        from driver.dtypes import QUEUE_DTYPE

        queue = self._dma.queue.handle() if self._dma is not None else np.zeros(1, QUEUE_DTYPE)
        blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(self._fn.kernel.ptr, THREADS,
                                                                             self.source.smem_bytes)
        if blocks < 1:
            raise LoopError(f"the loop kernel of {self.model.name!r} does not fit on an SM ({THREADS} threads, "
                            f"{self.source.smem_bytes} bytes of shared memory)")
        stream = cupy.cuda.Stream(non_blocking=True)
        self._go_signal = GoSignal(self._control, self._device_id)
        if self._graph_ops:
            self._arrays["graphs"].set(self._graphs.build_copies(stream, self.model, self._graph_ops, self._tensors,
                                                                 self._arrays["graph_words"].data.ptr, gate))
        cupy.cuda.runtime.deviceSynchronize()  # every bound input written before the kernel reads it
        if self._graph_ops:
            self._graphs.build_kernel(stream, self._fn, self.plan.num_sms, self.source.smem_bytes, args, queue)
            start = functools.partial(self._graphs.kernel_graph.launch, stream)
        else:
            start = _launcher(self._fn, self.plan.num_sms, self.source.smem_bytes, args, queue, stream)
        gates = functools.partial(open_gates, self._arrays["graph_words"], self._io) if self.graph_ahead else None
        self._kernel = ResidentKernel(self.model.name, self._control, stream, start, self._arrays["finished"],
                                      keep=[self._arrays, self._tensors, self._dma, self._graphs], open_gates=gates)
        self._go = 0  # iterations asked for, in all: the value of `go` once the last write landed
        self._streamed: dict[int, int] = {}  # stream(): per count state, the rows yielded so far (host states start 0)
        if not defer:
            self._begin()

    def _begin(self) -> None:
        """Launch the kernel _launch made ready."""
        self._kernel.launch()
        self._state = "running"
        self._finalizer = weakref.finalize(self, _collected, self._kernel, self._dma, self._go_signal)
        self._finalizer.atexit = False  # at exit every resident kernel is halted first (resident.py)

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
        addresses = [p for p, _, _ in self._tensors]
        if self._peer_counters:  # a World's rank: every rank's counters (codegen.peers_at), after the addresses
            addresses += self._peer_counters
        return tensor_words(addresses, maps, tensor_maps_at(len(self._tensors), max(1, len(self._peer_counters))))

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
        if t.placement == "host" and t.dtype == "int32" and t.elements == 1:
            self._streamed[t.id] = int(bits.view(np.int32)[0])  # a count set by hand: stream() goes on from there

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
        if self._state == "running" and self._control.iterations_done() < self._go:
            raise LoopError(f"{what}() while iterations are in flight: wait() first")

    # --- running ---------------------------------------------------------------------------------
    def _refuse_unless_running(self, what: str) -> None:
        if self._state == "suspended":
            raise LoopError(f"{what}() inside suspend(): the kernel is not resident until the suspend() block ends")
        if self._state != "running":
            raise LoopError(f"the runtime is {self._state}; make a new Runtime")

    def _interrupted(self) -> None:
        """Ctrl-C (KeyboardInterrupt) reached the runtime: the kernel is halted at once, without the queued
        iterations; never raises, so the interrupt goes on as it was."""
        self._state = "stopped after an interrupt"
        if self._kernel is not None:
            self._kernel.halt_quietly(INTERRUPT_GRACE_S)

    @contextlib.contextmanager
    def _halt_on_interrupt(self) -> Iterator[None]:
        try:
            yield
        except KeyboardInterrupt:
            self._interrupted()
            raise

    def run(self, iterations: int = 1) -> None:
        """Queue `iterations` more runs of the model to the resident kernel (returns at once). The kernel reads its
        inputs only after the work queued so far on the caller's current CuPy stream (and PyTorch's, once PyTorch
        has initialized CUDA): on the GPU where it can (go_path "auto" or "stream"), else by synchronizing them
        first."""
        check_iterations(iterations)
        self._refuse_unless_running("run")
        try:  # not _halt_on_interrupt: a context manager costs microseconds, a round trip's share
            self._go_signal.write(self._go + iterations)
            self._go += iterations
        except KeyboardInterrupt:
            self._interrupted()
            raise

    def wait(self, timeout: float = 30.0) -> None:
        """Until every queued iteration is done; LoopFault or LoopTimeout (the kernel stopped) otherwise."""
        check_timeout(timeout)
        self._refuse_unless_running("wait")
        try:
            how = self._control.wait_done(self._go, timeout)
            if how is Waited.DONE:
                return
            if how is Waited.FAULT:
                raise self._fail()
            done = self._control.iterations_done()
            self._state = "stopped after a timeout"
            self._halt()
            raise LoopTimeout(f"{self.model.name}: {done} of {self._go} iterations done after {timeout:.1f} s; "
                              f"the kernel was stopped{self._counter_summary()}")
        except KeyboardInterrupt:
            self._interrupted()
            raise

    def stream(self, ring: str, count: str, timeout: float = 30.0) -> Iterator[np.ndarray]:
        """The rows of `ring` as the kernel writes them: `ring` and `count` are states placed on the host (pinned
        memory the runtime allocated), the model writing row `count` of `ring` and then counting `count` on, each
        iteration (a token a decode step). Yields each row not yet yielded (NumPy, bf16 as float32; from row 0, or
        from the value `set()` last gave `count`) once `count` says it is there, while the iterations queued run,
        without a wait() per iteration; returns when they are done and every row they counted was yielded.
        LoopFault, or LoopTimeout when `count` stands still for `timeout` seconds."""
        check_timeout(timeout)
        self._refuse_unless_running("stream")
        ring_t, count_t = self._tensor(ring), self._tensor(count)
        for t, what in ((ring_t, "ring"), (count_t, "count")):
            mem = self._tensors[t.id]
            if t.id not in self.model.states or t.placement != "host" or not hasattr(mem.owner, "ptr"):
                raise LoopError(f"stream(): {what} {t.name} must be a state placed on the host that the runtime "
                                "allocated (m.state(..., placement='host'), not bound)")
        if count_t.dtype != "int32" or count_t.elements != 1:
            raise LoopError(f"stream(): count {count_t.name} must be an int32 of one element")
        rows = np.frombuffer(self._tensors[ring_t.id].owner, np.uint8, ring_t.nbytes).reshape(ring_t.rows, -1)
        counted = np.frombuffer(self._tensors[count_t.id].owner, np.int32, 1)
        # from the first row not yet yielded, not from the count as it stands now: rows the kernel wrote between
        # run() and this call are yielded too
        seen, clock = self._streamed.get(count_t.id, 0), time.monotonic()
        while True:
            now = min(int(counted[0]), ring_t.rows)
            if now > seen:
                for r in range(seen, now):
                    self._streamed[count_t.id] = r + 1
                    yield from_bits(ring_t.__class__(0, ring_t.name, (ring_t.cols,), ring_t.dtype), rows[r].copy())
                seen, clock = now, time.monotonic()
                continue
            if self._control.faulted():
                raise self._fail()
            if self._control.iterations_done() >= self._go and int(counted[0]) == seen:
                return
            if time.monotonic() - clock > timeout:
                self._state = "stopped after a timeout"
                self._halt()
                raise LoopTimeout(f"{self.model.name}: {count_t.name} stood at {seen} for {timeout:.1f} s; the "
                                  "kernel was stopped")
            time.sleep(0)

    def _fail(self) -> LoopFault:
        record = FaultRecord.from_control(self._control.record[0])
        self._state = "stopped after a fault"
        self._halt()
        return LoopFault(fault_message(record, self.model, self.plan,
                                       self._dma.status if self._dma is not None else None))

    def _counter_summary(self) -> str:
        try:
            counters = self._arrays["counters"].get(stream=self._io)
        except Exception:  # noqa: BLE001 - the summary is a courtesy; the timeout is the error
            return ""
        behind = [i for i, v in enumerate(counters) if v < self._go][:5]
        return f"; counters behind the last iteration: {behind}" if behind else ""

    def _halt(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask the kernel to leave (queued iterations dropped) and wait, bounded, until it has."""
        if self._kernel is not None and not self._kernel.halt(grace_s):
            raise LoopError(f"the loop kernel of {self.model.name} did not leave within {grace_s:.0f} s of "
                            "being stopped; the GPU may need a reset")

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Let the kernel leave and free what the runtime opened. Idempotent. `drain`: after the iterations queued
        (waiting up to `timeout` seconds for them, LoopTimeout past it); drain=False: at once, dropping them."""
        if not isinstance(drain, bool):
            raise LoopError(f"drain is True (finish the queued iterations first) or False (at once), not {drain!r}")
        check_timeout(timeout)
        try:
            with self._halt_on_interrupt():
                try:
                    if self._state == "running" and drain:
                        self.wait(timeout)
                finally:
                    launched = self._state == "starting" and self._kernel is not None and self._kernel.resident
                    if self._state in ("running", "suspended") or launched:
                        self._state = "stopped"
                        self._halt()
        except BaseException:
            self._release(quiet=True)
            raise
        self._release()

    def _release(self, quiet: bool = False) -> None:
        """Closes the graphs and the DMA engine once the kernel has left (while it may run it may use them)."""
        if self._kernel is not None and self._kernel.resident:
            return
        if getattr(self, "_go_signal", None) is not None:
            self._go_signal.close()
        try:
            self._graphs.close()
            if self._dma is not None:
                self._dma.close()
                self._dma = None
        except Exception:
            if not quiet:
                raise
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()

    @contextlib.contextmanager
    def suspend(self, timeout: float = 30.0) -> Iterator[Runtime]:
        """Steps the kernel aside for CUDA work that waits for the whole device (allocating, freeing, a kernel's
        first launch), which never returns while it is resident:

            with rt.suspend():
                y = cupy.zeros(n)           # anything CUDA

        Waits for the queued iterations (up to `timeout` seconds), halts the kernel, runs the block, then launches
        the same kernel again on the same memory, plan and counters, going on from the iteration count it had
        (run() is refused inside the block; set() and get() work). An exception in the block still relaunches the
        kernel, except KeyboardInterrupt, which leaves it stopped. Not with device-graph copies: that kernel runs
        inside a graph that relaunches itself and its copies' graphs, which a relaunch from the host does not
        restore (LoopError saying so; such a runtime can stop() and be made again)."""
        check_timeout(timeout)
        self._refuse_unless_running("suspend")
        if self._graph_ops:
            raise LoopError("suspend() cannot step aside a kernel with device-graph copies (it runs inside a graph "
                            "that relaunches itself and launches its copies' graphs); give the copies "
                            "copy_path='sm' or 'engine', or stop() this Runtime and make it again after the CUDA work")
        self.wait(timeout)
        with self._halt_on_interrupt():
            self._state = "suspended"
            try:
                self._halt()
            except LoopError:
                self._state = "stopped"
                raise
        try:
            yield self
        except KeyboardInterrupt:
            self._state = "stopped after an interrupt"
            raise
        except BaseException as exc:
            try:
                self._resume()
            except Exception as again:  # noqa: BLE001 - the block's error is the one to see
                exc.add_note(f"relaunching the loop kernel after it failed too: {again}")
            raise
        self._resume()

    def _resume(self) -> None:
        if self._state != "suspended":  # stopped inside the block
            return
        others = others_resident(self._kernel)
        if others:
            self._state = "stopped"
            self._release(quiet=True)
            raise LoopError(f"the loop kernel of model {others[0].name!r} became resident inside suspend(), so this "
                            "one cannot come back; stop() that Runtime inside the block")
        with self._halt_on_interrupt():
            self._kernel.relaunch(self._go)
            self._state = "running"

    # --- what the kernel did ---------------------------------------------------------------------
    def report(self) -> list[TransferReport]:
        """Each copy op's path, bytes and last time (GPU clock), and whether it used SMs."""
        self._idle("report")
        ns = self._arrays["tile_ns"].get(stream=self._io).reshape(-1, 2)
        out = []
        for op in self.model.ops:
            if op.kind != "copy" or op.id not in self._paths:  # (a World's rank runs only its own copies)
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
            return build_profile(self.model, self.plan, self._arrays["tile_ns"].get(stream=self._io))
        except ValueError as exc:
            raise LoopError(f"profile(): {exc}") from None

    def iteration_ns(self) -> np.ndarray:
        """When each of the last (up to RING) iterations was done, by the GPU's clock (ns), oldest first: the
        differences are the time per iteration with no host on the path. An iteration is done when its last CTA
        finished it (each CTA stamps its own end of every iteration)."""
        self._idle("iteration_ns")
        done = self.iterations_done
        ends = self._arrays["done_ns"].get(stream=self._io).reshape(RING, self.plan.num_sms).max(axis=1)
        its = range(max(0, done - RING), done)
        return np.array([int(ends[i % RING]) for i in its], np.int64)

    @property
    def iterations_done(self) -> int:
        """Iterations the kernel has told the host are done: every one after `wait()`; while a run goes on, every
        16th (ARK_PUBLISH_EVERY=N at the kernel's build: every Nth; 1, each as it ends, costs about a microsecond an
        iteration)."""
        return self._control.iterations_done()

    @property
    def go_path(self) -> str:
        """How run() hands `go` to the kernel (go.py): "auto" (written on the GPU after the caller's queued work, or
        by the host when every stream involved is idle), "stream" (always on the GPU) or "host" (the host
        synchronizes the caller's streams and writes it); go_path_reason says why "host"."""
        return self._go_signal.path

    @property
    def go_path_reason(self) -> str:
        return self._go_signal.reason

    @property
    def go_writes(self) -> dict[str, int]:
        """How many of run()'s writes of `go` went each way: {"stream": on the GPU, "host": by the host}."""
        return dict(self._go_signal.writes)

    @property
    def state(self) -> str:
        return self._state

