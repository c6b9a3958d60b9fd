"""The cocotb module of `arkdma sim bench --card` (sim/card_bench.py starts it): the card (sim/card.py) behind
cocotbext-pcie's UltraScale+ block model at a chosen link, a root complex whose host memory answers reads
after a configurable latency, and one message size measured: one descriptor alone (doorbell at the card ->
completion word in host memory), then a stream of descriptors posted as the window frees. Every copied byte
and the guards around the destination are checked. The job comes from ARKDMA_CARD_BENCH_JOB, the result goes
to ARKDMA_SIM_RESULT, both JSON."""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import Event, First, Timer
from cocotb.utils import get_sim_time
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.core.tlp import TlpType
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice

from driver import register_program as rp
from driver.abi import COMPLETION_COUNT_MASK, WINDOW_BASE
from driver.errors import EngineTimeout
from sim import bench_job
from sim.card_bench import JOB_ENV, RESULT_ENV
from sim.card_session import Card, RootComplexMemory, TimedBar
from sim.driver_model import SimDriver

MEM_READ, MEM_WRITE = 0, 1  # request types in DW2 [14:11] of the RQ and CQ descriptors


class PinlessBlock(UltraScalePlusPcieDevice):
    """The block model without the per-cycle loops that only drive its control, interrupt and
    sequence-number ports: the card connects none of them, and each loop is a Python wake-up every clock.
    The sequence-number queue then keeps one entry per request, unread. (The configuration-status loop
    stays: it drives cfg_max_read_req and cfg_max_payload, which the card cuts its requests to.)"""

    async def _run_cfg_ctrl_logic(self):  # with no config-space-enable port the model enables it once, at start
        return

    async def _run_cfg_int_logic(self):
        return

    async def _run_rq_seq_num_logic(self):
        return


def delay_host_reads(rc: RootComplex, latency_ns: float) -> None:
    """The root complex answers each memory read `latency_ns` after the request arrives. Each read waits in
    a task of its own, so reads overlap as they do in a real memory system; the model's own handler would
    otherwise answer them one at a time, in its receive loop."""
    if latency_ns <= 0:
        return
    answer = rc.handle_mem_read_tlp

    async def later(tlp) -> None:
        await Timer(latency_ns, "ns")
        await answer(tlp)

    async def take(tlp) -> None:
        cocotb.start_soon(later(tlp))

    rc.register_rx_tlp_handler(TlpType.MEM_READ, take)
    rc.register_rx_tlp_handler(TlpType.MEM_READ_64, take)


class StoredBar:
    """BAR0 written as a GPU thread writes it: `store_bytes` at a time, each store its own posted write (TLP), as
    device.cuh's write_slot posts a descriptor with two 16-byte stores; 0 hands the whole write to the root
    complex, which cuts it at its max payload size (a host's memcpy into a write-combined mapping)."""

    def __init__(self, bar: TimedBar, store_bytes: int):
        self.bar, self.store_bytes = bar, store_bytes

    async def write(self, addr: int, data: bytes) -> None:
        step = self.store_bytes or len(data)
        for at in range(0, len(data), step):
            await self.bar.write(addr + at, data[at:at + step])


class LinkTB:
    """What SimDriver drives on the card (as sim/card_session.CardTB), at the link's user clock."""

    def __init__(self, card: Card, dut, period_ns: float, store_bytes: int = 0):
        self.dut, self.period_ns = dut, period_ns
        self.csr = TimedBar(card.bar)
        self.win = StoredBar(self.csr, store_bytes)
        self.memory = RootComplexMemory(card.rc)

    async def cycles(self, n: int) -> None:
        if n > 0:
            await Timer(n * self.period_ns, "ns")

    def now_cycles(self) -> int:
        return int(get_sim_time("ns") / self.period_ns)


