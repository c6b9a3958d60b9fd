"""The cocotb module of the card through the PCIe model (sim/card.py): a root complex enumerates the
UltraScale+ endpoint, then the host drives the engine through BAR0 as a driver would: identity, register
programs, RAM on the card filled and read back, a descriptor written into a window and its doorbell rung,
the copy checked with its guards and completion word; partial-DWORD writes and an unsupported read too.
The result (what was checked, with the figures) goes to ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import Timer
from cocotbext.axi import AxiStreamBus
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice

from driver import register_program as rp
from driver.abi import QUEUE, WINDOW_BASE, Flag, Perm, window_stride
from driver.descriptor import Descriptor
from sim.card import bar0_half

READ_CHUNK = 32  # bytes per read: the completer answers reads of up to 8 DWORDs
TIMEOUT = dict(timeout=200, timeout_unit="us")  # a completion that never comes fails the test, not the run


class Card:
    def __init__(self, dut):
        self.rc = RootComplex()
        self.dev = UltraScalePlusPcieDevice(
            pcie_generation=3, pcie_link_width=8, user_clk_frequency=250e6, alignment="dword",
            cq_straddle=False, cc_straddle=False, rq_straddle=False, rc_straddle=False,
            enable_extended_tag=True, user_clk=dut.clk, user_reset=dut.rst,
            cq_bus=AxiStreamBus.from_prefix(dut, "cq_"), cc_bus=AxiStreamBus.from_prefix(dut, "cc_"))
        self.dev.log.setLevel("WARNING")
        self.rc.log.setLevel("WARNING")
        self.rc.make_port().connect(self.dev)

    async def open(self, bar_bytes: int) -> None:
        self.dev.functions[0].configure_bar(0, bar_bytes, ext=True)
        await self.rc.enumerate()
        self.bar = self.rc.find_device(self.dev.functions[0].pcie_id).bar_window[0]

    async def read32(self, addr: int) -> int:
        return await self.bar.read_dword(addr, **TIMEOUT)

    async def write32(self, addr: int, value: int) -> None:
        await self.bar.write_dword(addr, value)

    async def read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        at, end = addr, addr + n
        while at < end:  # pieces within one aligned 32-byte block: at most 8 DWORDs each
            upto = min((at // READ_CHUNK + 1) * READ_CHUNK, end)
            out += await self.bar.read(at, upto - at, **TIMEOUT)
            at = upto
        return bytes(out)

    async def run(self, steps, budget_ns: int = 1_000_000) -> None:
        for step in steps:
            if isinstance(step, rp.Write):
                await self.write32(step.addr, step.value)
            else:
                waited = 0
                while (await self.read32(step.addr)) & step.mask != step.expect:
                    await Timer(100, "ns")
                    waited += 100
                    assert waited < budget_ns, f"waited {budget_ns} ns for {step.what}"


@cocotb.test()
async def card_first_light(dut):
    from sim.board import board_params

    params = board_params(num_queues=2, slots=16, num_regions=8)
    half = bar0_half(params)
    card = Card(dut)
    await card.open(2 * half)
    result = {"bar0_bytes": 2 * half}

    geometry = rp.decode_identity([await card.read32(a) for a in rp.identity_addresses()])
    assert (geometry.num_queues, geometry.slots, geometry.num_regions) == (2, 16, 8), geometry
    result["identity"] = {"num_queues": geometry.num_queues, "slots": geometry.slots,
                          "num_regions": geometry.num_regions}
    await card.run(rp.start_engine())
    await card.run(rp.reset_engine())

    # card RAM through BAR0's upper half: multi-DWORD writes, byte writes, reads back
    n = 1021
    pattern = bytes((i * 29 + 7) & 0xFF for i in range(n))
    src, dst, words = 0x0000, 0x2000, 0x4000  # bus addresses in card RAM
    await card.bar.write(half + src, b"\x00" * 3 + pattern + b"\x00" * 4)
    await card.bar.write(half + dst, b"\xA5" * (n + 16))
    await card.bar.write(half + words, bytes(64))
    await card.bar.write_byte(half + dst + n + 15, 0x5A)  # one byte: its DWORD's others kept
    back = await card.read(half + src + 3, n)
    if back != pattern:
        i = next(k for k in range(n) if back[k] != pattern[k])
        raise AssertionError(f"card RAM does not read back what BAR0 wrote: byte {i}: {back[max(0, i - 8):i + 8].hex()} "
                             f"where {pattern[max(0, i - 8):i + 8].hex()}")
    tail = await card.read(half + dst + n + 12, 4)
    assert tail == b"\xA5\xA5\xA5\x5A", f"a one-byte write touched its neighbours: {tail.hex()}"

    # regions, a queue, a descriptor into the window, the doorbell: one copy across the engine
    await card.run(rp.set_region(0, src, n + 3, int(Perm.READ)))
    await card.run(rp.set_region(1, dst, n + 16, int(Perm.WRITE)))
    await card.run(rp.set_region(2, words, 64, int(Perm.WRITE)))
    await card.run(rp.configure_queue(0, 2, 0, 0))
    await card.run(rp.enable_queue(0))
    desc = Descriptor(0, 3, 1, 5, n, flags=Flag.NOTIFY, cookie=7).pack()
    await card.bar.write(WINDOW_BASE, desc)  # slot 0 of queue 0: one 8-DWORD TLP
    await card.run(rp.ring(0, 1))
    await card.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, 1, "descriptor 0 to complete")])
    got = await card.read(half + dst, n + 16)
    want = b"\xA5" * 5 + pattern + b"\xA5" * 10 + b"\x5A"
    assert got == want, f"the copy differs: first at byte {next(i for i in range(len(want)) if got[i] != want[i])}"
    word = int.from_bytes(await card.read(half + words, 8), "little")
    assert word == 1, f"completion word {word:#x}, not 1"
    state = rp.decode_queue_state([await card.read32(a) for a in rp.queue_state_addresses(0)])
    assert not state.halted, state
    result["copy"] = {"bytes": n, "completion_word": word, "window_stride": window_stride(params.slots)}

    # a read longer than the completer serves is answered Unsupported Request, not a hang
    try:
        await card.bar.read(half + src, 64, **TIMEOUT)
        result["long_read"] = "served"
    except Exception as exc:  # the root complex raises on an unsuccessful completion
        result["long_read"] = f"refused: {exc}"
    assert result["long_read"].startswith("refused"), "a 16-DWORD read should be refused by this completer"
    assert await card.read32(rp.status_address()) is not None  # and the card still answers after it

    out = os.environ.get("ARKDMA_SIM_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
