"""Pre-armed plans driven by GPU code (software-cuda): the device handle kernels take by value, arming,
host-side waits and the status record.

The handle is device.cuh's arkdma_queue without a window: its doorbell is the plan's trigger word and its
completion word counts finished rounds, so GPU code calls `arkdma::start(plan, r)` and then
`arkdma::wait(plan, r)`, and every wait is bounded by the handle's budget like a queue's.
"""

from __future__ import annotations

import time

import numpy as np

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT
from driver.device import Device
from driver.errors import ArkdmaError, EngineTimeout
from driver.gpu.layout import QUEUE_DTYPE
from driver.gpu.queue import DEFAULT_BUDGET_S, GpuQueueError
from driver.gpu.status import DeviceStatus, StatusRecord


class GpuPlan:
    """A plan of fixed copies (DESCRIPTOR_DTYPE, flags 0) that GPU code starts round by round, with no CPU
    between its trigger and the copies. `arm(rounds)` says how many rounds the program will start; up to
    `depth` wait armed ahead. `close()` fences off rounds armed but never started."""

    def __init__(self, device: Device, descriptors: np.ndarray, *, depth: int = 8,
                 budget_s: float = DEFAULT_BUDGET_S):
        backend = device.backend
        if not hasattr(backend, "open_plan"):
            raise GpuQueueError(f"engine {backend.name} has no pre-armed plans; they need software-cuda")
        if not 0 < budget_s < 3600:
            raise GpuQueueError(f"budget_s must be in (0, 3600) seconds, not {budget_s}")
        self.device, self.budget_ns = device, int(budget_s * 1e9)
        self._record = StatusRecord("plan")
        self.words = backend.open_plan(descriptors, depth)
        self.id = self.words.id
        self._record.reset()
        self._open = True

    def handle(self) -> np.ndarray:
        """The device handle (a one-element structured array CuPy passes to a kernel by value)."""
        h = np.zeros(1, QUEUE_DTYPE)
        h["window"], h["doorbell"], h["completion"] = 0, self.words.trigger, self.words.done
        h["producer"] = self._record.producer.data.ptr
        h["status"] = self._record.gpu_ptr()
        h["budget_ns"], h["slots"], h["id"] = self.budget_ns, self.words.depth, self.id
        return h

    def arm(self, rounds: int) -> None:
        self.device.backend.arm_plan(self.id, rounds)

    def state(self):
        return self.device.backend.plan_state(self.id)

    def done_word(self) -> int:
        return int.from_bytes(self.device.backend.read_bus(self.words.done, 8), "little")

    def wait(self, round_: int, timeout: float = 10.0) -> int:
        """Host-side wait until round `round_` has landed (for tests and tools); returns the rounds done."""
        deadline = time.monotonic() + timeout
        while True:
            word = self.done_word()
            if word >> COMPLETION_ERROR_BIT:
                raise ArkdmaError(f"plan {self.id} failed: {self.device.backend.note() or 'no detail'}")
            if (word & COMPLETION_COUNT_MASK) >= round_:
                return word & COMPLETION_COUNT_MASK
            if time.monotonic() > deadline:
                raise EngineTimeout(f"plan {self.id}: {word} rounds done, waited {timeout:.1f} s for round {round_}")
            time.sleep(1e-4)

    def status(self) -> DeviceStatus:
        return self._record.read()

    def abort(self) -> None:
        """Make every wait of GPU code on this plan return ABORTED (within ~20 us)."""
        self._record.abort()

    def close(self, timeout: float = 1.0) -> int:
        """Closes the plan; returns how many armed rounds were never started and are now fenced off."""
        if not self._open:
            return 0
        self._open = False
        return self.device.backend.close_plan(self.id, timeout)

    def __enter__(self) -> "GpuPlan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
