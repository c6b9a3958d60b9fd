"""The cocotb module of the card's request sizes through the PCIe model: the block model drives the card's
cfg_max_read_req and cfg_max_payload from the Device Control register the host wrote, and the root
complex's memory request handlers are wrapped to record every request the card sends. With the host's
Max_Read_Request_Size and Max_Payload_Size at 128 bytes, copies of a few KiB (offsets off the 8-byte word,
lengths across 4 KiB) must arrive byte for byte with no read request and no write payload above 128 bytes
and none across 4 KiB; the host then raises Max_Read_Request_Size to 512 bytes and the next copy's reads
grow to it. The result goes to ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os

import cocotb
from cocotbext.pcie.core.tlp import TlpType

from driver.abi import Perm
from sim.card import bar0_bytes, session_params
from sim.card_session import GUARD, Card, copy_checked, open_with_host
from sim.driver_model import SimDriver

SOURCE = bytes((i * 29 + 7) & 0xFF for i in range(0x10000))  # region 0's bytes


class RequestLog:
    """Every memory request the root complex receives: (address, bytes) of reads and of writes."""

    def __init__(self, rc):
        self.reads: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int]] = []
        for kinds, log in (((TlpType.MEM_READ, TlpType.MEM_READ_64), self.reads),
                           ((TlpType.MEM_WRITE, TlpType.MEM_WRITE_64), self.writes)):
            serve = rc.rx_tlp_handler[kinds[1]]
            for kind in kinds:
                rc.register_rx_tlp_handler(kind, self._recorder(serve, log))

    @staticmethod
    def _recorder(serve, log):
        async def handle(tlp):
            log.append((tlp.address, 4 * tlp.length))
            await serve(tlp)
        return handle

    def take(self) -> dict:
        """The requests since the last take: counts, largest, and those over 4 KiB boundaries."""
        out = {}
        for name, log in (("reads", self.reads), ("writes", self.writes)):
            out[name] = {"count": len(log), "largest": max((n for _, n in log), default=0),
                         "across_4k": sum(a // 4096 != (a + n - 1) // 4096 for a, n in log)}
            log.clear()
        return out


async def copy(driver: SimDriver, slow: SimDriver, host, sizes: list[int], posted: int) -> int:
    """Copy `sizes` bytes each (region 0 to region 1), every destination checked byte for byte with guard bytes
    around; the descriptors posted after."""
    await host.write(0x40000, bytes([GUARD]) * 0x10000)
    return await copy_checked(driver, slow, host, SOURCE, 0x40000, sizes, posted)


@cocotb.test()
async def card_request_sizes(dut):
    params = session_params()
    card = Card(dut)  # (its block model drives the card's cfg_max_read_req and cfg_max_payload)
    card.rc.max_payload_size = 0  # the host's MPS: 128 bytes, set in the card at enumeration
    await card.open(bar0_bytes(params))
    function = card.rc.find_device(card.dev.functions[0].pcie_id)
    await card.set_sizes(function, 128, 128)
    result = {"cfg": {"max_read_req": int(dut.cfg_max_read_req.value), "max_payload": int(dut.cfg_max_payload.value)}}

    log = RequestLog(card.rc)
    driver, slow, host, base = await open_with_host(card, SOURCE)
    await driver.set_region(0, base, 0x10000, int(Perm.READ))
    await driver.set_region(1, base + 0x40000, 0x10000, int(Perm.WRITE))
    await driver.set_region(2, base + 0x80000, 64, int(Perm.WRITE))
    await driver.configure_queue(0, 2, 0, 0)
    await driver.enable_queue(0)
    log.take()  # (the completion-word writes of setup, if any)

    posted = await copy(driver, slow, host, [4096 + 77, 3000, 1021], 0)
    result["mrrs_128"] = log.take()
    await card.set_sizes(function, 512)
    result["cfg_after"] = {"max_read_req": int(dut.cfg_max_read_req.value)}
    posted = await copy(driver, slow, host, [3000], posted)
    result["mrrs_512"] = log.take()
    # 4 KiB: the card's read bursts are a page long, so an 8 KiB copy's reads are the host's size, not the burst's
    await card.set_sizes(function, 4096)
    result["cfg_4096"] = {"max_read_req": int(dut.cfg_max_read_req.value)}
    await copy(driver, slow, host, [8192], posted)
    result["mrrs_4096"] = log.take()

    with open(os.environ["ARKDMA_SIM_RESULT"], "w") as f:
        json.dump(result, f)
