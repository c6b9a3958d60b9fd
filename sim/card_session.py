"""The cocotb module of the card through the PCIe model (sim/card.py): a root complex enumerates the
UltraScale+ endpoint, then the host drives the engine through BAR0 as a driver would: identity and register
programs, descriptors written into a window and the doorbell rung, and the engine copies host memory to
host memory across the link (its reads as tagged requests answered by completions, its writes posted),
checked with guard bytes and the completion word; a read of unbacked host memory ends in BUS_ERROR; an
unsupported BAR read is refused. The result goes to ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import Timer
from cocotbext.axi import AxiStreamBus
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice

from cocotb.utils import get_sim_time
from cocotbext.axi.address_space import MemoryRegion

from driver import register_program as rp
from driver.abi import QUEUE, Flag, Perm
from driver.descriptor import Descriptor
from driver.memory import BusMemory
from sim.card import bar0_bytes, session_params
from sim.card_bench_link import MAX_PAYLOAD_BYTES, MAX_READ_REQUEST_BYTES
from sim.driver_model import SimDriver

PERIOD_NS = 4.0  # the block's 250 MHz user clock

TIMEOUT = dict(timeout=200, timeout_unit="us")  # a completion that never comes fails the test, not the run


def size_code(nbytes: int) -> int:
    """Device Control's code for a request or payload size of `nbytes` (128 << code bytes)."""
    return (nbytes // 128).bit_length() - 1


class Card:
    """The card's top (`dut`) inside cocotbext-pcie's model of the UltraScale+ block (`block`, a class like
    UltraScalePlusPcieDevice) at a link its interface width offers (by default Gen3 x8 for a 256-bit card, Gen3
    x16 for a 512-bit one), behind one root port of a root complex."""

    def __init__(self, dut, generation: int = 3, lanes: int | None = None, user_clk_mhz: float = 250.0,
                 block=UltraScalePlusPcieDevice, max_payload_bytes: int = MAX_PAYLOAD_BYTES,
                 max_read_request_bytes: int = MAX_READ_REQUEST_BYTES):
        self.width = len(dut.rq__tdata)
        self.max_read_request_bytes = max_read_request_bytes
        if lanes is None:
            lanes = 16 if self.width == 512 else 8
        self.rc = RootComplex()
        # the host's Max Payload Size (a code: 128 << code bytes), which enumeration sets in the card's Device
        # Control, the card supporting as much
        self.rc.max_payload_size = size_code(max_payload_bytes)
        self.dev = block(
            pcie_generation=generation, pcie_link_width=lanes, user_clk_frequency=user_clk_mhz * 1e6,
            alignment="dword", max_payload_size=max_payload_bytes,
            # the 512-bit card straddles its requests and takes straddled completions (two a beat each way)
            cq_straddle=False, cc_straddle=False, rq_straddle=self.width == 512, rc_straddle=self.width == 512,
            enable_extended_tag=True, user_clk=dut.clk, user_reset=dut.rst,
            cq_bus=AxiStreamBus.from_prefix(dut, "cq_"), cc_bus=AxiStreamBus.from_prefix(dut, "cc_"),
            rq_bus=AxiStreamBus.from_prefix(dut, "rq_"), rc_bus=AxiStreamBus.from_prefix(dut, "rc_"),
            # the sizes the host sets at enumeration, which the card cuts its requests to
            cfg_max_read_req=dut.cfg_max_read_req, cfg_max_payload=dut.cfg_max_payload)
        for log in (self.dev.log, self.rc.log, *(getattr(self.dev, side).log
                                                   for side in ("cq_source", "cc_sink", "rq_sink", "rc_source"))):
            log.setLevel("WARNING")
        self.rc.make_port().connect(self.dev)

    async def open(self, bar_bytes: int) -> None:
        self.dev.functions[0].configure_bar(0, bar_bytes, ext=True)
        await self.rc.enumerate()
        function = self.rc.find_device(self.dev.functions[0].pcie_id)
        await function.set_master()
        if self.max_read_request_bytes != MAX_READ_REQUEST_BYTES:
            await self.set_sizes(function, self.max_read_request_bytes)
        self.bar = function.bar_window[0]

    async def set_sizes(self, function, max_read_request_bytes: int, max_payload_bytes: int | None = None) -> None:
        """Write the card's Max_Read_Request_Size (and Max_Payload_Size, where given) into its Device Control as a
        host does, and wait the few cycles the block takes to report them on cfg_max_read_req and cfg_max_payload."""
        await function.set_readrq(size_code(max_read_request_bytes))
        if max_payload_bytes is not None:
            await function.set_mps(size_code(max_payload_bytes))
        await Timer(20 * PERIOD_NS, "ns")


class TimedBar:
    """BAR0 as SimDriver reaches it: every read bounded, so a completion that never comes fails the test
    instead of stalling the simulation."""

    def __init__(self, bar):
        self.bar = bar

    async def read_dword(self, addr: int) -> int:
        return await self.bar.read_dword(addr, **TIMEOUT)

    async def write_dword(self, addr: int, value: int) -> None:
        await self.bar.write_dword(addr, value)

    async def write(self, addr: int, data: bytes) -> None:
        await self.bar.write(addr, data)


class RootComplexMemory(BusMemory):
    """Host memory for the conformance scenarios: the bus-address model the RTL testbench uses, each buffer
    also a region of the root complex, so the card's requests reach it and requests anywhere else are
    answered Unsupported Request."""

    def __init__(self, rc: RootComplex):
        super().__init__()
        self.space = rc.mem_address_space
        self.ours: list = []

    def alloc(self, size: int, align: int = 4096) -> int:
        addr = super().alloc(size, align)
        span = self._spans[self._starts.index(addr)]
        region = MemoryRegion(size, mem=span.data)
        self.space.register_region(region, addr)
        self.ours.append(region)
        return addr

    def clear(self) -> None:
        """Forget every buffer (between scenarios), in the model and in the root complex."""
        self.space.regions = [r for r in self.space.regions if r[3] not in self.ours]
        self.ours.clear()
        self._spans.clear()
        self._starts.clear()
        self._next = self.BASE


class CardTB:
    """What sim/driver_model.SimDriver drives, on the card: registers and windows through BAR0, host memory
    in the root complex, the simulated clock."""

    period_ns = PERIOD_NS

    def __init__(self, card: Card):
        self.csr = self.win = TimedBar(card.bar)
        self.memory = RootComplexMemory(card.rc)

    async def cycles(self, n: int) -> None:
        if n > 0:  # (an idle step of no cycles is a no-op, as ClockCycles(0) is on the engine's testbench)
            await Timer(n * PERIOD_NS, "ns")

    def now_cycles(self) -> int:
        return int(get_sim_time("ns") / PERIOD_NS)


@cocotb.test()
async def scenarios(dut):
    """The conformance scenarios of ARKDMA_SIM_JOB (a ScenariosJob) on the card; outcomes to ARKDMA_SIM_RESULT."""
    from sim import stress_jobs
    from sim.job_types import job_from_json

    job = job_from_json(json.loads(open(os.environ["ARKDMA_SIM_JOB"]).read()))
    card = Card(dut)
    await card.open(int(os.environ["ARKDMA_CARD_BAR0"]))
    driver = SimDriver(CardTB(card))
    await driver.open()
    result = await stress_jobs.play_scenarios(driver, job)
    with open(os.environ["ARKDMA_SIM_RESULT"], "w") as f:
        json.dump(result, f)


GUARD = 0xA5  # what surrounds every destination before a copy


def drivers(card: Card) -> tuple[CardTB, SimDriver, SimDriver]:
    """The card's test bench and two drivers over its BAR0: 1 ms per register poll, and 5 ms for copies to
    complete."""
    tb = CardTB(card)
    return (tb, SimDriver(tb, budget_cycles=int(1_000_000 / PERIOD_NS)),
            SimDriver(tb, budget_cycles=int(5_000_000 / PERIOD_NS)))


async def open_with_host(card: Card, source: bytes):
    """The drivers opened and the engine reset; 1 MiB of host memory holding `source` from offset 0 and 64 zero
    bytes at 0x80000. Returns (driver, slow driver, the host region, its bus address)."""
    _, driver, slow = drivers(card)
    await driver.open()
    await driver.reset()
    host = card.rc.mem_pool.alloc_region(1 << 20)
    await host.write(0, source)
    await host.write(0x80000, bytes(64))
    return driver, slow, host, host.get_absolute_address(0)


async def copy_checked(driver: SimDriver, slow: SimDriver, host, src: bytes, dst_off: int, sizes: list[int],
                       posted: int) -> int:
    """Copies of `sizes` bytes each from region 0 (holding `src`) to region 1 (host memory from `dst_off`, filled
    with GUARD), sources and destinations off the 8-byte word, the last with NOTIFY; waits for COMPLETED, then
    checks every destination byte for byte and that nothing else of region 1 changed. `posted`: descriptors
    posted to queue 0 before; returns the count after."""
    descs, want, s_at, d_at = [], {}, 3, 5
    for k, n in enumerate(sizes):
        descs.append(Descriptor(0, s_at, 1, d_at, n, flags=Flag.NOTIFY if k == len(sizes) - 1 else 0, cookie=k))
        want[d_at] = src[s_at:s_at + n]
        s_at += n + 1
        d_at += n + 13
    await driver.write_slots(0, posted % driver.geometry.slots, b"".join(d.pack() for d in descs))
    posted += len(descs)
    await driver.ring(0, posted)
    await slow.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, posted, "the copies to complete")])
    got = await host.read(dst_off, d_at + 16)
    covered = set()
    for at, data in want.items():
        assert got[at:at + len(data)] == data, f"destination at {at}: the copy differs"
        covered.update(range(at, at + len(data)))
    stray = [i for i in range(d_at + 16) if i not in covered and got[i] != GUARD]
    assert not stray, f"bytes outside every destination were written, first at {stray[0]}"
    return posted


