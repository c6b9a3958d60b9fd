"""SimDriver: the driver and a GPU producer, modelled in cocotb, making the same register accesses the real ones make."""

from __future__ import annotations

from driver import register_program as rp
from driver.abi import COMPLETION_BYTES
from driver.backend import Counters, ErrorLogEntry, Geometry, QueueState
from driver.errors import EngineTimeout
from sim.tb import EngineTB

POLL_GAP = 16  # cycles between two reads of a polled register


class SimDriver:
    """Host side through the AXI-Lite BAR port (register programs from driver/register_program.py),
    producer side through the wide window port and the doorbell, completion words polled in memory."""

    def __init__(self, tb: EngineTB, budget_cycles: int = 20_000_000):
        self.tb = tb
        self.budget = budget_cycles
        self.geometry: Geometry | None = None

    # --- register access ------------------------------------------------------------------
    async def read(self, addr: int) -> int:
        return await self.tb.csr.read_dword(addr)

    async def write(self, addr: int, value: int) -> None:
        await self.tb.csr.write_dword(addr, value)

    async def run(self, steps: list[rp.Step]) -> None:
        for step in steps:
            if isinstance(step, rp.Write):
                await self.write(step.addr, step.value)
            else:
                await self.poll(step)

    async def poll(self, step: rp.Poll) -> int:
        deadline = self.tb.now_cycles() + self.budget
        while True:
            value = await self.read(step.addr)
            if value & step.mask == step.expect:
                return value
            if self.tb.now_cycles() > deadline:
                raise EngineTimeout(f"waited {self.budget} cycles for {step.what}; register {step.addr:#x} reads {value:#x}")
            await self.tb.cycles(POLL_GAP)

    # --- host --------------------------------------------------------------------------------
    async def open(self) -> Geometry:
        """Read the identity registers, check them, and enable the engine."""
        values = [await self.read(a) for a in rp.identity_addresses()]
        self.geometry = rp.decode_identity(values)
        await self.run(rp.start_engine())
        return self.geometry

    async def reset(self) -> None:
        await self.run(rp.reset_engine())

    async def set_region(self, region: int, addr: int, size: int, perms: int) -> None:
        await self.run(rp.set_region(region, addr, size, perms))

    async def clear_region(self, region: int) -> None:
        await self.run(rp.clear_region(region))

    async def configure_queue(self, queue: int, region: int, offset: int, start: int = 0) -> None:
        await self.run(rp.configure_queue(queue, region, offset, start))

    async def enable_queue(self, queue: int) -> None:
        await self.run(rp.enable_queue(queue))

    async def disable_queue(self, queue: int) -> None:
        await self.run(rp.disable_queue(queue))

    async def wait_idle(self) -> None:
        await self.run(rp.wait_idle())

    # --- producer (a GPU thread in production) ------------------------------------------------
    async def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        for addr, data in rp.window_writes(queue, index, raw, self.geometry.slots):
            await self.tb.win.write(addr, data)

    async def ring(self, queue: int, producer_index: int) -> None:
        await self.run(rp.ring(queue, producer_index))

    def completion_word(self, addr: int) -> int:
        """What a GPU polling its completion word sees (read straight from memory)."""
        return int.from_bytes(self.tb.memory.read(addr, COMPLETION_BYTES), "little")

    async def wait_word(self, addr: int, ticket: int) -> int:
        """Poll a completion word in memory until it reaches `ticket` or shows the error bit."""
        deadline = self.tb.now_cycles() + self.budget
        while True:
            count, error = rp.completed(self.completion_word(addr))
            if count >= ticket or error:
                return count
            if self.tb.now_cycles() > deadline:
                raise EngineTimeout(f"completion word at {addr:#x} stayed at {count}, waited {self.budget} cycles for {ticket}")
            await self.tb.cycles(POLL_GAP)

    # --- observation ------------------------------------------------------------------------
    async def queue_state(self, queue: int) -> QueueState:
        return rp.decode_queue_state([await self.read(a) for a in rp.queue_state_addresses(queue)])

    async def error_log(self) -> list[ErrorLogEntry]:
        entries = []
        while rp.errlog_valid(await self.read(rp.status_address())):
            entries.append(rp.decode_errlog([await self.read(a) for a in rp.errlog_addresses()]))
            await self.run(rp.pop_errlog())
        return entries

    async def errlog_overflow(self) -> bool:
        return rp.errlog_overflow(await self.read(rp.status_address()))

    async def clear_errlog_overflow(self) -> None:
        await self.run(rp.clear_errlog_overflow())

    async def counters(self) -> Counters:
        return rp.decode_counters([await self.read(a) for a in rp.counter_addresses()])