class TlpLog:
    """Cycle stamps of TLPs at the card's pins, taken inside the block model's stream models (no per-cycle
    monitor, which would cost a Python wake-up every clock): a doorbell write handed to the CQ stream, a request
    complete on the RQ stream (kind, DWORD count), a completion handed to the RC stream (DWORD count). An idle
    card takes a CQ frame in the cycle it is handed over; in a stream the gaps between stamps of one kind are
    the cycles the front end spends per TLP."""

    def __init__(self, dev, period_ns: float, doorbell_offset: int, bar_bytes: int):
        """Made before the simulation first yields: the stream models' loops, started soon, then call the
        stamping methods from their first frame on."""
        self.period_ns = period_ns
        self.doorbell, self.bar_mask = doorbell_offset, bar_bytes - 1
        self.doorbells: list[int] = []
        self.window_writes: list[tuple[int, int]] = []  # (cycle, dwords): writes into the submission windows
        self.requests: list[tuple[int, int, int, int]] = []  # (cycle, MEM_READ or MEM_WRITE, dwords, address)
        self.completions: list[tuple[int, int]] = []  # (cycle, dwords)
        self._wrap_dequeue(dev.cq_source, self._cq)
        self._wrap_dequeue(dev.rc_source, self._rc)
        sink_frame = dev.rq_sink._sink_frame

        def rq(frame) -> None:
            sink_frame(frame)
            self.requests.append((self.now(), (frame.data[2] >> 11) & 0xF, frame.data[2] & 0x7FF,
                                  (frame.data[0] | frame.data[1] << 32) & ~3))

        dev.rq_sink._sink_frame = rq

    def now(self) -> int:
        return int(get_sim_time("ns") / self.period_ns)

    @staticmethod
    def _wrap_dequeue(source, stamp) -> None:
        get, get_nowait = source._get_frame, source._get_frame_nowait

        async def stamped():
            return stamp(await get())

        source._get_frame = stamped
        source._get_frame_nowait = lambda: stamp(get_nowait())

    def _cq(self, frame):
        addr, kind = (frame.data[0] | frame.data[1] << 32) & ~3, (frame.data[2] >> 11) & 0xF
        if kind == MEM_WRITE and addr & self.bar_mask == self.doorbell:
            self.doorbells.append(self.now())
        elif kind == MEM_WRITE and addr & self.bar_mask >= WINDOW_BASE:
            self.window_writes.append((self.now(), frame.data[2] & 0x7FF))
        return frame

    def _rc(self, frame):
        self.completions.append((self.now(), frame.data[1] & 0x7FF))
        return frame

    def tlps(self) -> dict:
        return {"write_tlps": [(t, n) for t, kind, n, _ in self.requests if kind == MEM_WRITE],
                "read_requests": [(t, n) for t, kind, n, _ in self.requests if kind == MEM_READ],
                "completions": list(self.completions), "window_writes": list(self.window_writes),
                "doorbells": list(self.doorbells)}

    def clear(self) -> None:
        self.doorbells.clear()
        self.window_writes.clear()
        self.requests.clear()
        self.completions.clear()


class Words:
    """The completion word's writes as they land in host memory: stamped into setup.word_writes (cycle,
    count), and an event for whoever waits for the next one."""

    def __init__(self, card: Card, setup: bench_job.Setup, tb: LinkTB):
        self.setup, self.tb, self.landed = setup, tb, Event()
        base, _, _, region = card.rc.mem_address_space.find_regions(setup.word, 8)[0]
        write, at = region.write, setup.word - base

        async def stamped(addr, data, **kwargs):
            await write(addr, data, **kwargs)
            if addr <= at < addr + len(data):
                setup.word_writes.append((tb.now_cycles(), setup.word_value() & COMPLETION_COUNT_MASK))
                self.landed.set()

        region.write = stamped

    def arm(self) -> None:
        """Forget earlier writes: the next wait() returns at the first write from now on."""
        self.landed.clear()

    async def wait(self, budget_cycles: int, what: str) -> None:
        timeout = Timer(budget_cycles * self.tb.period_ns, "ns")
        if await First(self.landed.wait(), timeout) is timeout:
            raise EngineTimeout(f"no completion word came in {budget_cycles} cycles: {what}")

    def count(self) -> int:
        return self.setup.word_value() & COMPLETION_COUNT_MASK


IDLE_BEFORE_DOORBELL = 200  # cycles: the window write is taken before the doorbell, so the doorbell is not queued