@cocotb.test()
async def card_first_light(dut):
    params = session_params()
    card = Card(dut)
    await card.open(bar0_bytes(params))
    result = {"bar0_bytes": bar0_bytes(params)}

    tb, driver, slow = drivers(card)
    geometry = await driver.open()  # the identity registers, checked, then the engine enabled
    assert (geometry.num_queues, geometry.slots, geometry.num_regions) == (
        params.num_queues, params.slots, params.num_regions), geometry
    result["identity"] = {"num_queues": geometry.num_queues, "slots": geometry.slots,
                          "num_regions": geometry.num_regions}
    await driver.reset()

    # host memory in the root complex: source, guarded destination, completion words
    host = card.rc.mem_pool.alloc_region(1 << 20)
    base = host.get_absolute_address(0)
    sizes = [1021, 4096 + 77, 64, 8, 3000]
    src_off, dst_off, words_off = 0x1000, 0x40000, 0x80000
    rng_bytes = bytes((i * 29 + 7) & 0xFF for i in range(sum(sizes) + 64))
    await host.write(src_off, rng_bytes)
    await host.write(dst_off, bytes([GUARD]) * 0x20000)
    await host.write(words_off, bytes(64))
    await driver.set_region(0, base + src_off, len(rng_bytes), int(Perm.READ))
    await driver.set_region(1, base + dst_off, 0x20000, int(Perm.WRITE))
    await driver.set_region(2, base + words_off, 64, int(Perm.WRITE))
    await driver.set_region(3, 0xF000_0000, 4096, int(Perm.READ))  # no memory there: a bus error
    await driver.configure_queue(0, 2, 0, 0)
    await driver.enable_queue(0)

    # descriptors with sources and destinations off the 8-byte word, lengths across 4 KiB and MPS
    await copy_checked(driver, slow, host, rng_bytes, dst_off, sizes, 0)
    # the word is written after COMPLETED counts the copies: it may still be on the link
    for _ in range(100):
        word = int.from_bytes(await host.read(words_off, 8), "little")
        if word == len(sizes):
            break
        await tb.cycles(10)
    assert word == len(sizes), f"completion word {word:#x}, not {len(sizes)}"
    result["copies"] = {"descriptors": len(sizes), "bytes": sum(sizes), "completion_word": word}

    # a read from where the host has no memory: the completion is unsuccessful, the queue halts in BUS_ERROR
    await driver.write_slots(0, len(sizes), Descriptor(3, 0, 1, 0x10000, 256, flags=Flag.NOTIFY, cookie=99).pack())
    await driver.ring(0, len(sizes) + 1)
    await slow.run([rp.Poll(QUEUE.address("STATUS", 0), 0x4, 0x4, "the queue to halt")])
    state = await driver.queue_state(0)
    assert state.halted and state.error.name == "BUS_ERROR" and state.error_cookie == 99, state
    assert (await host.read(dst_off + 0x10000, 256)) == bytes([GUARD]) * 256, "the failed copy wrote its destination"
    result["unbacked_read"] = state.error.name

    # a BAR read longer than the completer serves is answered Unsupported Request, not a hang
    try:
        await card.bar.read(0, 64, **TIMEOUT)
        result["long_read"] = "served"
    except Exception as exc:  # the root complex raises on an unsuccessful completion
        result["long_read"] = f"refused: {exc}"
    assert result["long_read"].startswith("refused"), "a 16-DWORD read should be refused by this completer"
    assert await driver.read(rp.status_address()) is not None  # and the card still answers after it

    out = os.environ.get("ARKDMA_SIM_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)


# The good descriptors' bytes [start, end) of the window, in the order written over stale ones: a descriptor in
# four pieces (odd byte enables at both ends), slot 1's tail and slot 2's head in one write that straddles the
# slots (starting mid-row), the rest of each, two 16-byte stores (a GPU's write_slot), 72 bytes across a row,
# then 56 bytes from 8 bytes into a slot. Every byte once.
HOSTILE_PIECES = ((0, 3), (3, 16), (16, 17), (17, 32), (52, 84), (32, 52), (84, 96), (96, 112), (112, 128),
                  (128, 200), (200, 256))


@cocotb.test()
async def card_window_writes(dut):
    """Descriptors reach the window however the host cuts its writes: every slot first holds a stale descriptor
    (every field different), then the good ones are written over it in HOSTILE_PIECES and the doorbell follows at
    once; the copies are checked byte for byte against guards, so a byte missed, misplaced or written into a
    neighbouring slot shows as a wrong copy or a halted queue."""
    from driver.abi import WINDOW_BASE, window_stride

    params = session_params()
    card = Card(dut)
    await card.open(bar0_bytes(params))
    _, driver, slow = drivers(card)
    await driver.open()
    await driver.reset()
    host = card.rc.mem_pool.alloc_region(1 << 20)
    base = host.get_absolute_address(0)
    src_off, dst_off, words_off, dst_bytes = 0x1000, 0x40000, 0x80000, 0x8000
    src = bytes((i * 37 + 11) & 0xFF for i in range(0x4000))
    await host.write(src_off, src)
    await host.write(dst_off, bytes([GUARD]) * dst_bytes)
    await host.write(words_off, bytes(64))
    await driver.set_region(0, base + src_off, len(src), int(Perm.READ))
    await driver.set_region(1, base + dst_off, dst_bytes, int(Perm.WRITE))
    await driver.set_region(2, base + words_off, 64, int(Perm.WRITE))
    await driver.configure_queue(0, 2, 0, 0)
    await driver.enable_queue(0)

    sizes = [5, 64, 300, 1, 129, 4096, 17, 700]
    good, stale, want, s_at, d_at = [], [], {}, 1, 3
    for k, n in enumerate(sizes):
        good.append(Descriptor(0, s_at, 1, d_at, n, flags=Flag.NOTIFY if k == len(sizes) - 1 else 0, cookie=k))
        # a stale descriptor that would copy elsewhere, from elsewhere, another length, under another cookie
        stale.append(Descriptor(1, d_at + 7, 0, s_at + 3, n + 9, flags=0, cookie=0x5A5A0000 + k))
        want[d_at] = src[s_at:s_at + n]
        s_at += n + 1
        d_at += n + 13
    raw, old = b"".join(d.pack() for d in good), b"".join(d.pack() for d in stale)
    assert len(raw) == len(old) == 256
    window = WINDOW_BASE  # queue 0's window
    assert window_stride(16) >= len(raw)
    await card.bar.write(window, old)
    for start, end in HOSTILE_PIECES:
        await card.bar.write(window + start, raw[start:end])
    assert sorted(b for p in HOSTILE_PIECES for b in range(*p)) == list(range(len(raw)))
    await driver.ring(0, len(sizes))
    await slow.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, len(sizes), "the copies to complete")])
    state = await driver.queue_state(0)
    assert not state.halted, state
    got = await host.read(dst_off, dst_bytes)
    covered = set()
    for at, data in want.items():
        assert got[at:at + len(data)] == data, f"destination at {at}: the copy differs"
        covered.update(range(at, at + len(data)))
    stray = [i for i in range(dst_bytes) if i not in covered and got[i] != GUARD]
    assert not stray, f"bytes outside every destination were written, first at {stray[0]}"

    out = os.environ.get("ARKDMA_SIM_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump({"descriptors": len(sizes), "bytes": sum(sizes), "pieces": len(HOSTILE_PIECES)}, f)
