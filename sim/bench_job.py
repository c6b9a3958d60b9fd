"""The simulator side of `arkdma sim bench`: one descriptor's latency, a back-to-back stream, the accept rate."""

from __future__ import annotations

import numpy as np
from cocotb.triggers import RisingEdge

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, Flag, Perm
from driver.workload import GUARD, GUARD_BYTE, descriptor_stream
from driver.errors import EngineTimeout, QueueError
from sim.driver_model import SimDriver

QUEUE = 0
COMPLETION_REGION, SRC_REGION, DST_REGION = 0, 1, 2
SAMPLE_GAP = 4  # cycles between two looks at the completion word during a stream


class BusMonitor:
    """Cycle stamps of handshakes on the engine's ports, sampled at every rising edge while running:
    doorbell writes taken by the BAR (the later of the AXI-Lite AW and W handshakes), read requests
    (AR), and write bursts to the bus word holding one address (AW)."""

    def __init__(self, driver: SimDriver, doorbell_addr: int, watch_addr: int):
        self.driver, self.dut = driver, driver.tb.dut
        self.doorbell_addr = doorbell_addr
        self.watch_addr = watch_addr & ~(len(self.dut.mem__wdata) // 8 - 1)
        self.doorbells: list[int] = []
        self.reads: list[int] = []
        self.watched_writes: list[int] = []
        self.running = False

    async def run(self) -> None:
        d = self.dut
        aw_doorbell = w_taken = None  # cycles of the halves of a register write seen so far
        self.running = True
        while self.running:
            await RisingEdge(d.clk)
            now = self.driver.tb.now_cycles()
            if int(d.csr__awvalid.value) and int(d.csr__awready.value):
                aw_doorbell = now if int(d.csr__awaddr.value) == self.doorbell_addr else -1
            if int(d.csr__wvalid.value) and int(d.csr__wready.value):
                w_taken = now
            if aw_doorbell is not None and w_taken is not None:
                if aw_doorbell >= 0:
                    self.doorbells.append(max(aw_doorbell, w_taken))
                aw_doorbell = w_taken = None
            if int(d.mem__arvalid.value) and int(d.mem__arready.value):
                self.reads.append(now)
            if int(d.mem__awvalid.value) and int(d.mem__awready.value) and int(d.mem__awaddr.value) == self.watch_addr:
                self.watched_writes.append(now)


class Setup:
    """One queue with its completion word, a source and a destination region of `total` bytes."""

    def __init__(self, driver: SimDriver, total: int, seed: int):
        self.driver, self.total = driver, total
        self.rng = np.random.default_rng(seed)
        self.start = 0

    async def open(self) -> None:
        memory, d = self.driver.tb.memory, self.driver
        self.word = memory.alloc(64)
        memory.write(self.word, bytes(64))
        self.src, self.dst = memory.alloc(self.total), memory.alloc(self.total + 2 * GUARD)
        await d.set_region(COMPLETION_REGION, self.word, 64, Perm.WRITE)
        await d.set_region(SRC_REGION, self.src, self.total, Perm.READ)
        await d.set_region(DST_REGION, self.dst, self.total + 2 * GUARD, Perm.WRITE)
        self._record_word_writes()

    def _record_word_writes(self) -> None:
        """Stamp every write of the completion word with the cycle its data reached memory (polling
        would blur the times by the poll gap)."""
        memory, word, tb = self.driver.tb.memory, self.word, self.driver.tb
        self.word_writes: list[tuple[int, int]] = []
        write = memory.write

        def recording_write(addr: int, data: bytes) -> None:
            write(addr, data)
            if addr <= word < addr + len(data):
                self.word_writes.append((tb.now_cycles(), self.word_value() & COMPLETION_COUNT_MASK))

        memory.write = recording_write

    async def begin(self) -> bytes:
        """Fresh payload and guards, queue (re)enabled at the current index; returns the payload."""
        memory = self.driver.tb.memory
        payload = self.rng.integers(0, 256, self.total, dtype=np.uint8).tobytes()
        memory.write(self.src, payload)
        memory.write(self.dst, bytes([GUARD_BYTE]) * (self.total + 2 * GUARD))
        await self.driver.configure_queue(QUEUE, COMPLETION_REGION, 0, self.start)
        await self.driver.enable_queue(QUEUE)
        return payload

    async def end(self, payload: bytes, nbytes: int, count: int) -> bool:
        """Disable the queue; True when the first `nbytes` of the destination equal the source and
        every other destination byte (guards included) is untouched."""
        await self.driver.disable_queue(QUEUE)
        self.start += count
        out = self.driver.tb.memory.read(self.dst, self.total + 2 * GUARD)
        untouched = bytes([GUARD_BYTE])
        return (out[:GUARD] == untouched * GUARD and out[GUARD : GUARD + nbytes] == payload[:nbytes]
                and out[GUARD + nbytes :] == untouched * (len(out) - GUARD - nbytes))

    def word_value(self) -> int:
        return self.driver.completion_word(self.word)

    async def check_halt(self) -> None:
        if self.word_value() >> COMPLETION_ERROR_BIT:
            st = await self.driver.queue_state(QUEUE)
            raise QueueError(QUEUE, st.error, st.error_cookie, st.error_index)


def _descriptors(n: int, size: int, notify_every: int) -> bytes:
    d = descriptor_stream(n, size, SRC_REGION, DST_REGION, GUARD)
    d["flags"][notify_every - 1 :: notify_every] |= np.uint16(Flag.NOTIFY)
    return d.tobytes()


async def single(driver: SimDriver, setup: Setup, size: int, doorbell_addr: int) -> dict:
    """One descriptor on an idle engine: doorbell (BAR takes the write) -> first read request ->
    completion-word write issued (AW), in cycles."""
    import cocotb

    payload = await setup.begin()
    monitor = BusMonitor(driver, doorbell_addr, setup.word)
    task = cocotb.start_soon(monitor.run())
    await driver.write_slots(QUEUE, setup.start, _descriptors(1, size, 1))
    await driver.ring(QUEUE, setup.start + 1)
    deadline = driver.tb.now_cycles() + driver.budget
    while setup.word_value() & COMPLETION_COUNT_MASK < setup.start + 1:
        await setup.check_halt()
        if driver.tb.now_cycles() > deadline:
            raise EngineTimeout(f"one {size}-byte descriptor did not complete in {driver.budget} cycles")
        await driver.tb.cycles(1)
    monitor.running = False
    await task
    ok = await setup.end(payload, size, 1)
    if not monitor.doorbells or not monitor.reads or not monitor.watched_writes:
        raise EngineTimeout("the bus monitor missed the doorbell, the read request or the completion write")
    db = monitor.doorbells[0]
    return {"bytes": size, "doorbell_to_read": monitor.reads[0] - db,
            "doorbell_to_counter": monitor.watched_writes[-1] - db, "verified": ok}


async def accept_rate(driver: SimDriver, setup: Setup, count: int, doorbell_addr: int) -> dict:
    """`count` 64-byte descriptors already in the window, one doorbell: read requests (one 1-beat burst
    each) per cycle from the first to the last. `count` stays within the reads the engine may have
    outstanding, so the memory round trip does not enter."""
    import cocotb

    payload = await setup.begin()
    monitor = BusMonitor(driver, doorbell_addr, setup.word)
    task = cocotb.start_soon(monitor.run())
    await driver.write_slots(QUEUE, setup.start, _descriptors(count, 64, count))
    await driver.ring(QUEUE, setup.start + count)
    await wait_count(driver, setup, setup.start + count)
    monitor.running = False
    await task
    ok = await setup.end(payload, 64 * count, count)
    reads = monitor.reads
    span = reads[-1] - reads[0]
    return {"descriptors": count, "read_requests": len(reads), "cycles": span,
            "per_cycle": (len(reads) - 1) / span if span else float(len(reads)), "verified": ok}


async def wait_count(driver: SimDriver, setup: Setup, target: int) -> int:
    deadline = driver.tb.now_cycles() + driver.budget
    while (word := setup.word_value()) & COMPLETION_COUNT_MASK < target:
        await setup.check_halt()
        if driver.tb.now_cycles() > deadline:
            raise EngineTimeout(f"the completion word stayed at {word:#x}, waiting for {target}")
        await driver.tb.cycles(SAMPLE_GAP)
    return driver.tb.now_cycles()


async def stream(driver: SimDriver, setup: Setup, size: int, count: int, notify_every: int) -> dict:
    """`count` back-to-back descriptors of `size` bytes, posted as a GPU producer would: as soon as the
    completion word frees window slots. Returns every write of the completion word (cycle, completed)."""
    slots = driver.geometry.slots
    payload = await setup.begin()
    raw = _descriptors(count, size, notify_every)
    base = setup.start
    posted = done = 0
    first_doorbell = None
    deadline = driver.tb.now_cycles() + driver.budget
    while done < count:
        free = min(slots - (posted - done), count - posted)
        if free > 0:
            await driver.write_slots(QUEUE, base + posted, raw[posted * 32 : (posted + free) * 32])
            posted += free
            await driver.ring(QUEUE, base + posted)
            if first_doorbell is None:
                first_doorbell = driver.tb.now_cycles()
        await driver.tb.cycles(SAMPLE_GAP)
        await setup.check_halt()
        done = (setup.word_value() & COMPLETION_COUNT_MASK) - base
        if driver.tb.now_cycles() > deadline:
            raise EngineTimeout(f"the {size}-byte stream stalled at descriptor {done} of {count}")
    ok = await setup.end(payload, size * count, count)
    words: list[tuple[int, int]] = []  # the first write of each new count (later ones repeat it: dry, disable)
    for t, v in setup.word_writes:
        if 0 < v - base <= count and (not words or v - base > words[-1][1]):
            words.append((t, v - base))
    return {"bytes": size, "descriptors": count, "first_doorbell": first_doorbell, "samples": words,
            "verified": ok}
