"""How the host's `go` reaches the resident kernel, ordered after the caller's queued GPU work.

"stream": `go` is written by a stream memory operation (cuStreamWriteValue64, default flags: the write is preceded by
a memory barrier) on a go stream the runtime owns, into the control block's word (pinned host memory, its GPU
address). Before each write the go stream waits (an event recorded, then cudaStreamWaitEvent) for the caller's
current CuPy stream and, once PyTorch is imported and has initialized CUDA, PyTorch's current stream: the kernel reads
its inputs only after what the caller queued before run() has finished, and the host never blocks for it. The
writes go through the one go stream, in order, so `go` only grows.

"auto": the stream path, except when the caller's streams and the go stream are all
idle (cudaStreamQuery): then nothing queued needs waiting for and no earlier write is still to land, so the host
writes the word itself, sparing the GPU's command latency on the round trip.

"host" (the default): the host synchronizes the caller's streams, then writes the word itself. Also taken where stream
memory operations cannot run (no driver entry point, the device attribute CAN_USE_64_BIT_STREAM_MEM_OPS is 0, or a
write fails, after which the go stream's earlier writes are waited for first so `go` still only grows). The stream
and auto paths are asked for with ARK_GO_PATH; the round trip is no shorter on them (bench/results/h200/), so the
path that needs no driver entry point is the default.
`GoSignal.path` says which is in use, `GoSignal.reason` why the host path was taken, and `GoSignal.writes` how many
writes each way went."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from ark_runtime.runtime.control import ControlBlock
from ark_runtime.runtime.faults import LoopError

GO_PATH_ENV = "ARK_GO_PATH"  # "host" (the default), "auto" or "stream"
GO_PATHS = ("auto", "stream", "host")
CAN_USE_64_BIT_STREAM_MEM_OPS = 122  # CUdevice_attribute (CUDA 12); _V1, 93, on the drivers before
CAN_USE_64_BIT_STREAM_MEM_OPS_V1 = 93
CUDA_ERROR_INVALID_CONTEXT = 201
WRITE_VALUE_DEFAULT = 0  # CU_STREAM_WRITE_VALUE_DEFAULT: a memory barrier, then the write


class StreamOpsUnavailable(LoopError):
    """Stream memory operations cannot be used here; the message says why."""


class StreamMemOps:
    """cuStreamWriteValue64 and the device attribute that allows it, from the CUDA driver library (ctypes: CuPy
    does not wrap them)."""

    def __init__(self):
        from driver.gpu import libcuda

        sig = {"cuDeviceGet": ((ctypes.POINTER(ctypes.c_int), ctypes.c_int), ctypes.c_int),
               "cuDeviceGetAttribute": ((ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int), ctypes.c_int)}
        write = ((ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint), ctypes.c_int)
        try:
            lib = libcuda.functions(**sig)
        except libcuda.DriverLibraryError as exc:
            raise StreamOpsUnavailable(str(exc)) from None
        for name in ("cuStreamWriteValue64_v2", "cuStreamWriteValue64"):
            try:
                fn = libcuda.functions(**{name: write})
            except AttributeError:
                continue
            self._write = getattr(fn, name)
            break
        else:
            raise StreamOpsUnavailable("the CUDA driver has no cuStreamWriteValue64")
        self._lib = lib
        self._error_name = libcuda.error_name

    def can_write_64(self, device_id: int) -> bool:
        """Whether the GPU takes 64-bit stream writes (the device attribute; its _V1 on older drivers)."""
        dev, value = ctypes.c_int(), ctypes.c_int()
        if self._lib.cuDeviceGet(ctypes.byref(dev), device_id) != 0:
            return False
        for attribute in (CAN_USE_64_BIT_STREAM_MEM_OPS, CAN_USE_64_BIT_STREAM_MEM_OPS_V1):
            if self._lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, dev) == 0:
                return value.value != 0
        return False

    def write64(self, stream_ptr: int, address: int, value: int) -> int:
        """Queues the write of `value` to `address` (a GPU address) on the stream; the CUresult."""
        return self._write(stream_ptr, address, value, WRITE_VALUE_DEFAULT)

    def error_name(self, rc: int) -> str:
        return self._error_name(rc)


def wanted_path() -> str:
    """ARK_GO_PATH, checked: "host" when unset."""
    wanted = os.environ.get(GO_PATH_ENV) or "host"
    if wanted not in GO_PATHS:
        raise LoopError(f"{GO_PATH_ENV}={wanted!r}: give one of {', '.join(GO_PATHS)} (or leave it unset: host)")
    return wanted


def stream_ops(device_id: int, load: Callable[[], StreamMemOps] = StreamMemOps) -> tuple[StreamMemOps | None, str]:
    """(the stream memory operations, "") where `go` can take the stream path on GPU `device_id`, else (None, why
    not): ARK_GO_PATH=host, no driver entry point, or the GPU's attribute says no."""
    if wanted_path() == "host":
        return None, f"{GO_PATH_ENV}=host"
    try:
        ops = load()
    except StreamOpsUnavailable as exc:
        return None, str(exc)
    if not ops.can_write_64(device_id):
        return None, (f"GPU {device_id} cannot write 64-bit values from a stream (CAN_USE_64_BIT_STREAM_MEM_OPS "
                      "is 0)")
    return ops, ""


