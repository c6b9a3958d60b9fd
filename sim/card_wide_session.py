"""The cocotb module of the 512-bit card's conformance sweep through the PCIe model (Gen3 x16, RQ straddled): copies of
every length that matters (1 byte to 12 KiB: each side of a DWORD, a 64-byte beat, the 128-byte payload, the
512-byte burst, 4 KiB) from sources and to destinations at many byte offsets, some crossing 4 KiB, each checked
byte for byte with guard bytes around it; every RQ beat's straddle marks are logged as the block model reads them,
every RC beat's as it drives them, and every request the root complex receives. The result goes to ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os
import random

import cocotb

from driver.abi import Perm
from rtl.pcie_streams import (RC512_EOP_PTR, RC512_IS_EOP, RC512_IS_SOP, RC512_SOP_PTR, RQ512_EOP_PTR, RQ512_IS_EOP,
                              RQ512_IS_SOP)
from sim.card import bar0_bytes, session_params
from sim.card_session import GUARD, Card, copy_checked, open_with_host
from sim.card_sizes_session import RequestLog

SOURCE = bytes((i * 131 + (i >> 8) * 7 + 3) & 0xFF for i in range(0x20000))
REGION = 0x10000  # bytes of each region
_rng = random.Random(512)
# (sizes of one batch, source offset, destination offset): at most 15 descriptors a batch (16 slots)
BATCHES = [
    ([1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33], 0, 0),
    ([63, 64, 65, 127, 128, 129, 191, 192, 255, 256, 257, 383, 384], 3, 60),
    ([511, 512, 513, 767, 1023, 1024, 1025, 2047, 2048, 2049], 64, 1),
    ([4095, 4096, 4097, 8191, 8192, 12289], 4000, 4090),  # starts just below 4 KiB on both sides
    (sorted(_rng.randrange(1, 3000) for _ in range(14)), 1234, 777),
    ([_rng.randrange(1, 600) for _ in range(15)], 4095, 4093),
]


class RqBeats:
    """Every beat the block model takes on RQ, as its tuser marks say: beats, requests started, and beats where a
    request ends in lanes 0-7 and the next starts at lane 8 (two requests in one beat)."""

    def __init__(self, sink):
        self.beats = self.starts = self.straddled = 0
        sample = sink.bus.sample

        def logged(obj):
            sample(obj)
            user = int(obj.tuser)
            sops = [(user >> (RQ512_IS_SOP + 2 + 2 * k) & 3) * 4 for k in range(2) if user >> (RQ512_IS_SOP + k) & 1]
            eops = [user >> (RQ512_EOP_PTR + 4 * k) & 0xF for k in range(2) if user >> (RQ512_IS_EOP + k) & 1]
            self.beats += 1
            self.starts += len(sops)
            self.straddled += bool(eops and eops[0] < 8 and 8 in sops)

        sink.bus.sample = logged

    def clear(self) -> None:
        self.beats = self.starts = self.straddled = 0

    def as_dict(self) -> dict:
        return {"beats": self.beats, "requests": self.starts, "straddled": self.straddled}


class RcBeats:
    """Every beat the block model drives on RC: beats, and those where a completion ends in lanes 0-7 and the next
    starts at lane 8."""

    def __init__(self, source):
        self.beats = self.straddled = 0
        drive = source.bus.drive

        def logged(obj):
            drive(obj)
            user = int(obj.tuser)
            sops = [(user >> (RC512_SOP_PTR + 2 * k) & 3) * 4 for k in range(2) if user >> (RC512_IS_SOP + k) & 1]
            eops = [user >> (RC512_EOP_PTR + 4 * k) & 0xF for k in range(2) if user >> (RC512_IS_EOP + k) & 1]
            self.beats += 1
            self.straddled += bool(eops and eops[0] < 8 and 8 in sops)

        source.bus.drive = logged

    def as_dict(self) -> dict:
        return {"beats": self.beats, "straddled": self.straddled}


@cocotb.test()
async def card_wide_sweep(dut):
    params = session_params(data_width=512)
    card = Card(dut)
    assert card.width == 512, f"this sweep wants the 512-bit card, not a {card.width}-bit one"
    await card.open(bar0_bytes(params))
    beats, rc_beats = RqBeats(card.dev.rq_sink), RcBeats(card.dev.rc_source)
    requests = RequestLog(card.rc)
    driver, slow, host, base = await open_with_host(card, SOURCE)
    await driver.set_region(2, base + 0x80000, 64, int(Perm.WRITE))
    await driver.configure_queue(0, 2, 0, 0)
    await driver.enable_queue(0)
    requests.take()
    beats.clear()

    posted, copied = 0, 0
    for sizes, src_at, dst_at in BATCHES:
        await driver.set_region(0, base + src_at, REGION, int(Perm.READ))
        await driver.set_region(1, base + 0x40000 + dst_at, REGION, int(Perm.WRITE))
        await host.write(0x40000 + dst_at, bytes([GUARD]) * REGION)
        posted = await copy_checked(driver, slow, host, SOURCE[src_at:], 0x40000 + dst_at, sizes, posted)
        copied += sum(sizes)
    result = {"descriptors": posted, "bytes": copied, "rq": beats.as_dict(), "rc": rc_beats.as_dict(),
              "requests": requests.take()}
    with open(os.environ["ARKDMA_SIM_RESULT"], "w") as f:
        json.dump(result, f)
