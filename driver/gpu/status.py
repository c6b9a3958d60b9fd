"""The host-visible status record a GPU handle reports failures into (device.cuh's arkdma_status), in
mapped pinned memory, with the producer state whose claim word makes the first failure win."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT
from driver.gpu.layout import PRODUCER_DTYPE, STATUS_DTYPE, DeviceCode, Site


@dataclass(frozen=True)
class DeviceStatus:
    """A status record as the GPU left it."""

    code: DeviceCode
    site: Site
    queue: int  # the queue id, or the plan id for a plan's record
    expected: int
    observed: int
    waited_ns: int
    failures: int
    what: str = "queue"

    @property
    def ok(self) -> bool:
        return self.code == DeviceCode.OK

    def describe(self) -> str:
        if self.ok:
            return "no failure"
        word = self.observed
        seen = f"{word & COMPLETION_COUNT_MASK}" + (" with the error bit" if word >> COMPLETION_ERROR_BIT else "")
        what = {Site.POST: "waiting for room to post", Site.WAIT: "waiting for ticket",
                Site.SIGNAL: "waiting for the flag to reach"}.get(self.site, "at an unknown site")
        return (f"{self.what} {self.queue}: {self.code.name} {what} {self.expected} after {self.waited_ns / 1e6:.3f} ms "
                f"(last read {seen}); {self.failures} failure(s) in all")


class StatusRecord:
    """One handle's status record (pinned host memory, mapped for the GPU) and producer state (GPU memory)."""

    def __init__(self, what: str = "queue"):
        import cupy

        self.what = what
        self.producer = cupy.zeros(PRODUCER_DTYPE.itemsize, dtype=cupy.uint8)
        self._mem = cupy.cuda.alloc_pinned_memory(STATUS_DTYPE.itemsize)
        self._record = np.frombuffer(self._mem, dtype=STATUS_DTYPE, count=1)

    def gpu_ptr(self) -> int:
        # Pinned memory is mapped at the same address on the GPU (unified addressing); ask CUDA to be sure.
        from cupy.cuda import runtime

        return runtime.pointerGetAttributes(self._mem.ptr).devicePointer

    def read(self) -> DeviceStatus:
        s = self._record[0]
        return DeviceStatus(DeviceCode(int(s["code"])), Site(int(s["site"])), int(s["queue"]), int(s["expected"]),
                            int(s["observed"]), int(s["waited_ns"]), int(s["failures"]), self.what)

    def reset(self, posted: int = 0) -> None:
        """A clean record, and producer state at `posted` with its failure claim released."""
        self._record[0] = np.zeros((), STATUS_DTYPE)
        state = np.zeros(1, PRODUCER_DTYPE)
        state["posted"] = state["completed"] = posted
        self.producer.set(state.view(np.uint8))

    def clear(self) -> None:
        """A clean record and a released claim; the producer's indices stay."""
        self._record[0] = np.zeros((), STATUS_DTYPE)
        state = self.producer.get().view(PRODUCER_DTYPE)
        state["claim"] = 0
        self.producer.set(state.view(np.uint8))

    def abort(self) -> None:
        self._record["abort"] = 1