def caller_streams(device_id: int) -> list[int]:
    """The caller's current streams on GPU `device_id` (their handles), whose queued work must finish before the
    kernel reads its inputs: CuPy's, and PyTorch's once PyTorch is imported and has initialized CUDA; each once."""
    import cupy

    streams = [cupy.cuda.get_current_stream(device_id).ptr]
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            ptr = int(raw(device_id)) if raw is not None else int(torch.cuda.current_stream(device_id).cuda_stream)
            if ptr not in streams:
                streams.append(ptr)
    except AttributeError:  # not PyTorch as we know it (a stand-in module): nothing of its to wait for
        pass
    return streams


class CudaStreams:
    """The CUDA runtime calls GoSignal makes besides the stream write (CuPy's), apart so tests can stand in. `Error`:
    the exception they raise on a CUDA error."""

    def __init__(self):
        from cupy.cuda import runtime

        self._runtime = runtime
        self.Error = runtime.CUDARuntimeError

    def new_stream(self):
        """A non-blocking stream: `.ptr`, `.synchronize()`."""
        import cupy

        return cupy.cuda.Stream(non_blocking=True)

    def new_event(self) -> object:
        import cupy

        return cupy.cuda.Event(disable_timing=True)

    def order_after(self, stream, event, ptr: int) -> None:
        """`stream` waits (on the GPU) for what is queued now on the stream `ptr`, through `event`."""
        self._runtime.eventRecord(event.ptr, ptr)
        self._runtime.streamWaitEvent(stream.ptr, event.ptr, 0)

    def synchronize(self, ptr: int) -> None:
        self._runtime.streamSynchronize(ptr)

    def idle(self, ptr: int) -> bool:
        """Whether everything queued on the stream `ptr` has finished (cudaStreamQuery)."""
        return self._runtime.streamQuery(ptr) == 0

    def set_device(self, device_id: int) -> None:
        self._runtime.setDevice(device_id)

    def caller_streams(self, device_id: int) -> list[int]:
        return caller_streams(device_id)


_RETIRED: list = []  # go signals closed with a stream write still queued: their control block is held till it lands


class GoSignal:
    """Writes `go` into the control block, after the caller's queued work: on the go stream or from the host."""

    def __init__(self, control: ControlBlock, device_id: int, load: Callable[[], StreamMemOps] = StreamMemOps,
                 cuda: CudaStreams | None = None):
        self._control = control
        self._device_id = device_id
        self._cuda = cuda if cuda is not None else CudaStreams()
        self._ops, self.reason = stream_ops(device_id, load)
        self._shortcut = wanted_path() == "auto"  # host writes while everything is idle
        self.writes = {"stream": 0, "host": 0}
        self._stream = self._events = None
        if self._ops is not None:
            self._stream = self._cuda.new_stream()
            self._events = [self._cuda.new_event() for _ in range(2)]
            # the first write, of the value the word holds: proves the call works here before a run needs it
            rc = self._write(int(control.go[0]))
            if rc == 0:
                self._stream.synchronize()
            else:
                self._fall_back(f"cuStreamWriteValue64 failed with {self._ops.error_name(rc)}")

    @property
    def path(self) -> str:
        """"auto", "stream" or "host" (the module's docstring)."""
        if self._ops is None:
            return "host"
        return "auto" if self._shortcut else "stream"

    def write(self, value: int) -> None:
        """`go` = value once the caller's queued work is done (in GPU order on the stream path)."""
        if self._ops is not None:
            try:
                callers = self._cuda.caller_streams(self._device_id)
                if self._shortcut and self._cuda.idle(self._stream.ptr) and all(map(self._cuda.idle, callers)):
                    self._control.go[0] = value
                    self.writes["host"] += 1
                    return
                for event, ptr in zip(self._events, callers):
                    self._cuda.order_after(self._stream, event, ptr)
                rc = self._write(value)
            except self._cuda.Error as exc:
                rc, why = -1, f"ordering the go stream after the caller's failed: {exc}"
            else:
                why = f"cuStreamWriteValue64 failed with {self._ops.error_name(rc)}" if rc else ""
            if rc == 0:
                self.writes["stream"] += 1
                return
            self._fall_back(why)
        self._host_write(value)

    def _write(self, value: int) -> int:
        rc = self._ops.write64(self._stream.ptr, self._control.go_device_ptr, value)
        if rc == CUDA_ERROR_INVALID_CONTEXT:  # a thread that never made a CUDA runtime call: make it current
            self._cuda.set_device(self._device_id)
            rc = self._ops.write64(self._stream.ptr, self._control.go_device_ptr, value)
        return rc

    def _fall_back(self, why: str) -> None:
        """To the host path for good: the go stream's writes land first, so `go` never goes back."""
        self.settle()
        self._ops, self.reason = None, why

    def settle(self) -> None:
        """Until every write queued on the go stream has landed."""
        if self._stream is not None:
            self._stream.synchronize()

    def close(self) -> None:
        """The runtime is done with `go`. A write still queued on the go stream (behind the caller's work) would land
        in the control block after its memory went back to the pinned pool, maybe into the next runtime's `go`: the
        block is held until it has landed (checked, without waiting, at every close)."""
        if self._stream is not None and self not in _RETIRED and not self._idle():
            _RETIRED.append(self)
        _RETIRED[:] = [g for g in _RETIRED if not g._idle()]

    def _idle(self) -> bool:
        try:
            return self._cuda.idle(self._stream.ptr)
        except Exception:  # noqa: BLE001 - a lost context writes nothing more
            return True

    def _host_write(self, value: int) -> None:
        for ptr in self._cuda.caller_streams(self._device_id):
            self._cuda.synchronize(ptr)
        self._control.go[0] = value
        self.writes["host"] += 1
