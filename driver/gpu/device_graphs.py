"""CUDA graphs a kernel launches itself (device graph launch): captured from a stream, instantiated for device
launch and uploaded, so a GPU thread can start them with `cudaGraphLaunch` and no CPU on the path.

Two uses, both by the loop kernel (ark_runtime): a copy graph (the copy on a copy engine, then a token word copied
into a done word the kernel polls), and the kernel itself, which must run inside a graph for device-side launches
to be allowed and relaunches its own graph (a tail launch) when a run of it has used its fire-and-forget budget.

CuPy instantiates graphs without flags; the flag for device launch (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) is
passed here through the driver API, which shares the runtime's handles (cudaGraph_t is CUgraph).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from driver.errors import ArkdmaError
from driver.gpu import libcuda

INSTANTIATE_DEVICE_LAUNCH = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
FIRE_AND_FORGET_BUDGET = 120  # device launches one run of a graph may make (CUDA programming guide)
MEMCPY_KINDS = {("host", "host"): 0, ("host", "device"): 1, ("device", "host"): 2, ("device", "device"): 3}


class DeviceGraphError(ArkdmaError):
    """A device-launchable graph could not be built; the message names the CUDA call and its error."""


def _libcuda():
    try:
        return libcuda.functions(cuGraphInstantiateWithFlags=(
            (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong), ctypes.c_int))
    except libcuda.DriverLibraryError as exc:
        raise DeviceGraphError(str(exc)) from None


class DeviceGraph:
    """One executable graph, launchable from the host and from device code (`handle` is its cudaGraphExec_t)."""

    def __init__(self, graph: int, what: str):
        from cupy.cuda import runtime

        self.what = what
        self._graph = graph
        handle = ctypes.c_void_p()
        rc = _libcuda().cuGraphInstantiateWithFlags(ctypes.byref(handle), ctypes.c_void_p(graph),
                                                    INSTANTIATE_DEVICE_LAUNCH)
        if rc != 0:
            runtime.graphDestroy(graph)
            raise DeviceGraphError(f"{what}: cuGraphInstantiateWithFlags(DEVICE_LAUNCH) failed with "
                                   f"{libcuda.error_name(rc)}; device graph launch needs CUDA 12 or later and a graph of "
                                   "kernel and memcpy nodes on one GPU")
        self.handle = int(handle.value)

    def upload(self, stream) -> None:
        from cupy.cuda import runtime

        runtime.graphUpload(self.handle, stream.ptr)

    def launch(self, stream) -> None:
        from cupy.cuda import runtime

        runtime.graphLaunch(self.handle, stream.ptr)

    def close(self) -> None:
        from cupy.cuda import runtime

        if self.handle:
            runtime.graphExecDestroy(self.handle)
            runtime.graphDestroy(self._graph)
            self.handle = self._graph = 0


def capture(stream, record: Callable[[], None], what: str) -> DeviceGraph:
    """What `record()` enqueues on `stream` (captured, this thread only), as a device-launchable graph, uploaded."""
    from cupy.cuda import runtime

    runtime.streamBeginCapture(stream.ptr, runtime.streamCaptureModeThreadLocal)
    try:
        record()
    except BaseException:
        try:
            runtime.graphDestroy(runtime.streamEndCapture(stream.ptr))
        except Exception:  # noqa: BLE001 - the capture's own error is the one to report
            pass
        raise
    graph = DeviceGraph(runtime.streamEndCapture(stream.ptr), what)
    graph.upload(stream)
    stream.synchronize()
    return graph


def copy_graph(stream, dst: int, dst_kind: str, src: int, src_kind: str, nbytes: int, token: int, done: int,
               what: str, gate: Callable[[], None] | None = None) -> DeviceGraph:
    """A graph that copies `nbytes` from src to dst (a copy engine), then the 8-byte word at `token` into `done`
    (GPU memory): a kernel that launched it sees the copy landed once `done` holds the token it wrote. `gate`, if
    given, enqueues a first node on `stream` (a kernel that returns when the copy may go: the launch can then be
    made before the source is ready)."""
    from cupy.cuda import runtime

    if (src_kind, dst_kind) not in MEMCPY_KINDS:
        raise DeviceGraphError(f"{what}: memory kinds {src_kind!r} -> {dst_kind!r}; each is 'host' or 'device'")

    def record():
        if gate is not None:
            gate()
        runtime.memcpyAsync(dst, src, nbytes, MEMCPY_KINDS[src_kind, dst_kind], stream.ptr)
        runtime.memcpyAsync(done, token, 8, MEMCPY_KINDS["device", "device"], stream.ptr)

    return capture(stream, record, what)
