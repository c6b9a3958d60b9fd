"""AsyncScenarioPlayer: plays driver.scenario.Scenario steps on the simulated engine, as ScenarioPlayer does on a Backend."""

from __future__ import annotations

from driver import register_program as rp
from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, ErrorCode
from driver.scenario import Outcome, Scenario, descriptor_from
from driver.errors import EngineTimeout
from sim.driver_model import POLL_GAP, SimDriver


class AsyncScenarioPlayer:
    """Same operations and the same Outcome as driver.scenario.ScenarioPlayer; buffers live in the
    simulated host memory, the producer polls completion words there like a GPU would."""

    def __init__(self, driver: SimDriver, scenario: Scenario):
        self.driver, self.scenario = driver, scenario
        self.memory = driver.tb.memory
        self.buffers: dict[str, tuple[int, int]] = {}  # name -> (bus address, size)
        self.completion: dict[int, int] = {}  # queue -> bus address of its completion word
        self.regions: dict[int, tuple[str | None, int]] = {}
        self.starts: dict[int, int] = {}
        self.posted: dict[int, int] = {}
        self.advanced = 0

    async def play(self) -> Outcome:
        await self.run_steps()
        await self.driver.wait_idle()
        return await self.outcome()

    async def run_steps(self) -> None:
        """Allocate the buffers and perform the steps, without waiting for the engine to finish."""
        for spec in self.scenario.buffers:
            addr = self.memory.alloc(spec.size)
            self.memory.write(addr, spec.initial())
            self.buffers[spec.name] = (addr, spec.size)
        for step in self.scenario.steps:
            await getattr(self, "_op_" + step["op"])(**{k: v for k, v in step.items() if k != "op"})

    async def outcome(self) -> Outcome:
        queues = {}
        for q in sorted(self.starts):
            st = await self.driver.queue_state(q)
            queues[q] = {
                "enabled": st.enabled, "halted": st.halted, "error": st.error.name,
                "error_cookie": st.error_cookie if st.halted else 0,
                "error_index": st.error_index if st.halted else 0,
                "completion_word": st.completion_word,
            }
        errlog = sorted(
            ({"queue": e.queue, "code": ErrorCode(e.code).name, "cookie": e.cookie, "index": e.index}
             for e in await self.driver.error_log()),
            key=lambda e: (e["queue"], e["index"]),
        )
        counters = await self.driver.counters()
        return Outcome({name: self.memory.read(addr, size) for name, (addr, size) in self.buffers.items()},
                       queues, errlog, counters.descriptors, counters.bytes)

    # --- host -------------------------------------------------------------------------------
    async def _op_region(self, id: int, buffer: str, offset: int, size: int, perms: int) -> None:
        await self.driver.set_region(id, self.buffers[buffer][0] + offset, size, perms)
        self.regions[id] = (buffer, offset)

    async def _op_region_hole(self, id: int, size: int, perms: int) -> None:
        await self.driver.set_region(id, self.memory.hole(size), size, perms)
        self.regions[id] = (None, 0)

    async def _op_clear_region(self, id: int) -> None:
        await self.driver.clear_region(id)
        self.regions.pop(id, None)

    async def _op_configure(self, queue: int, region: int, offset: int, start: int = 0) -> None:
        await self.driver.configure_queue(queue, region, offset, start)
        name, base = self.regions.get(region, (None, 0))
        if name is not None:
            self.completion[queue] = self.buffers[name][0] + base + offset
        self.starts[queue] = start

    async def _op_enable(self, queue: int) -> None:
        await self.driver.enable_queue(queue)
        self.posted[queue] = self.starts.get(queue, 0)
        self.starts.setdefault(queue, 0)

    async def _op_disable(self, queue: int) -> None:
        await self.driver.disable_queue(queue)

    async def _op_idle(self, cycles: int) -> None:
        await self.driver.tb.cycles(cycles)

    async def _op_reset(self) -> None:
        await self.driver.reset()
        self.regions.clear()
        self.completion.clear()

    # --- producer -----------------------------------------------------------------------------
    async def _op_write(self, queue: int, index: int, descriptors: list[dict]) -> None:
        await self.driver.write_slots(queue, index, b"".join(descriptor_from(d).pack() for d in descriptors))

    async def _op_ring(self, queue: int, value: int) -> None:
        await self.driver.ring(queue, value)

    async def _op_post(self, queue: int, descriptors: list[dict]) -> None:
        slots = self.driver.geometry.slots
        raw = [descriptor_from(d).pack() for d in descriptors]
        addr = self.completion[queue]
        done = 0
        deadline = self.driver.tb.now_cycles() + self.driver.budget
        while done < len(raw):
            word = self.driver.completion_word(addr)
            if word >> COMPLETION_ERROR_BIT:
                return  # halted: a real producer stops posting
            free = slots - (self.posted[queue] - (word & COMPLETION_COUNT_MASK))
            if free <= 0:
                if self.driver.tb.now_cycles() > deadline:
                    raise EngineTimeout(f"queue {queue}: no room in the window for {self.driver.budget} cycles")
                await self.driver.tb.cycles(POLL_GAP)
                continue
            n = min(free, len(raw) - done)
            await self.driver.write_slots(queue, self.posted[queue], b"".join(raw[done : done + n]))
            self.posted[queue] += n
            done += n
            await self.driver.ring(queue, self.posted[queue])

    async def _op_advance(self, n: int) -> None:
        """Wait until about n more descriptors completed (or the engine went idle)."""
        target = self.advanced + n
        deadline = self.driver.tb.now_cycles() + self.driver.budget
        while (await self.driver.counters()).descriptors < target:
            idle = rp.status_idle(await self.driver.read(rp.status_address()))
            if idle or self.driver.tb.now_cycles() > deadline:
                break
            await self.driver.tb.cycles(POLL_GAP)
        self.advanced = target

    async def _op_wait_idle(self) -> None:
        await self.driver.wait_idle()
