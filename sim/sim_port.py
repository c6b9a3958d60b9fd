"""SimPort: the asynchronous port of driver/player.py on the simulated engine. Buffers live in the simulated
host memory (a handle is (bus address, size)), the producer polls completion words there like a GPU would,
and time is the simulated clock."""

from __future__ import annotations

from driver import register_program as rp
from sim.driver_model import POLL_GAP, SimDriver


class SimPort:
    def __init__(self, driver: SimDriver):
        self.driver = driver
        self.memory = driver.tb.memory
        self.advanced = 0  # descriptors the `advance` steps have asked for so far

    def alloc(self, size: int, placement: str) -> tuple[int, int]:
        return self.memory.alloc(size), size  # the testbench has one memory: every placement lands there

    def write(self, handle: tuple[int, int], offset: int, data: bytes) -> None:
        self.memory.write(handle[0] + offset, data)

    def read(self, handle: tuple[int, int], offset: int, n: int) -> bytes:
        return self.memory.read(handle[0] + offset, n)

    def address(self, handle: tuple[int, int]) -> int:
        return handle[0]

    def hole(self, size: int) -> int:
        return self.memory.hole(size)

    def slots(self) -> int:
        return self.driver.geometry.slots

    def set_region(self, id: int, addr: int, size: int, perms: int):
        return self.driver.set_region(id, addr, size, perms)

    def clear_region(self, id: int):
        return self.driver.clear_region(id)

    def configure_queue(self, queue: int, region: int, offset: int, start: int):
        return self.driver.configure_queue(queue, region, offset, start)

    def enable_queue(self, queue: int):
        return self.driver.enable_queue(queue)

    def disable_queue(self, queue: int):
        return self.driver.disable_queue(queue)

    def reset(self):
        return self.driver.reset()

    def write_slots(self, queue: int, index: int, raw: bytes):
        return self.driver.write_slots(queue, index, raw)

    def ring(self, queue: int, value: int):
        return self.driver.ring(queue, value)

    def queue_state(self, queue: int):
        return self.driver.queue_state(queue)

    def error_log(self):
        return self.driver.error_log()

    def errlog_overflow(self):
        return self.driver.errlog_overflow()

    def clear_errlog_overflow(self):
        return self.driver.clear_errlog_overflow()

    def counters(self):
        return self.driver.counters()

    def pause(self):
        return self.driver.tb.cycles(POLL_GAP)

    async def advance(self, n: int) -> None:
        """Wait until about n more descriptors completed (or the engine went idle)."""
        target = self.advanced + n
        deadline = self.driver.tb.now_cycles() + self.driver.budget
        while (await self.driver.counters()).descriptors < target:
            idle = rp.status_idle(await self.driver.read(rp.status_address()))
            if idle or self.driver.tb.now_cycles() > deadline:
                break
            await self.driver.tb.cycles(POLL_GAP)
        self.advanced = target

    def idle(self, cycles: int):
        return self.driver.tb.cycles(cycles)

    def wait_idle(self):
        return self.driver.wait_idle()

    def deadline(self) -> int:
        return self.driver.tb.now_cycles() + self.driver.budget

    def expired(self, deadline: int) -> bool:
        return self.driver.tb.now_cycles() > deadline

    def now(self) -> float:
        return self.driver.tb.now_cycles() * self.driver.tb.period_ns * 1e-9

    def timebase(self) -> str:
        return "simulated clock"