async def single(driver: SimDriver, setup: bench_job.Setup, log: TlpLog, words: Words, size: int) -> dict:
    """One descriptor on an idle card: the doorbell reaching the card -> its first read request -> the first
    completion back -> the completion word landing in host memory, in cycles."""
    payload = await setup.begin()
    target = setup.start + 1
    await driver.write_slots(bench_job.QUEUE, setup.start, bench_job._descriptors(1, size, 1))
    await driver.tb.cycles(IDLE_BEFORE_DOORBELL)
    log.clear()
    landed_before = len(setup.word_writes)
    await driver.ring(bench_job.QUEUE, target)
    while True:
        words.arm()
        if words.count() >= target:
            break
        await setup.check_halt()
        await words.wait(driver.budget, f"one {size}-byte descriptor")
    ok = await setup.end(payload, size, 1)
    landed = next(t for t, v in setup.word_writes[landed_before:] if v >= target)
    reads = [t for t, kind, _, _ in log.requests if kind == MEM_READ]
    word_sent = [t for t, kind, n, addr in log.requests
                 if kind == MEM_WRITE and addr <= setup.word < addr + 4 * n and t <= landed]
    if not log.doorbells or not reads or not log.completions or not word_sent:
        raise EngineTimeout("the TLP log missed the doorbell, the read request, its completion or the word's write")
    db = log.doorbells[0]
    return {"bytes": size, "doorbell_to_word": landed - db, "doorbell_to_word_sent": word_sent[-1] - db,
            "doorbell_to_read": reads[0] - db,
            "read_round_trip": log.completions[0][0] - reads[0], **log.tlps(), "verified": ok}


async def stream(driver: SimDriver, setup: bench_job.Setup, log: TlpLog, words: Words, size: int, count: int,
                 notify_every: int) -> dict:
    """`count` descriptors of `size` bytes kept in flight across the window, as a GPU producer posts them:
    whenever a completion word frees slots (as bench_job.stream, woken by the word's writes instead of
    polling). Returns the first doorbell at the card, every new count of the completion word (cycle, count),
    and the TLPs of the stream."""
    slots = driver.geometry.slots
    payload = await setup.begin()
    raw = bench_job._descriptors(count, size, notify_every)
    base, posted, done = setup.start, 0, 0
    log.clear()
    landed_before = len(setup.word_writes)
    while done < count:
        free = min(slots - (posted - done), count - posted)
        if free > 0:
            await driver.write_slots(bench_job.QUEUE, base + posted, raw[posted * 32 : (posted + free) * 32])
            posted += free
            await driver.ring(bench_job.QUEUE, base + posted)
        words.arm()
        done = words.count() - base
        if done < count and (posted - done == slots or posted == count):
            await setup.check_halt()
            await words.wait(driver.budget, f"the {size}-byte stream at descriptor {done} of {count}")
            done = words.count() - base
    ok = await setup.end(payload, size * count, count)
    samples: list[tuple[int, int]] = []  # the first write of each new count (later ones repeat it)
    for t, v in setup.word_writes[landed_before:]:
        if 0 < v - base <= count and (not samples or v - base > samples[-1][1]):
            samples.append((t, v - base))
    return {"bytes": size, "descriptors": count, "first_doorbell": log.doorbells[0], "samples": samples,
            **log.tlps(), "verified": ok}


@cocotb.test()
async def card_bench(dut):
    """One size of the card bench (the job's link, host-memory latency, size and descriptor count)."""
    with open(os.environ[JOB_ENV]) as f:
        job = json.load(f)
    link = job["link"]
    period_ns = 1000.0 / link["user_clk_mhz"]
    card = Card(dut, link["generation"], link["lanes"], link["user_clk_mhz"], block=PinlessBlock,
                max_payload_bytes=link["max_payload_bytes"], max_read_request_bytes=link["max_read_request_bytes"])
    log = TlpLog(card.dev, period_ns, rp.ring(bench_job.QUEUE, 0)[0].addr, job["bar0_bytes"])
    delay_host_reads(card.rc, job["round_trip_ns"])
    await card.open(job["bar0_bytes"])
    tb = LinkTB(card, dut, period_ns, job.get("store_bytes", 0))
    driver = SimDriver(tb)
    await driver.open()
    size, count = job["size"], job["count"]
    setup = bench_job.Setup(driver, size * count, seed=size)
    await setup.open()
    words = Words(card, setup, tb)
    one = await single(driver, setup, log, words, size)
    # one descriptor: the stream would repeat the descriptor alone (sim/card_bench.py reads its rate from it)
    many = await stream(driver, setup, log, words, size, count, job["notify_every"]) if count > 1 else None
    with open(os.environ[RESULT_ENV], "w") as f:
        json.dump({"single": one, "stream": many, "cycles": tb.now_cycles(), "period_ns": tb.period_ns}, f)
