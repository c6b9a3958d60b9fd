"""The demo workload (driver/workload.py) played on the simulated engine, timed by the simulated clock."""

from __future__ import annotations

import numpy as np

from driver.abi import Perm
from driver.workload import GUARD, GUARD_BYTE, WorkloadRow, WorkloadSpec, descriptor_stream
from driver.errors import QueueError
from sim.driver_model import POLL_GAP, SimDriver

QUEUE = 0
COMPLETION_REGION, SRC_REGION, DST_REGION = 0, 1, 2


async def post_stream(driver: SimDriver, raw: bytes, word_addr: int, start: int) -> tuple[int, int]:
    """Post descriptors as a GPU producer would (window flow control on the completion word in
    memory), then wait for the last; returns the cycles of the first doorbell and of the last
    completion seen."""
    slots = driver.geometry.slots
    count = len(raw) // 32
    posted = done = start
    first = None
    deadline = driver.tb.now_cycles() + driver.budget
    while done < start + count:
        free = slots - (posted - done)
        n = min(free, start + count - posted)
        if n > 0:
            k = posted - start
            await driver.write_slots(QUEUE, posted, raw[k * 32 : (k + n) * 32])
            posted += n
            await driver.ring(QUEUE, posted)
            if first is None:
                first = driver.tb.now_cycles()
        await driver.tb.cycles(POLL_GAP)
        word = driver.completion_word(word_addr)
        if word >> 63:
            st = await driver.queue_state(QUEUE)
            raise QueueError(QUEUE, st.error, st.error_cookie, st.error_index)
        done = word
        if driver.tb.now_cycles() > deadline:
            raise TimeoutError(f"the workload stalled at descriptor {done - start} of {count}")
    return first, driver.tb.now_cycles()


async def run_workload(driver: SimDriver, spec: WorkloadSpec) -> list[WorkloadRow]:
    memory = driver.tb.memory
    rng = np.random.default_rng(spec.seed)
    words = memory.alloc(64)
    memory.write(words, bytes(64))
    await driver.set_region(COMPLETION_REGION, words, 64, Perm.WRITE)
    rows = []
    start = 0
    for size in spec.sizes:
        n = spec.descriptors_for(size)
        total = n * size
        src, dst = memory.alloc(total), memory.alloc(total + 2 * GUARD)
        payload = rng.integers(0, 256, total, dtype=np.uint8).tobytes()
        memory.write(src, payload)
        memory.write(dst, bytes([GUARD_BYTE]) * (total + 2 * GUARD))
        await driver.set_region(SRC_REGION, src, total, Perm.READ)
        await driver.set_region(DST_REGION, dst, total + 2 * GUARD, Perm.WRITE)
        await driver.configure_queue(QUEUE, COMPLETION_REGION, 0, start)
        await driver.enable_queue(QUEUE)
        raw = descriptor_stream(n, size, SRC_REGION, DST_REGION, GUARD).tobytes()
        t0, t1 = await post_stream(driver, raw, words, start)
        await driver.disable_queue(QUEUE)
        out = memory.read(dst, total + 2 * GUARD)
        guard = bytes([GUARD_BYTE]) * GUARD
        ok = out[:GUARD] == guard and out[GUARD + total :] == guard and out[GUARD : GUARD + total] == payload
        rows.append(WorkloadRow(size, n, (t1 - t0) * driver.tb.period_ns * 1e-9, "simulated clock", ok))
        start += n
    return rows
