"""Copies as device graphs (the "graph" copy path): per graph copy, GRAPH_POOL device-launchable graphs that the loop
kernel launches itself (copy.cuh), optionally behind a gate kernel so a copy can be launched ahead of its tile; the
loop kernel launched inside a graph of its own (device-side launches are allowed only from a kernel in a graph); and
the host opening gates a kernel that left did not open."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ark_runtime.kernel.codegen import THREADS
from ark_runtime.kernel.codes import GRAPH_AHEAD, GRAPH_GATE, GRAPH_POOL, GRAPH_WORDS
from ark_runtime.model import Model
from ark_runtime.runtime.faults import LoopError

GRAPH_AHEAD_ENV = "ARK_GRAPH_AHEAD"  # "0": graph copies launched at the copy, never ahead behind a gate (copy.cuh)
GATE_THREADS = 32  # ark_graph_gate's block


def gate_fits(props: dict, loop_fn, gate_fn, smem_bytes: int) -> bool:
    """Whether ark_graph_gate can start while the loop kernel runs: a block of it fits beside the loop kernel's
    on an SM, and the loop kernel uses no local memory (on the H100 we measured, while a kernel with any local
    memory was resident no other kernel started, whatever room the SMs had). Else a copy launched ahead would
    never start, and the kernel launches each graph copy at the copy, without a gate."""
    from driver.gpu.launch import fit_together

    loop, gate = loop_fn.attributes, gate_fn.attributes
    return loop["local_size_bytes"] == 0 and fit_together(
        props, [(THREADS, loop["num_regs"], loop["shared_size_bytes"] + smem_bytes),
                (GATE_THREADS, gate["num_regs"], gate["shared_size_bytes"])])


class CopyGraphs:
    """The graph copies' graphs, then the loop kernel's own graph (device_graphs.DeviceGraph), and what their
    launches' parameters point at, kept while the graphs live."""

    def __init__(self):
        self.graphs: list = []
        self._kept: list = []

    @property
    def kernel_graph(self):
        """The graph the loop kernel runs in (the last one built)."""
        return self.graphs[-1]

    def build_copies(self, stream, model: Model, graph_ops: list[int], tensors: list[tuple], words_ptr: int,
                     gate_fn=None) -> np.ndarray:
        """Per graph copy (graph_ops: the copy ops, in the order of their graph index), GRAPH_POOL graphs: (with
        `gate_fn`, ark_graph_gate holding the copy until the kernel opens its gate,) the copy, then its token into its
        done word. Returns the executable graphs' handles, GRAPH_POOL per copy, for Program.graphs."""
        from cupy.cuda import driver

        from driver.gpu.device_graphs import DeviceGraphError, copy_graph

        def gate(words: int, k: int) -> Callable[[], None] | None:
            if gate_fn is None:
                return None
            args = (np.array([words], np.uint64), np.array([k], np.int32))
            params = np.array([a.ctypes.data for a in args], np.uintp)
            self._kept.append((args, params))

            def record():  # by the driver: CuPy launches every kernel of this module cooperatively (it is built
                # for the loop kernel), which a one-block gate has no use for
                driver.launchKernel(gate_fn.kernel.ptr, 1, 1, 1, GATE_THREADS, 1, 1, 0, stream.ptr,
                                    params.ctypes.data, 0)
            return record

        handles = np.zeros(len(graph_ops) * GRAPH_POOL, np.uint64)
        for g, op in enumerate(graph_ops):
            src, dst = model.ops[op].inputs[0], model.ops[op].output
            base = words_ptr + 8 * g * GRAPH_WORDS
            for k in range(GRAPH_POOL):
                try:
                    graph = copy_graph(stream, tensors[dst][0], tensors[dst][2], tensors[src][0], tensors[src][2],
                                       model.tensors[dst].nbytes, base + 8 * (2 + k), base,
                                       f"copy op {op} ({model.tensors[dst].name})", gate(base, k))
                except DeviceGraphError as exc:
                    raise LoopError(f"{exc}; use copy_path='sm' or 'engine'") from None
                self.graphs.append(graph)
                handles[g * GRAPH_POOL + k] = graph.handle
        return handles

    def build_kernel(self, stream, fn, num_sms: int, smem_bytes: int, args: np.ndarray, queue: np.ndarray) -> None:
        """The loop kernel as the one node of a device-launchable graph (the kernel relaunches that graph itself);
        launched with launch_kernel()."""
        from cupy.cuda import driver

        from driver.gpu.device_graphs import DeviceGraphError, capture

        launch_args = (np.ascontiguousarray(args), np.ascontiguousarray(queue))
        params = np.array([a.ctypes.data for a in launch_args], np.uintp)
        self._kept.append((launch_args, params))
        ptr = fn.kernel.ptr

        def record():
            driver.launchCooperativeKernel(ptr, num_sms, 1, 1, THREADS, 1, 1, smem_bytes, stream.ptr,
                                           params.ctypes.data)

        try:
            graph = capture(stream, record, "the loop kernel")
        except (DeviceGraphError, driver.CUDADriverError) as exc:
            raise LoopError(f"the loop kernel could not be put in a graph for device-graph copies: {exc}; use "
                            "copy_path='sm' or 'engine'") from None
        self.graphs.append(graph)

    def close(self) -> None:
        """Destroys every graph: only once nothing can launch them (the kernel and its copies are gone)."""
        for graph in self.graphs:
            graph.close()
        self.graphs = []
        self._kept = []


def open_gates(words, io_stream) -> bool:
    """A kernel that left without opening the gate of a copy it launched ahead (copy.cuh's open_gates does it as
    a CTA leaves) would keep its graph, so its stream, busy: the host opens it instead. `words`: the CuPy array of
    every graph copy's GRAPH_WORDS words."""
    got = words.get(stream=io_stream).reshape(-1, GRAPH_WORDS)
    for g, row in enumerate(got):
        if row[GRAPH_AHEAD] > row[GRAPH_GATE]:
            at = g * GRAPH_WORDS + GRAPH_GATE
            words[at:at + 1].set(row[GRAPH_AHEAD:GRAPH_AHEAD + 1], stream=io_stream)
    io_stream.synchronize()
    return True
