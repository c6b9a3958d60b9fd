"""The cocotb module of the card's read errors through the PCIe model: the card (sim/card.py) built with a short
completion timeout, the root complex's memory-read handler wrapped so chosen host buffers answer wrongly:

- `lost`: the request is never answered, until the card sends a request on the same ID again; then its
  completion goes out late, just before the new request's own;
- `poisoned`: the data comes back in several completions, the first poisoned (EP);
- `abort`: a Completer Abort.

A read of host memory that is not there is answered Unsupported Request by the root complex itself. Each
failing copy must end in BUS_ERROR (the timeout within its bound) with its completion word written and not a
byte of its destination or around it touched; the queue, re-enabled, then copies the next descriptor byte for
byte (the one after the lost read reuses its ID, so the late completion must not be taken as its data). The
result goes to ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os

import cocotb
from cocotbext.pcie.core.tlp import Tlp, TlpType
from cocotbext.pcie.core.utils import PcieId

from driver import register_program as rp
from driver.abi import QUEUE, Flag, Perm
from driver.descriptor import Descriptor
from sim.card import bar0_bytes, session_params
from sim.card_session import PERIOD_NS, Card, CardTB
from sim.driver_model import SimDriver

TIMEOUT_ENV = "ARKDMA_CARD_TIMEOUT_CYCLES"  # the completion timeout the card was built with
GUARD = 0xA5
ERROR_BIT = 1 << 63


class FaultyReads:
    """The root complex's handling of the card's memory reads, with faults in chosen address ranges."""

    def __init__(self, rc, id_bits: int):
        self.rc = rc
        self.serve = rc.rx_tlp_handler[TlpType.MEM_READ_64]  # the root complex's own handler
        self.id_mask = (1 << id_bits) - 1
        self.ranges: list[tuple[int, int, str]] = []
        self.held: list = []  # lost requests, answered late
        self.seen = {"lost": 0, "late": 0, "poisoned": 0, "abort": 0}
        for kind in (TlpType.MEM_READ, TlpType.MEM_READ_64):
            rc.register_rx_tlp_handler(kind, self.handle)

    def fault(self, addr: int, size: int, kind: str) -> None:
        if kind not in ("lost", "poisoned", "abort"):
            raise ValueError(f"fault kinds are lost, poisoned, abort; not {kind!r}")
        self.ranges.append((addr, addr + size, kind))

    async def handle(self, tlp) -> None:
        for old in [t for t in self.held if t.tag & self.id_mask == tlp.tag & self.id_mask]:
            self.held.remove(old)
            self.seen["late"] += 1
            await self.serve(old)
        kind = next((k for lo, hi, k in self.ranges if lo <= tlp.address < hi), None)
        if kind is None:
            await self.serve(tlp)
            return
        self.seen[kind] += 1
        if kind == "lost":
            self.held.append(tlp)
        elif kind == "abort":
            await self.rc.send(Tlp.create_ca_completion_for_tlp(tlp, PcieId(0, 0, 0)))
        else:
            await self._poisoned(tlp)

    async def _poisoned(self, tlp, piece: int = 128) -> None:
        """The data in completions of `piece` bytes (the card's reads are 8-byte aligned), the first poisoned."""
        data = await self.rc.mem_address_space.read(tlp.address, tlp.length * 4)
        for at in range(0, len(data), piece):
            cpl = Tlp.create_completion_data_for_tlp(tlp, PcieId(0, 0, 0))
            cpl.byte_count = len(data) - at
            cpl.lower_address = (tlp.address + at) & 0x7F
            cpl.set_data(data[at:at + piece])
            cpl.ep = at == 0
            await self.rc.send(cpl)


@cocotb.test()
async def card_read_errors(dut):
    timeout = int(os.environ[TIMEOUT_ENV])
    params = session_params()
    card = Card(dut)
    await card.open(bar0_bytes(params))
    assert card.dev.functions[0].pcie_cap.extended_tag_field_enable, "enumeration left extended tags off"
    faults = FaultyReads(card.rc, params.read_id_width)
    tb = CardTB(card)
    driver = SimDriver(tb, budget_cycles=int(1_000_000 / PERIOD_NS))
    await driver.open()
    await driver.reset()

    host = card.rc.mem_pool.alloc_region(1 << 20)
    base = host.get_absolute_address(0)
    src_off, bad_off, dst_off, words_off = 0x0, 0x20000, 0x40000, 0x80000
    src = bytes((i * 37 + 11) & 0xFF for i in range(0x10000))
    await host.write(src_off, src)
    await host.write(bad_off, bytes((i * 53 + 3) & 0xFF for i in range(0x3000)))  # what a faulty read carries
    await host.write(dst_off, bytes([GUARD]) * 0x20000)
    await host.write(words_off, bytes(64))
    regions = {"good": 0, "dst": 1, "words": 2, "lost": 3, "poisoned": 4, "abort": 5, "unsupported": 6}
    await driver.set_region(0, base + src_off, len(src), int(Perm.READ))
    await driver.set_region(1, base + dst_off, 0x20000, int(Perm.WRITE))
    await driver.set_region(2, base + words_off, 64, int(Perm.WRITE))
    for k, kind in enumerate(("lost", "poisoned", "abort")):
        addr = base + bad_off + 0x1000 * k
        faults.fault(addr, 0x1000, kind)
        await driver.set_region(regions[kind], addr, 0x1000, int(Perm.READ))
    await driver.set_region(regions["unsupported"], 0xF000_0000, 0x1000, int(Perm.READ))  # no memory there
    await driver.configure_queue(0, regions["words"], 0, 0)
    await driver.enable_queue(0)

    result = {"timeout_cycles": timeout, "failed": {}, "copies": []}
    copied: list[tuple[int, int]] = []  # (destination offset, length) of every copy that completed
    index, d_at = 0, 256

    async def word(expect: int) -> int:
        """The completion word in host memory, once it reads `expect` (its write is posted: it may land after
        the registers say so) or a bound has passed."""
        deadline = tb.now_cycles() + 20_000
        while True:
            value = int.from_bytes(await host.read(words_off, 8), "little")
            if value == expect or tb.now_cycles() > deadline:
                return value
            await tb.cycles(16)

    async def failing(kind: str, length: int) -> None:
        nonlocal index, d_at
        await driver.write_slots(0, index, Descriptor(regions[kind], 0, regions["dst"], d_at, length,
                                                      flags=Flag.NOTIFY, cookie=0x100 + index).pack())
        t0 = tb.now_cycles()
        await driver.ring(0, index + 1)
        await driver.run([rp.Poll(QUEUE.address("STATUS", 0), 0x4, 0x4, f"the queue to halt on the {kind} read")])
        waited = tb.now_cycles() - t0
        state = await driver.queue_state(0)
        assert state.halted and state.error.name == "BUS_ERROR", f"{kind}: {state}"
        assert state.error_cookie == 0x100 + index, f"{kind}: cookie {state.error_cookie:#x}"
        value = await word(index | ERROR_BIT)
        assert value == index | ERROR_BIT, f"{kind}: completion word {value:#x}, not {index | ERROR_BIT:#x}"
        got = await host.read(dst_off + d_at - 64, length + 128)
        assert got == bytes([GUARD]) * len(got), f"{kind}: the failed copy wrote at or around its destination"
        result["failed"][kind] = {"error": state.error.name, "cycles_to_halt": waited}
        # recover as a driver does: disable, skip the failed descriptor, enable
        await driver.disable_queue(0)
        index += 1
        await driver.configure_queue(0, regions["words"], 0, index)
        await driver.enable_queue(0)
        d_at += length + 256

    async def copy(length: int, s_at: int) -> None:
        nonlocal index, d_at
        await driver.write_slots(0, index, Descriptor(regions["good"], s_at, regions["dst"], d_at, length,
                                                      flags=Flag.NOTIFY, cookie=index).pack())
        await driver.ring(0, index + 1)
        index += 1
        await driver.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, index, "the copy to complete")])
        value = await word(index)
        assert value == index, f"completion word {value:#x}, not {index}"
        got = await host.read(dst_off + d_at, length)
        assert got == src[s_at:s_at + length], f"the copy of {length} bytes after a failure differs"
        copied.append((d_at, length))
        result["copies"].append(length)
        d_at += length + 256

    # a read never answered: BUS_ERROR once the timeout has passed, not before, not long after
    await failing("lost", 512)
    waited = result["failed"]["lost"]["cycles_to_halt"]
    bound = timeout + timeout // 4 + 2000  # the timer's grain, then the request's and the halt's way
    assert timeout <= waited <= bound, f"the lost read halted the queue after {waited} cycles, not {timeout}..{bound}"
    # the next copy takes every read ID again: the lost read's late completion comes just before the
    # request that reuses its ID, and must not be taken for that request's data
    await copy(0x4000, 24)
    assert faults.seen["late"] == 1, f"the late completion was not sent: {faults.seen}"
    await failing("poisoned", 512)
    await copy(1000, 5)
    await failing("abort", 512)
    await copy(64, 1)
    await failing("unsupported", 256)
    await copy(3000, 99)

    # nothing outside the completed copies' destinations was written
    got = await host.read(dst_off, d_at)
    inside = set()
    for at, n in copied:
        inside.update(range(at, at + n))
    stray = [i for i in range(d_at) if i not in inside and got[i] != GUARD]
    assert not stray, f"bytes outside every completed copy were written, first at {stray[0]}"
    result["faults_served"] = dict(faults.seen)

    out = os.environ.get("ARKDMA_SIM_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
