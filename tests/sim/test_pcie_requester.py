# amaranth: UnusedElaboratable=no
"""The PCIe requester alone (rtl/pcie_requester.py, rtl/pcie_write_sender.py) in amaranth.sim, behind a 64-bit
engine (the board's) and a 256-bit one (the card's) on 256-bit streams, and a 512-bit one on 512-bit streams
whose RQ and RC straddle (two requests a beat, the second from lane 8, found by tuser's is_sop/is_eop as the block
finds them; completions likewise; the unstraddled 512-bit streams, their beats marked likewise, in the tests named
so), its RC stream driven by a Python model of host memory and
the link: reads completed whole, split at read completion boundaries and interleaved between tags; UR, CA, CRS,
poisoned completions and error codes answered SLVERR with none of their data delivered; a read whose completion
never comes answered SLVERR within its timeout; a completion that comes late, after its tag has timed out and
is in use again, dropped; stray completions dropped; a random mix against the model; every MRRS and MPS over
odd starts and 4 KiB crossings; at 256 bits, write bursts overlapped and both streams a beat a cycle; the
pool of 128 tags full, reads waiting for a free one."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from driver.abi import Resp  # noqa: E402
from rtl.pcie_requester import SIZES, SLOT_BITS, TIMEOUT_STEPS, PcieRequester, size_code  # noqa: E402
from rtl.pcie_streams import (RC512_EOP_PTR, RC512_IS_EOP, RQ512_EOP_PTR, RQ512_IS_EOP, RQ512_IS_SOP,  # noqa: E402
                              layout)
from rtl.pcie_write_sender import BUFFERS  # noqa: E402
from tests.sim.rc_straddle_model import straddled  # noqa: E402

pytestmark = pytest.mark.sim

ID_WIDTH = 4
BURST_BEATS = 16  # 128 bytes at 64 bits, 512 at 256
WIDTHS = [64, 256, 512]  # the board's engine beat, the card's and the 512-bit card's (on 512-bit streams)
# (width, RQ straddled): each width as its card has it, and the 512-bit one unstraddled too
WITH_UNSTRADDLED = [(w, None) for w in WIDTHS] + [(512, False)]
TIMEOUT = 256  # cycles
# the latest a timed-out read may be answered: the timer's grain, the ID scan, the R register
TIMEOUT_BOUND = TIMEOUT + TIMEOUT // TIMEOUT_STEPS + (1 << ID_WIDTH) + 8
SUCCESS, UR, CRS, CA = 0, 1, 2, 4  # completion status


def host_bytes(addr: int, n: int) -> bytes:
    """The modelled host memory: every address holds a byte of its own."""
    return bytes(((a * 131) ^ (a >> 8) ^ (a >> 16)) & 0xFF for a in range(addr, addr + n))


@dataclass
class Completion:
    """One completion TLP as the block hands it on RC (descriptor, then data, 8 DWORDs a beat)."""

    tag: int
    data: bytes = b""
    byte_count: int = 0  # bytes the request still awaits, this completion's included
    lower_address: int = 0
    status: int = SUCCESS
    poisoned: bool = False
    error_code: int = 0

    def beats(self, per_beat: int = 8, sop_bit: int = 32) -> list[tuple[int, int, int, int]]:
        """(tdata, tkeep, tuser, tlast) of each beat, `per_beat` DWORDs a beat, is_sop at `sop_bit` of tuser (at 512
        bits is_eop and the last DWORD's lane too, as the block marks them: at lane 0, unstraddled)."""
        return [(data, keep, user | (self._end_mark(keep) if last and per_beat == 16 else 0), last)
                for data, keep, user, last in self._beats(per_beat, sop_bit)]

    @staticmethod
    def _end_mark(keep: int) -> int:
        return 1 << RC512_IS_EOP | (keep.bit_length() - 1) << RC512_EOP_PTR

    def dwords(self) -> list[int]:
        """The TLP's DWORDs, descriptor first."""
        return [v for data, keep, _, _ in self._beats(16, 0) for v in
                [(data >> 32 * i) & 0xFFFFFFFF for i in range(keep.bit_length())]]

    def _beats(self, per_beat: int, sop_bit: int) -> list[tuple[int, int, int, int]]:
        dw0 = self.lower_address & 0xFFF | self.error_code << 12 | self.byte_count << 16
        dw1 = len(self.data) // 4 | self.status << 11 | int(self.poisoned) << 14
        dwords = [dw0, dw1, self.tag] + [int.from_bytes(self.data[i:i + 4], "little")
                                         for i in range(0, len(self.data), 4)]
        out = []
        for k in range(0, len(dwords), per_beat):
            chunk = dwords[k:k + per_beat]
            out.append((sum(v << 32 * i for i, v in enumerate(chunk)), (1 << len(chunk)) - 1,
                        1 << sop_bit if k == 0 else 0, int(k + per_beat >= len(dwords))))
        return out


@dataclass
class Request:
    """One memory read request as the requester put it on RQ."""

    addr: int
    dwords: int
    tag: int
    cycle: int
    id: int = -1  # the burst's AXI ID (the harness knows it; the tag names a slot of the requester's pool)

    @property
    def nbytes(self) -> int:
        return 4 * self.dwords

    def completions(self, rcb: int = 64) -> list[Completion]:
        """The host's answer: the data split at each read completion boundary, as a completer may."""
        out, at, end = [], self.addr, self.addr + 4 * self.dwords
        while at < end:
            stop = min(end, (at // rcb + 1) * rcb)
            out.append(Completion(self.tag, host_bytes(at, stop - at), end - at, at & 0xFFF))
            at = stop
        return out


@dataclass
class WriteTlp:
    """One memory write request as the requester put it on RQ."""

    addr: int
    dwords: int
    first_be: int
    last_be: int
    data: bytes  # its DWORDs, every byte (enabled or not)

    def enabled(self) -> bytes:
        """The bytes its byte enables write."""
        enables = [self.first_be] + [0xF] * (self.dwords - 2) + [self.last_be] * (self.dwords > 1)
        return bytes(self.data[4 * k + b] for k, be in enumerate(enables) for b in range(4) if be >> b & 1)


@dataclass
class Beat:
    id: int
    data: int
    resp: int
    last: bool
    cycle: int


class Harness:
    """The requester with recorders on RQ (read and write requests, assembled) and on R (beats), the RC stream
    driven by `send`. `mrrs` and `mps` are the sizes the host set, in bytes (or a raw code with `*_code`)."""

    def __init__(self, timeout: int = TIMEOUT, seed: int = 0, idle: float = 0.0, stall: float = 0.0,
                 id_width: int = ID_WIDTH, burst_beats: int = BURST_BEATS, mrrs: int = 4096, mps: int = 4096,
                 rq_stall: float = 0.0, data_width: int = 64, rq_straddle: bool | None = None, **ceilings):
        self.lay = layout(512 if data_width == 512 else 256)  # the streams: as wide as the engine, at least 256
        # the 512-bit card straddles RQ and RC
        self.straddled = data_width == 512 if rq_straddle is None else rq_straddle
        self.dut = PcieRequester(id_width=id_width, max_burst_beats=burst_beats, completion_timeout_cycles=timeout,
                                 data_width=data_width, width=self.lay.width, rq_straddle=self.straddled,
                                 rc_straddle=self.straddled, **ceilings)
        self.frame: tuple[list[int], tuple[int, int]] | None = None  # a straddled request partway in
        self.straddled_beats = 0  # beats carrying two requests' DWORDs
        self.id_width = id_width
        self.bb = data_width // 8  # bytes a beat
        self.mrrs_code, self.mps_code = size_code(mrrs), size_code(mps)
        self.rng = random.Random(seed)
        self.idle, self.stall, self.rq_stall = idle, stall, rq_stall
        self.cycle = 0
        self.beats: list[Beat] = []
        self.requests: list[Request] = []
        self.writes: list[WriteTlp] = []
        self.sent_before_last = 0
        self.write_beats: list[int] = []  # the cycle of each write request beat on RQ
        self.responses: list[tuple[int, int]] = []  # (cycle, ID) of each write response taken
        self.addresses_taken: list[int] = []  # the cycle each write burst's address was taken

    def gen(self, tag: int) -> int:
        """A read request tag's generation bits."""
        return tag >> SLOT_BITS

    def run(self, bench, responses: bool = False, reads: list[tuple[int, int, int]] = (),
            reads_after_a_write: bool = False) -> None:
        """Run `bench`; with `responses` write responses are taken as they come (into `responses`); `reads`
        (ID, address, beats) are offered on AR one after another beside it (from the first write request beat on
        RQ, with `reads_after_a_write`)."""
        sim = Simulator(self.dut)
        sim.add_clock(4e-9)
        sim.add_testbench(self._r_sink, background=True)
        sim.add_testbench(self._rq_sink, background=True)
        if responses:
            sim.add_testbench(self._b_sink, background=True)
        if reads:
            async def offer(ctx):
                mem = self.dut.mem
                while reads_after_a_write and not self.write_beats:
                    await ctx.tick()
                for rid, addr, beats in reads:
                    for signal, value in ((mem.arvalid, 1), (mem.arid, rid), (mem.araddr, addr),
                                          (mem.arlen, beats - 1)):
                        ctx.set(signal, value)
                    await ctx.tick().until(mem.arready)
                    ctx.set(mem.arvalid, 0)
                    await ctx.tick()

            sim.add_testbench(offer, background=True)
        sim.add_testbench(bench)
        sim.run()

    async def _r_sink(self, ctx):
        mem = self.dut.mem
        ctx.set(mem.rready, 1)
        ctx.set(self.dut.max_read_req, self.mrrs_code)
        ctx.set(self.dut.max_payload, self.mps_code)
        async for _, _, valid, ready, rid, data, resp, last in ctx.tick().sample(
                mem.rvalid, mem.rready, mem.rid, mem.rdata, mem.rresp, mem.rlast):
            self.cycle += 1
            if valid and ready:
                self.beats.append(Beat(rid, data, resp, bool(last), self.cycle))
            ctx.set(mem.rready, self.rng.random() >= self.stall)

    async def _rq_sink(self, ctx):
        rq = self.dut.rq
        ctx.set(rq.tready, 1)
        tlp: list[tuple[int, int, int]] = []
        async for _, _, valid, ready, data, keep, user, last in ctx.tick().sample(
                rq.tvalid, rq.tready, rq.tdata, rq.tkeep, rq.tuser, rq.tlast):
            if valid and ready and self.straddled:
                self._straddled(data, keep, user)
            elif valid and ready:
                if tlp or (data >> 75) & 0xF == 1:
                    self.write_beats.append(self.cycle)
                if self.lay.width == 512:  # the packet marks: a start on a request's first beat, its end on its last
                    sop = user >> RQ512_IS_SOP & 1
                    assert sop == (not tlp), f"is_sop {sop} on beat {len(tlp)}"
                    assert (user >> RQ512_IS_EOP & 1) == last, f"is_eop {user >> RQ512_IS_EOP & 1}, tlast {last}"
                    if last:
                        assert keep == (2 << (user >> RQ512_EOP_PTR & 0xF)) - 1, "is_eop_ptr is not the last lane"
                tlp.append((data, keep, user))
                if last:
                    self._record(tlp)
                    tlp = []
            ctx.set(rq.tready, self.rng.random() >= self.rq_stall)

    def _record(self, tlp: list[tuple[int, int, int]]) -> None:
        head, keep, user = tlp[0]
        kind = (head >> 75) & 0xF
        if kind == 0:
            assert len(tlp) == 1 and keep == 0b1111, "a read request is its descriptor alone"
        words = [(head >> 32 * i) & 0xFFFFFFFF for i in range(4)]
        for k, (data, keep, _) in enumerate(tlp):
            lanes = [i for i in range(4 if k == 0 else 0, self.lay.dwords) if keep >> i & 1]
            assert keep == (1 << (lanes[-1] + 1 if lanes else 4)) - 1, f"beat {k}: tkeep {keep:#x} not contiguous"
            words += [(data >> 32 * i) & 0xFFFFFFFF for i in lanes]
        self._request(words, user & 0xF, user >> self.lay.rq_last_be & 0xF)

    def _request(self, words: list[int], first_be: int, last_be: int) -> None:
        """One request off RQ: its descriptor's 4 DWORDs and its data."""
        head = sum(w << 32 * i for i, w in enumerate(words[:4]))
        addr, dwords, kind, tag = head & ((1 << 64) - 4), (head >> 64) & 0x7FF, (head >> 75) & 0xF, (head >> 96) & 0xFF
        if kind == 0:
            assert len(words) == 4, "a read request is its descriptor alone"
            assert (first_be, last_be) == (0xF, 0xF), f"read request byte enables {first_be:#x}/{last_be:#x}"
            self.requests.append(Request(addr, dwords, tag, self.cycle))
            return
        assert kind == 1, f"request type {kind}: neither a memory read nor a memory write"
        assert len(words) - 4 == dwords, f"{len(words) - 4} DWORDs of data for a length of {dwords}"
        self.writes.append(WriteTlp(addr, dwords, first_be, last_be,
                                    b"".join(w.to_bytes(4, "little") for w in words[4:])))

    def _straddled(self, data: int, keep: int, user: int) -> None:
        """A straddled 512-bit RQ beat, read as the block reads it: requests start at is_sop's lanes (0 or 8),
        each start's byte enables in order ([3:0]/[11:8], then [7:4]/[15:12]), and end at is_eop's lanes."""
        sops = [(user >> (RQ512_IS_SOP + 2 + 2 * k) & 3) * 4 for k in range(2) if user >> (RQ512_IS_SOP + k) & 1]
        eops = [user >> (RQ512_EOP_PTR + 4 * k) & 0xF for k in range(2) if user >> (RQ512_IS_EOP + k) & 1]
        bes = [(user >> 4 * k & 0xF, user >> (8 + 4 * k) & 0xF) for k in range(2)]
        assert set(sops) <= {0, 8} and sops == sorted(set(sops)), f"is_sop_ptr lanes {sops}"
        assert self.frame is not None or (sops and sops[0] == 0), "a beat with no request open must start one at 0"
        writes = self.frame is not None
        starts, ends = list(sops), list(eops)
        for lane in range(16):
            if starts and starts[0] == lane:
                assert self.frame is None, f"a request starts at lane {lane} inside another"
                self.frame = ([], bes[len(sops) - len(starts)])
                starts.pop(0)
                writes |= (data >> (32 * lane + 75)) & 0xF == 1
            if self.frame is None:
                assert not keep >> lane & 1, f"lane {lane} kept outside every request"
                continue
            self.frame[0].append((data >> 32 * lane) & 0xFFFFFFFF)
            if ends and ends[0] == lane:
                ends.pop(0)
                words, (fbe, lbe) = self.frame
                self.frame = None
                self._request(words, fbe, lbe)
        assert not starts and not ends, f"marks left over: starts {starts}, ends {ends}"
        if len(sops) + len(eops) >= 2 and eops and sops and eops[0] < 8 <= sops[-1]:
            self.straddled_beats += 1
        if writes:
            self.write_beats.append(self.cycle)

    async def read(self, ctx, rid: int, addr: int, beats: int = BURST_BEATS, within: int = 200) -> list[Request]:
        """Offer a read burst; the read requests the requester puts on RQ for it."""
        mem = self.dut.mem
        ctx.set(mem.arvalid, 1)
        ctx.set(mem.arid, rid)
        ctx.set(mem.araddr, addr)
        ctx.set(mem.arlen, beats - 1)
        await ctx.tick().until(mem.arready)
        ctx.set(mem.arvalid, 0)
        for _ in range(within):
            if sum(r.nbytes for r in self.requests) >= self.bb * beats:
                break
            await ctx.tick()
        got, total = [], 0
        while total < self.bb * beats:
            assert self.requests, f"read of {beats} beats at {addr:#x}: requests for {total} bytes in {within} cycles"
            got.append(self.requests.pop(0))
            got[-1].id = rid
            total += got[-1].nbytes
        assert total == self.bb * beats, f"read of {self.bb * beats} bytes at {addr:#x} requested {total}"
        return got

    async def read_one(self, ctx, rid: int, addr: int, beats: int = BURST_BEATS) -> Request:
        """A read burst that must go out as a single request."""
        (req,) = await self.read(ctx, rid, addr, beats)
        return req

    async def write(self, ctx, wid: int, start: int, nbytes: int, within: int = 4000,
                    w_idle: float = 0.0) -> list[WriteTlp]:
        """A write burst of `nbytes` of `payload(start)` from byte address `start` (its strobes one contiguous
        range, idle cycles before a beat with chance `w_idle` each); the write requests sent for it, once its
        response came and they are out. `sent_before_last`: how many had been sent when its last beat was offered."""
        mem = self.dut.mem
        await self.offer_write(ctx, wid, start, nbytes, w_idle)
        ctx.set(mem.bready, 1)
        for _ in range(within):
            bvalid, bid, bresp = ctx.get(mem.bvalid), ctx.get(mem.bid), ctx.get(mem.bresp)
            await ctx.tick()
            if bvalid:
                assert bid == wid and bresp == Resp.OKAY
                break
        else:
            raise AssertionError(f"no write response in {within} cycles")
        ctx.set(mem.bready, 0)
        # the response comes once the last beat is in; the requests may still be going out
        for _ in range(within):
            if sum(len(t.enabled()) for t in self.writes) >= nbytes:
                break
            await ctx.tick()
        got, self.writes = self.writes, []
        return got

    async def offer_write(self, ctx, wid: int, start: int, nbytes: int, w_idle: float = 0.0) -> None:
        """The address and beats of a write burst of `nbytes` of `payload(start)` from byte address `start`."""
        mem, bb = self.dut.mem, self.bb
        first, end = start & -bb, start + nbytes
        beats = -(-(end - first) // bb)
        data = payload(first, bb * beats)
        ctx.set(mem.awvalid, 1)
        ctx.set(mem.awid, wid)
        ctx.set(mem.awaddr, start)
        ctx.set(mem.awlen, beats - 1)
        await ctx.tick().until(mem.awready)
        self.addresses_taken.append(self.cycle)
        ctx.set(mem.awvalid, 0)
        for k in range(beats):
            lo = first + bb * k
            strb = sum(1 << b for b in range(bb) if start <= lo + b < end)
            while self.rng.random() < w_idle:
                ctx.set(mem.wvalid, 0)
                await ctx.tick()
            if k == beats - 1:
                self.sent_before_last = len(self.writes)
            ctx.set(mem.wvalid, 1)
            ctx.set(mem.wdata, int.from_bytes(data[bb * k:bb * k + bb], "little"))
            ctx.set(mem.wstrb, strb)
            ctx.set(mem.wlast, int(k == beats - 1))
            await ctx.tick().until(mem.wready)
        ctx.set(mem.wvalid, 0)

    async def _b_sink(self, ctx):
        mem = self.dut.mem
        ctx.set(mem.bready, 1)
        async for _, _, valid, bid, resp in ctx.tick().sample(mem.bvalid, mem.bid, mem.bresp):
            if valid:
                assert resp == Resp.OKAY
                self.responses.append((self.cycle, bid))

    async def send(self, ctx, completion: Completion, gap: int = 0) -> None:
        """Offer the completion's beats on RC (`gap` idle cycles before each beat after the first)."""
        rc = self.dut.rc
        for k, (tdata, tkeep, tuser, tlast) in enumerate(completion.beats(self.lay.dwords, self.lay.rc_sop)):
            await self.wait(ctx, gap if k else 0)
            while self.rng.random() < self.idle:
                await ctx.tick()
            for signal, value in ((rc.tvalid, 1), (rc.tdata, tdata), (rc.tkeep, tkeep), (rc.tuser, tuser),
                                  (rc.tlast, tlast)):
                ctx.set(signal, value)
            await ctx.tick().until(rc.tready)
            ctx.set(rc.tvalid, 0)

    async def send_straddled(self, ctx, completions: list[Completion], seed: int = 0) -> None:
        """Offer completions back to back on a straddled 512-bit RC stream, as the block packs them: one may start at
        lane 8 of the beat where the one before it ended in lanes 0-7."""
        rc = self.dut.rc
        for tdata, tkeep, tuser in straddled([c.dwords() for c in completions], random.Random(seed), 1.0):
            for signal, value in ((rc.tvalid, 1), (rc.tdata, tdata), (rc.tkeep, tkeep), (rc.tuser, tuser)):
                ctx.set(signal, value)
            await ctx.tick().until(rc.tready)
        ctx.set(rc.tvalid, 0)

    async def wait(self, ctx, cycles: int) -> None:
        for _ in range(cycles):
            await ctx.tick()

    async def burst(self, ctx, rid: int, beats: int = BURST_BEATS, within: int = 2000) -> list[Beat]:
        """The next `beats` R beats of `rid` (taken off the record); fails if they do not come in time."""
        for _ in range(within):
            mine = [b for b in self.beats if b.id == rid]
            if len(mine) >= beats:
                got = mine[:beats]
                for b in got:
                    self.beats.remove(b)
                return got
            await ctx.tick()
        raise AssertionError(f"ID {rid}: {len([b for b in self.beats if b.id == rid])} of {beats} beats came "
                             f"in {within} cycles")


def payload(addr: int, n: int) -> bytes:
    """What the engine writes at each address: a pattern unlike host_bytes."""
    return bytes(((a * 7) ^ (a >> 9) ^ 0x5A) & 0xFF for a in range(addr, addr + n))


def check_data(got: list[Beat], addr: int, length: int | None = None, bb: int = 8) -> None:
    """The beats (of `bb` bytes) carry the host's data from `addr`, OKAY, rlast on the burst's last (of `length`
    beats)."""
    want = host_bytes(addr, bb * len(got))
    length = len(got) if length is None else length
    for k, b in enumerate(got):
        assert b.resp == Resp.OKAY, f"beat {k}: response {b.resp}, not OKAY"
        assert b.data == int.from_bytes(want[bb * k:bb * k + bb], "little"), f"beat {k}: wrong data"
        assert b.last == (k == length - 1), f"beat {k}: rlast {b.last}"


def check_failed(got: list[Beat], good: int = 0, addr: int = 0, bb: int = 8) -> None:
    """The first `good` beats carry the data from `addr`, the rest are SLVERR with no data."""
    check_data(got[:good], addr, len(got), bb)
    for k, b in enumerate(got[good:], good):
        assert b.resp == Resp.SLVERR, f"beat {k}: response {b.resp}, not SLVERR"
        assert b.data == 0, f"beat {k}: an error beat carries data {b.data:#x}"
        assert b.last == (k == len(got) - 1), f"beat {k}: rlast {b.last}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", [1, 2])
def test_reads_complete_split_and_interleaved(seed, width):
    h = Harness(timeout=1 << 14, seed=seed, idle=0.3, stall=0.3, data_width=width)  # no timeout here
    rng = random.Random(seed)

    async def bench(ctx):
        reqs = []
        for rid in range(1 << ID_WIDTH):
            addr = 0x1_0000_0000 * seed + 0x1000 * rid + h.bb * rng.randrange(512 // h.bb)
            reqs.append(await h.read_one(ctx, rid, addr, beats=rng.randint(1, BURST_BEATS)))
        assert len({r.tag for r in reqs}) == len(reqs), "two requests in flight with one tag"
        for r in reqs:
            assert h.gen(r.tag) == 0 and r.dwords > 0, "a first request's tag is of generation 0"
        # completions in any order between tags, in order within one
        pending = [r.completions(rng.choice((64, 128))) for r in reqs]
        while any(pending):
            await h.send(ctx, rng.choice([p for p in pending if p]).pop(0))
        for r in reqs:
            check_data(await h.burst(ctx, r.id, r.nbytes // h.bb), r.addr, bb=h.bb)
        assert not h.beats, "beats that no read asked for"
        assert ctx.get(h.dut.timeouts) == 0 and ctx.get(h.dut.dropped) == 0

    h.run(bench)


ERRORS = {
    "unsupported_request": dict(status=UR),
    "completer_abort": dict(status=CA),
    "config_retry": dict(status=CRS),
    "poisoned_bit": dict(poisoned=True),  # EP set, the block's error code left normal
    "poisoned_code": dict(poisoned=True, error_code=1),  # as the block reports it
    "byte_count_mismatch_code": dict(error_code=3),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("good_pieces", [0, 1])
@pytest.mark.parametrize("kind", list(ERRORS))
def test_error_completion_answers_the_rest_slverr(kind, good_pieces, width):
    h = Harness(data_width=width)

    async def bench(ctx):
        req = await h.read_one(ctx, 5, 0x2000)
        rcb = max(32, h.bb)  # pieces of 32 bytes (of a beat at 512 bits: a completion starts on one)
        pieces = req.completions(rcb=rcb)
        for p in pieces[:good_pieces]:
            await h.send(ctx, p)
        bad, spec = pieces[good_pieces], ERRORS[kind]
        bad_has_data = spec.get("poisoned", False)
        if bad_has_data:
            bad.poisoned, bad.error_code = True, spec.get("error_code", 0)
        else:  # an unsuccessful completion carries no data
            bad = Completion(req.tag, b"", bad.byte_count, bad.lower_address, **spec)
        await h.send(ctx, bad)
        if bad_has_data:  # a poisoned one is one of several: the rest of the request still comes, unwanted
            for p in pieces[good_pieces + 1:]:
                await h.send(ctx, p)
        check_failed(await h.burst(ctx, 5), good=rcb // h.bb * good_pieces, addr=req.addr, bb=h.bb)
        await h.wait(ctx, 40)
        assert not h.beats, "beats after the failed burst's last"
        assert ctx.get(h.dut.dropped) == (len(pieces) - good_pieces - 1 if bad_has_data else 0)
        # the ID works again, its tag unchanged (an error is not a timeout)
        again = await h.read_one(ctx, 5, 0x3000)
        assert again.tag == req.tag
        for p in again.completions():
            await h.send(ctx, p)
        check_data(await h.burst(ctx, 5), again.addr, bb=h.bb)

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_timeout_answers_slverr_within_its_bound(width):
    h = Harness(data_width=width)

    async def bench(ctx):
        lost = await h.read_one(ctx, 3, 0x4000)
        slow = await h.read_one(ctx, 4, 0x5000)
        await h.wait(ctx, TIMEOUT - 20)
        for p in slow.completions():  # just inside its deadline: data
            await h.send(ctx, p)
        check_data(await h.burst(ctx, 4), slow.addr, bb=h.bb)
        got = await h.burst(ctx, 3, within=TIMEOUT_BOUND)
        check_failed(got, bb=h.bb)
        waited = got[0].cycle - lost.cycle
        assert TIMEOUT <= waited <= TIMEOUT_BOUND, f"answered {waited} cycles after the request"
        assert ctx.get(h.dut.timeouts) == 1

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_late_completion_is_not_taken_by_the_next_read_of_its_id(width):
    h = Harness(data_width=width)

    async def bench(ctx):
        gens = 1 << h.dut.gen_bits
        old = await h.read_one(ctx, 3, 0x6000)
        check_failed(await h.burst(ctx, 3, within=TIMEOUT_BOUND), bb=h.bb)
        new = await h.read_one(ctx, 3, 0x7000)  # the ID reused at once, same length
        assert new.id == 3 and new.tag != old.tag, f"tag {new.tag:#x} reused after a timeout"
        assert h.gen(new.tag) == 1 % gens
        late, fresh = old.completions(), new.completions()
        # the new read's first piece, then the whole late answer (its byte counts match the new read's), then
        # the rest of the new read
        await h.send(ctx, fresh[0])
        for p in late:
            await h.send(ctx, p)
        for p in fresh[1:]:
            await h.send(ctx, p)
        check_data(await h.burst(ctx, 3), new.addr, bb=h.bb)
        await h.wait(ctx, 40)
        assert not h.beats
        assert ctx.get(h.dut.dropped) == len(late) and ctx.get(h.dut.timeouts) == 1
        # each timeout moves the generation on
        for k in range(2, 4):
            again = await h.read_one(ctx, 3, 0x8000)
            check_failed(await h.burst(ctx, 3, within=TIMEOUT_BOUND), bb=h.bb)
            assert h.gen(again.tag) == (k - 1) % gens
        last = await h.read_one(ctx, 3, 0x9000)
        assert h.gen(last.tag) == 3 % gens

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_stray_completions_are_dropped(width):
    h = Harness(data_width=width)

    async def bench(ctx):
        # for an ID with no read in flight
        await h.send(ctx, Completion(9, host_bytes(0, 128), 128))
        req = await h.read_one(ctx, 9, 0xA000)
        # a byte count the read does not await, with the right tag
        await h.send(ctx, Completion(req.tag, host_bytes(0xA040, 64), 64, 0x40))
        # more data than the byte count: only what the read awaits is delivered
        whole = req.completions(rcb=4096)[0]
        whole.data += host_bytes(0xA000 + len(whole.data), 32)
        await h.send(ctx, whole)
        check_data(await h.burst(ctx, 9), req.addr, bb=h.bb)
        await h.wait(ctx, 40)
        assert not h.beats, "the extra data was delivered"
        assert ctx.get(h.dut.dropped) == 2

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_timeout_does_not_cut_a_completion_in_progress(width):
    h = Harness(data_width=width)

    async def bench(ctx):
        lost = await h.read_one(ctx, 2, 0xB000)
        await h.wait(ctx, TIMEOUT - 60)
        streamed = await h.read_one(ctx, 1, 0xC000)
        (whole,) = streamed.completions(rcb=4096)  # five beats or more, sent slowly across the other's deadline
        await h.send(ctx, whole, gap=40)
        assert h.cycle - lost.cycle > TIMEOUT_BOUND, "the completion ended before the deadline: no test"
        check_data(await h.burst(ctx, 1), streamed.addr, bb=h.bb)
        check_failed(await h.burst(ctx, 2), bb=h.bb)

    h.run(bench)


# (at 512 bits seed 11 times out slot 0 twice, so its generation comes round, and a late completion of the first
# read then carries the byte count the slot's third request awaits: the aliasing the requester's docstring allows)
@pytest.mark.parametrize(("seed", "width"),
                         [(seed, w) for w in WIDTHS for seed in ((12, 13) if w == 512 else (11, 12))])
def test_random_fates_against_the_model(seed, width):
    """Reads on random IDs meet random fates (answered whole, split, with an error, never, late); every burst
    comes back as the model says: its data, or its data up to the failing piece and SLVERR after."""
    h = Harness(seed=seed, idle=0.2, stall=0.2, data_width=width)
    rng = random.Random(seed)

    async def bench(ctx):
        late: list[Completion] = []  # completions of timed-out reads, still to come
        for n in range(24):
            rid = rng.randrange(1 << ID_WIDTH)
            beats = rng.randint(1, BURST_BEATS)
            req = await h.read_one(ctx, rid, 0x10000 * n + h.bb * rng.randrange(3200 // h.bb), beats)
            pieces = req.completions(rng.choice([rcb for rcb in (32, 64, 128) if rcb >= h.bb]))
            fate = rng.choice(("ok", "ok", "error", "poisoned", "lost"))
            good = rng.randrange(len(pieces)) if fate != "ok" else len(pieces)
            for p in pieces[:good]:
                await h.send(ctx, p)
                if late and rng.random() < 0.5:  # a late completion slips in
                    await h.send(ctx, late.pop(0))
            good_beats = sum(len(p.data) for p in pieces[:good]) // h.bb
            if fate == "error":
                bad = pieces[good]
                await h.send(ctx, Completion(req.tag, b"", bad.byte_count, bad.lower_address,
                                             status=rng.choice((UR, CA))))
            elif fate == "poisoned":
                pieces[good].poisoned = True
                for p in pieces[good:]:
                    await h.send(ctx, p)
            elif fate == "lost":
                late.extend(pieces[good:])
            got = await h.burst(ctx, rid, beats, within=TIMEOUT_BOUND + 100)
            if fate == "ok":
                check_data(got, req.addr, bb=h.bb)
            else:
                check_failed(got, good=good_beats, addr=req.addr, bb=h.bb)
        for p in late:
            await h.send(ctx, p)
        await h.wait(ctx, 40)
        assert not h.beats, "a late completion was delivered"

    h.run(bench)


def test_reads_wait_for_a_free_tag():
    """32 IDs of 512-byte bursts at MRRS 128, off the 128-byte grid (five requests each: 160 in all): the pool's
    128 tags fill, the next request waits until a request is answered, no two requests in flight ever share a
    tag, and every burst's beats carry its bytes."""
    h = Harness(id_width=5, burst_beats=16, mrrs=128, data_width=256, timeout=1 << 16, seed=9)
    rng = random.Random(9)
    base = 0x8_0000_0000
    bursts = [(rid, base + 0x1000 * rid + 32 + 32 * rng.randrange(100)) for rid in range(32)]

    async def bench(ctx):
        mem = h.dut.mem
        inflight: dict[int, Request] = {}
        most = 0
        todo = list(bursts)
        while todo or inflight or h.requests:
            for r in h.requests:
                assert r.tag not in inflight, f"tag {r.tag:#x} sent again while its request is in flight"
                inflight[r.tag] = r
            h.requests.clear()
            most = max(most, len(inflight))
            if todo:  # offer the next address for a few cycles
                rid, addr = todo[0]
                for signal, value in ((mem.arvalid, 1), (mem.arid, rid), (mem.araddr, addr), (mem.arlen, 15)):
                    ctx.set(signal, value)
                for _ in range(8):
                    taken = ctx.get(mem.arready)
                    await ctx.tick()
                    if taken:
                        todo.pop(0)
                        break
                ctx.set(mem.arvalid, 0)
                await h.wait(ctx, 4)
                if taken:
                    continue
            if inflight:  # the pool is full (or all is asked): answer a request
                r = inflight.pop(rng.choice(list(inflight)))
                for c in r.completions(rcb=64):
                    await h.send(ctx, c)
            else:
                await h.wait(ctx, 4)
        assert most == 128, f"at most {most} requests were in flight"
        for rid, addr in bursts:
            check_data(await h.burst(ctx, rid, 16), addr, bb=h.bb)
        assert not h.beats and ctx.get(h.dut.dropped) == 0

    h.run(bench)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="id_width must be 1..8"):
        PcieRequester(id_width=9, max_burst_beats=16)
    with pytest.raises(ValueError, match="at most 4 KiB"):
        PcieRequester(id_width=4, max_burst_beats=256, data_width=256)
    with pytest.raises(ValueError, match="not 512-bit"):
        PcieRequester(id_width=4, max_burst_beats=8, data_width=512)
    with pytest.raises(ValueError, match="completion_timeout_cycles"):
        PcieRequester(id_width=4, max_burst_beats=16, completion_timeout_cycles=10)


# --- request sizes: the host's Max_Read_Request_Size and Max_Payload_Size --------------------------------------

SWEEP_BYTES = 2048  # 2 KiB bursts (AXI4's longest at 64 bits): every size up to 2048 cuts some, 4096 at 4 KiB
# (bytes, offset) of each read burst; 4 + 256: an odd DWORD (below the beat: ignored); 4096 - ...: across 4 KiB
SWEEP_READS = [(8 * beats, offset) for beats in (1, 2, 17, 64)
               for offset in (0, 8, 120, 4 + 256, 4096 - 8 * (beats // 2))]
SWEEP_READS += [(2048, 120), (2048, 4096 - 1024)]
SWEEP_WRITES = [(nbytes, offset) for nbytes in (1, 3, 61, 129, 600) for offset in (0, 4, 5, 127, 4096 - nbytes // 2)]
SWEEP_WRITES += [(2040, 5), (2040, 4096 - 1020)]
# every size is swept; the default set sweeps the smallest, a common host's and the largest
SWEEP_SIZES = [size if size in (128, 512, 4096) else pytest.param(size, marks=pytest.mark.slow) for size in SIZES]


def sweep_harness(width: int, **given) -> Harness:
    """One ID bit and 2 KiB bursts at `width`."""
    return Harness(id_width=1, burst_beats=SWEEP_BYTES * 8 // width, data_width=width, **given)


def beats_of(h: Harness, nbytes: int) -> int:
    return max(1, -(-nbytes // h.bb))


def split_model(addr: int, nbytes: int, size: int) -> list[tuple[int, int]]:
    """(address, bytes) of each read request: `nbytes` from `addr` cut at every multiple of `size`."""
    out = []
    while nbytes:
        n = min(nbytes, size - addr % size)
        out.append((addr, n))
        addr, nbytes = addr + n, nbytes - n
    return out


def write_pieces(addr: int, nbytes: int, size: int) -> list[tuple[int, int]]:
    """(address, bytes) of each write request: `nbytes` from `addr`, each request `size` bytes from where the last
    ended (the first from the burst's start, wherever it lies) and none across 4 KiB."""
    out = []
    while nbytes:
        n = min(nbytes, size, 4096 - addr % 4096)
        out.append((addr, n))
        addr, nbytes = addr + n, nbytes - n
    return out


def write_model(start: int, nbytes: int, size: int) -> list[tuple[int, int, int, int]]:
    """(address, DWORDs, first_be, last_be) of each write request for bytes [start, start + nbytes)."""
    end = start + nbytes
    first_mask, last_mask = 0xF << start % 4 & 0xF, 0xF >> (4 - end % 4) % 4
    dword_start, dword_end = start // 4 * 4, -(-end // 4) * 4
    pieces = write_pieces(dword_start, dword_end - dword_start, size)
    out = []
    for k, (addr, n) in enumerate(pieces):
        dwords, first, last = n // 4, k == 0, k == len(pieces) - 1
        fbe = first_mask if first else 0xF
        if dwords == 1:
            out.append((addr, 1, fbe & (last_mask if last else 0xF), 0))
        else:
            out.append((addr, dwords, fbe, last_mask if last else 0xF))
    return out


def check_requests(h: Harness, reqs: list[Request], rid: int, addr: int, beats: int, size: int) -> None:
    """The burst's requests are the model's cut of its beat-aligned bytes, each at most `size` and within
    4 KiB, for its ID."""
    want = split_model(addr & -h.bb, h.bb * beats, size)
    assert [(r.addr, r.nbytes) for r in reqs] == want, f"burst of {beats} beats at {addr:#x}, size {size}"
    for k, r in enumerate(reqs):
        assert r.nbytes <= size and r.addr // 4096 == (r.addr + r.nbytes - 1) // 4096
        assert r.id == rid, f"request {k} of ID {rid}: tag {r.tag:#x}"


async def offer_bursts_in_order(h: Harness, ctx, bursts: list[tuple[int, int]]) -> None:
    """Write bursts (start, bytes) offered back to back on IDs 0-3 in turn: every request is the model's (MPS 128),
    with its bytes, and the responses come in the bursts' order."""
    for k, (start, nbytes) in enumerate(bursts):
        await h.offer_write(ctx, k % 4, start, nbytes)
    await h.wait(ctx, 200)
    want = [w for start, nbytes in bursts for w in write_model(start, nbytes, 128)]
    assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in h.writes] == want
    assert b"".join(t.enabled() for t in h.writes) == b"".join(payload(a, n) for a, n in bursts)
    assert [bid for _, bid in h.responses] == [k % 4 for k in range(len(bursts))], "responses out of order"


async def answer_shuffled(h: Harness, ctx, reqs: list[Request], rng: random.Random) -> None:
    """Every request's completions, split at random completion boundaries, in a random order between
    requests (of one burst or several) and in order within each."""
    pending = [r.completions(rng.choice((64, 128))) for r in reqs]
    while any(pending):
        await h.send(ctx, rng.choice([p for p in pending if p]).pop(0))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("size", SWEEP_SIZES)
def test_reads_cut_at_the_read_request_size(size, width):
    """Bursts of every length at offsets that start mid-way, cross 4 KiB and name an odd DWORD, two at a time
    on two IDs, with the host's MRRS `size`: the requests are the model's, their completions come back out of
    order between requests, and each burst's beats carry its bytes in order."""
    h = sweep_harness(width, mrrs=size, seed=size, idle=0.1, stall=0.2, rq_stall=0.2, timeout=1 << 20)
    rng = random.Random(size)

    async def bench(ctx):
        for k in range(0, len(SWEEP_READS), 2):
            bursts = []
            for rid, (nbytes, offset) in enumerate(SWEEP_READS[k:k + 2]):
                addr, beats = 0x1_0000_0000 + 0x10000 * k + 0x2000 * rid + offset, beats_of(h, nbytes)
                reqs = await h.read(ctx, rid, addr, beats)
                check_requests(h, reqs, rid, addr, beats, size)
                bursts.append((rid, addr, beats, reqs))
            tags = [r.tag for *_, reqs in bursts for r in reqs]
            assert len(set(tags)) == len(tags), "two requests in flight with one tag"
            await answer_shuffled(h, ctx, [r for *_, reqs in bursts for r in reqs], rng)
            for rid, addr, beats, _ in bursts:
                check_data(await h.burst(ctx, rid, beats, within=20 * beats + 400), addr & -h.bb, bb=h.bb)
        await h.wait(ctx, 40)
        assert not h.beats, "beats that no read asked for"
        assert ctx.get(h.dut.timeouts) == 0 and ctx.get(h.dut.dropped) == 0

    h.run(bench)


@pytest.mark.parametrize(("width", "straddle"), WITH_UNSTRADDLED)
@pytest.mark.parametrize("size", SWEEP_SIZES)
def test_writes_cut_at_the_payload_size(size, width, straddle):
    """Writes of every length from byte offsets that start mid-DWORD, on an odd DWORD and across 4 KiB, with the
    host's MPS `size`: the write requests are the model's (addresses, lengths, byte enables) and together
    write exactly the burst's bytes."""
    h = sweep_harness(width, mps=size, rq_stall=0.2, max_payload_bytes=4096, rq_straddle=straddle)

    async def bench(ctx):
        for k, (nbytes, offset) in enumerate(SWEEP_WRITES):
            start = 0x2_0000_0000 + 0x10000 * k + offset
            tlps = await h.write(ctx, k % 2, start, nbytes, within=20 * nbytes + 400)
            assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in tlps] == write_model(start, nbytes, size), \
                f"{nbytes} bytes at {start:#x}, size {size}"
            for t in tlps:
                assert 4 * t.dwords <= size and t.addr // 4096 == (t.addr + 4 * t.dwords - 1) // 4096
            assert b"".join(t.enabled() for t in tlps) == payload(start, nbytes), f"{nbytes} bytes at {start:#x}"

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_writes_go_out_as_their_data_comes_in(width):
    """A write burst whose beats come with gaps is sent a request at a time as each request's data is in, not
    after its last beat; the requests are still the model's."""
    h = sweep_harness(width, mps=128, rq_stall=0.2, seed=5)

    async def bench(ctx):
        for k, (nbytes, offset) in enumerate(((2040, 5), (600, 4096 - 300), (1000, 127))):
            start = 0x4_0000_0000 + 0x10000 * k + offset
            tlps = await h.write(ctx, k % 2, start, nbytes, within=20 * nbytes + 400, w_idle=0.3)
            assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in tlps] == write_model(start, nbytes, 128)
            assert b"".join(t.enabled() for t in tlps) == payload(start, nbytes)
            # (at 256 bits a 128-byte request's data comes in four beats and leaves in five: RQ is the slower side)
            assert h.sent_before_last >= (len(tlps) - 2 if h.bb == 8 else 1), \
                f"{nbytes} bytes: {h.sent_before_last} of {len(tlps)} requests out before the last beat"

    h.run(bench)


@pytest.mark.parametrize("rq_stall", [0.0, 0.3])
def test_write_bursts_overlap_at_a_beat_a_cycle(rq_stall):
    """At 256 bits, write bursts offered back to back (odd starts and lengths among them): the next burst's
    address and data are taken while the previous one's requests go out, every request is the model's, the
    responses come in order; with RQ always ready the requests leave
    without a gap (one header beat and eight DWORDs a beat after it)."""
    h = Harness(id_width=2, burst_beats=16, mps=128, rq_stall=rq_stall, seed=7, data_width=256)
    bursts = [(0x6_0000_0000 + 512 * k, 512) for k in range(6)]
    bursts += [(0x6_0001_0000 + 4096 - 300, 480), (0x6_0002_0000 + 5, 507), (0x6_0003_0000 + 4, 1)]

    async def bench(ctx):
        await offer_bursts_in_order(h, ctx, bursts)
        first_out = h.write_beats[512 // 128 * 5 - 1]  # the first burst's last request beat: 4 requests of 5 beats
        assert h.addresses_taken[1] < first_out, "the second burst waited for the first one's requests to go out"
        if rq_stall == 0:
            aligned = 6 * 512 // 128  # requests of the first six bursts, 5 beats each
            beats = h.write_beats[:5 * aligned]
            assert beats[-1] - beats[0] + 1 == len(beats), \
                f"{len(beats)} write beats took {beats[-1] - beats[0] + 1} cycles"

    h.run(bench, responses=True)


@pytest.mark.parametrize("rq_stall", [0.0, 0.3])
def test_straddled_writes_share_beats_at_512_bits(rq_stall):
    """At 512 bits with RQ straddled, write bursts offered back to back (odd starts and lengths among them): every
    request is the model's, in order, with its byte enables; a request ends in the first half of a beat and the
    next starts in its second half; with RQ always ready 128-byte requests (4 + 32 DWORDs: five halves) leave at
    two and a half beats each, not three."""
    h = Harness(id_width=2, burst_beats=8, mps=128, rq_stall=rq_stall, seed=8, data_width=512)
    bursts = [(0x6_0000_0000 + 512 * k, 512) for k in range(6)]
    bursts += [(0x6_0001_0000 + 4096 - 300, 480), (0x6_0002_0000 + 5, 507), (0x6_0003_0000 + 4, 1),
               (0x6_0004_0000 + 60, 8), (0x6_0005_0000 + 64, 200)]

    async def bench(ctx):
        await offer_bursts_in_order(h, ctx, bursts)
        assert h.straddled_beats > 0, "no beat carried two requests"
        assert h.frame is None, "a request was left open"
        if rq_stall == 0:
            requests = 6 * 512 // 128  # of the first six bursts: 24 requests of five halves
            beats = h.write_beats[:requests * 5 // 2]
            assert beats[-1] - beats[0] + 1 == len(beats), \
                f"{len(beats)} write beats took {beats[-1] - beats[0] + 1} cycles"

    h.run(bench, responses=True)


@pytest.mark.parametrize(("width", "straddle"), WITH_UNSTRADDLED)
def test_read_requests_go_between_write_requests(width, straddle):
    """Reads offered while write bursts stream out (RQ stalling at random): each read request goes out between
    two write requests, never inside one; the writes are the model's and the reads carry their bytes."""
    h = Harness(id_width=4, burst_beats=512 * 8 // width, mps=128, mrrs=128, rq_stall=0.3, seed=11, data_width=width,
                timeout=1 << 16, rq_straddle=straddle)
    reads = [(rid, 0x9_0000_0000 + 0x1000 * rid + 8 * (rid * 5 % 16) // h.bb * h.bb, 256 // h.bb)
             for rid in range(12)]
    writes = [(0xA_0000_0000 + 0x1000 * k + 4 * k + 1, 300 + 17 * k) for k in range(10)]

    async def bench(ctx):
        for k, (start, nbytes) in enumerate(writes):
            await h.offer_write(ctx, k % 16, start, nbytes)
        await h.wait(ctx, 400)
        want = [w for start, nbytes in writes for w in write_model(start, nbytes, 128)]
        assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in h.writes] == want
        assert b"".join(t.enabled() for t in h.writes) == b"".join(payload(a, n) for a, n in writes)
        between = [r for r in h.requests if h.write_beats[0] < r.cycle < h.write_beats[-1]]
        assert len(between) >= len(reads), "the reads did not go out among the writes: no test"
        by_id = {rid: [r for r in h.requests if r.addr >> 12 & 0xFF == rid] for rid, _, _ in reads}
        await answer_shuffled(h, ctx, h.requests, random.Random(11))
        for rid, addr, beats in reads:
            assert sum(r.nbytes for r in by_id[rid]) == h.bb * beats
            check_data(await h.burst(ctx, rid, beats), addr & -h.bb, bb=h.bb)
        assert not h.beats and ctx.get(h.dut.dropped) == 0

    h.run(bench, responses=True, reads=reads, reads_after_a_write=True)


def test_completions_are_taken_a_beat_a_cycle():
    """At 256 bits, reads answered by back-to-back 128-byte completions (five RC beats each) in an order mixed
    between IDs: RC takes a beat every cycle, and the R beats carry each burst's bytes in order."""
    h = Harness(id_width=4, burst_beats=16, mrrs=512, seed=3, data_width=256, timeout=1 << 14)
    rng = random.Random(3)

    async def bench(ctx):
        reqs = [await h.read_one(ctx, rid, 0x7_0000_0000 + 0x1000 * rid + 512 * rng.randrange(7)) for rid in range(16)]
        start = h.cycle
        pieces = [r.completions(rcb=128) for r in reqs]
        while any(pieces):
            await h.send(ctx, rng.choice([p for p in pieces if p]).pop(0))
        took = h.cycle - start
        assert took <= 16 * 4 * 5 + 2, f"64 completions of five beats took {took} cycles"
        for r in reqs:
            check_data(await h.burst(ctx, r.id, 16), r.addr, bb=h.bb)
        assert not h.beats and ctx.get(h.dut.dropped) == 0

    h.run(bench)


def test_straddled_completions_are_taken_at_512_bits():
    """At 512 bits with RC straddled, reads answered by back-to-back 128-byte completions (35 DWORDs: 2.5 beats
    each, one starting at lane 8 of the beat where the one before it ended) in an order mixed between IDs: RC takes
    a beat a cycle, so 64 completions in about 160 cycles (three beats each unstraddled: 192), and the R beats carry
    each burst's bytes in order."""
    h = Harness(id_width=4, burst_beats=8, mrrs=512, seed=3, data_width=512, timeout=1 << 14)
    rng = random.Random(3)

    async def bench(ctx):
        reqs = [await h.read_one(ctx, rid, 0x7_0000_0000 + 0x1000 * rid + 512 * rng.randrange(7), 8)
                for rid in range(16)]
        pieces = [r.completions(rcb=128) for r in reqs]
        order = []
        while any(pieces):
            order.append(rng.choice([p for p in pieces if p]).pop(0))
        start = h.cycle
        await h.send_straddled(ctx, order)
        took = h.cycle - start
        assert took <= 64 * 5 // 2 + 4, f"64 straddled completions took {took} cycles"
        for r in reqs:
            check_data(await h.burst(ctx, r.id, 8), r.addr, bb=h.bb)
        assert not h.beats and ctx.get(h.dut.dropped) == 0

    h.run(bench)


@pytest.mark.parametrize("width", WIDTHS)
def test_sizes_are_capped_and_sampled_between_bursts(width):
    """The host's sizes above the card's ceilings (and the reserved codes) are cut to the ceilings; a size
    changed by the host takes effect from the next burst."""
    h = sweep_harness(width, max_read_bytes=256, max_payload_bytes=512)

    async def bench(ctx):
        for code, want in ((5, 256), (7, 256), (0, 128), (1, 256)):
            ctx.set(h.dut.max_read_req, code)
            ctx.set(h.dut.max_payload, code)
            await h.wait(ctx, 2)
            reqs = await h.read(ctx, 0, 0x3000, 1024 // h.bb)
            assert [r.nbytes for r in reqs] == [want] * (1024 // want), f"read request size code {code}"
            await answer_shuffled(h, ctx, reqs, random.Random(code))
            check_data(await h.burst(ctx, 0, 1024 // h.bb), 0x3000, bb=h.bb)
            tlps = await h.write(ctx, 1, 0x5000, 1024)
            size = min(128 << code, 512) if code <= 5 else 512
            assert [4 * t.dwords for t in tlps] == [size] * (1024 // size), f"payload size code {code}"

    h.run(bench)


CARD_ID_WIDTH, CARD_BYTES = 4, 512  # the card's requester: 16 reads in flight, 512-byte bursts
THREE = (0x2040, 256)  # at MRRS 128: requests of 64, 128 and 64 bytes


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", ["first_in", "third_first", "poisoned", "lost"])
def test_an_error_on_the_second_of_three_requests(case, width):
    """A burst cut into three requests whose second fails (UR, poisoned, never answered): the beats before the
    first missing one carry data, every later beat is SLVERR, the other requests' late completions are
    dropped, and the ID serves its next burst (same generation unless it timed out)."""
    h = Harness(id_width=CARD_ID_WIDTH, burst_beats=CARD_BYTES * 8 // width, mrrs=128, data_width=width)

    async def bench(ctx):
        addr, beats = THREE[0], THREE[1] // h.bb
        reqs = await h.read(ctx, 7, addr, beats)
        assert [r.nbytes for r in reqs] == [64, 128, 64]
        first, second, third = (r.completions(rcb=64) for r in reqs)
        if case == "third_first":
            for c in third:
                await h.send(ctx, c)
        else:
            for c in first:
                await h.send(ctx, c)
        if case == "poisoned":
            second[0].poisoned = True
            for c in second:
                await h.send(ctx, c)
        elif case != "lost":
            await h.send(ctx, Completion(reqs[1].tag, b"", 128, reqs[1].addr & 0xFFF, status=UR))
        late = first if case == "third_first" else third
        if case != "lost":
            for c in late:
                await h.send(ctx, c)
        got = await h.burst(ctx, 7, beats, within=TIMEOUT_BOUND + 400)
        if case == "lost":  # the third request's answer comes after the timeout
            for c in late:
                await h.send(ctx, c)
        check_failed(got, good=0 if case == "third_first" else 64 // h.bb, addr=addr, bb=h.bb)
        await h.wait(ctx, 40)
        assert not h.beats, "beats after the failed burst's last"
        assert ctx.get(h.dut.dropped) == len(late) + (len(second) - 1 if case == "poisoned" else 0)
        assert ctx.get(h.dut.timeouts) == (case == "lost")
        again = await h.read(ctx, 7, 0x4000, 128 // h.bb)
        # no tag still awaited when the burst timed out is used again at once: its generation moved on
        pending = {r.tag for r in reqs[1:]} if case == "lost" else set()
        assert not {r.tag for r in again} & pending
        await answer_shuffled(h, ctx, again, random.Random(1))
        check_data(await h.burst(ctx, 7, 128 // h.bb), 0x4000, bb=h.bb)

    h.run(bench)


def test_write_response_comes_with_the_last_beat():
    """A write burst's response comes once its last beat is in, while RQ still holds its requests back (they leave
    before any later burst's, so what the engine writes after the response lands after them); a gather buffer is
    taken again only once its requests are out, and every request is the model's."""
    h = Harness(id_width=2, burst_beats=8, mps=128, rq_stall=1.0, seed=9, data_width=512)
    bursts = [(0x6_0000_0000 + 64, 448), (0x6_0000_0000 + 512, 512), (0x6_0000_0000 + 1024, 256),
              (0x6_0000_0000 + 1280, 128), (0x6_0000_0000 + 1408, 200)]
    held = len(bursts) - 1  # one burst in each gather buffer
    assert held == BUFFERS

    async def bench(ctx):
        for k, (start, nbytes) in enumerate(bursts[:held]):
            await h.offer_write(ctx, k % 4, start, nbytes)
        await h.wait(ctx, 20)
        assert [bid for _, bid in h.responses] == [k % 4 for k in range(held)], "a response waited for its requests"
        assert not h.writes, "a request left while RQ was not ready"
        h.rq_stall = 0.0
        await h.offer_write(ctx, held % 4, *bursts[held])
        assert h.addresses_taken[held] > h.write_beats[0], "a buffer was taken while its requests were still in it"
        await h.wait(ctx, 100)
        want = [w for start, nbytes in bursts for w in write_model(start, nbytes, 128)]
        assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in h.writes] == want
        assert b"".join(t.enabled() for t in h.writes) == b"".join(payload(a, n) for a, n in bursts)
        assert [bid for _, bid in h.responses] == [k % 4 for k in range(len(bursts))]

    h.run(bench, responses=True)


async def offer_write_with_address(h: Harness, ctx, wid: int, start: int, nbytes: int) -> int:
    """A write burst whose first beat is offered with its address (as AXI allows); how many of its beats were taken
    in the cycle its address was."""
    mem, bb = h.dut.mem, h.bb
    first, end = start & -bb, start + nbytes
    beats = -(-(end - first) // bb)
    data = payload(first, bb * beats)
    for signal, value in ((mem.awvalid, 1), (mem.awid, wid), (mem.awaddr, start), (mem.awlen, beats - 1)):
        ctx.set(signal, value)
    k, with_address, address_open = 0, 0, True
    while k < beats:
        lo = first + bb * k
        for signal, value in ((mem.wvalid, 1), (mem.wdata, int.from_bytes(data[bb * k:bb * k + bb], "little")),
                              (mem.wstrb, sum(1 << b for b in range(bb) if start <= lo + b < end)),
                              (mem.wlast, int(k == beats - 1))):
            ctx.set(signal, value)
        aw_now, w_now = address_open and ctx.get(mem.awready), ctx.get(mem.wready)
        await ctx.tick()
        if aw_now:
            address_open = False
            ctx.set(mem.awvalid, 0)
            with_address += w_now
        k += w_now
    while address_open:
        address_open = not ctx.get(mem.awready)
        await ctx.tick()
    ctx.set(mem.awvalid, 0)
    ctx.set(mem.wvalid, 0)
    return with_address


@pytest.mark.parametrize(("width", "rq_stall"), [(64, 0.3), (256, 0.0), (512, 0.0), (512, 0.3)])
def test_a_first_beat_may_come_with_its_address(width, rq_stall):
    """Write bursts whose first beat comes with the address: a burst into a free buffer has that beat taken in the
    address's cycle, and every request is still the model's, with its bytes, in order."""
    h = Harness(id_width=2, burst_beats=512 * 8 // width, mps=128, rq_stall=rq_stall, seed=12, data_width=width)
    bursts = [(0x6_0000_0000 + 64, 8), (0x6_0001_0000 + 4, 1), (0x6_0002_0000 + 64, 448), (0x6_0003_0000, 512),
              (0x6_0004_0000 + 4096 - 100, 200), (0x6_0005_0000 + 60, 8)]

    async def bench(ctx):
        together = []
        for k, (start, nbytes) in enumerate(bursts):
            together.append(await offer_write_with_address(h, ctx, k % 4, start, nbytes))
            await h.wait(ctx, 30)
        assert all(together), f"beats taken with their address, per burst: {together}"
        want = [w for start, nbytes in bursts for w in write_model(start, nbytes, 128)]
        assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in h.writes] == want
        assert b"".join(t.enabled() for t in h.writes) == b"".join(payload(a, n) for a, n in bursts)
        assert [bid for _, bid in h.responses] == [k % 4 for k in range(len(bursts))]

    h.run(bench, responses=True)



@pytest.mark.parametrize("lane", [0, 8])
def test_a_realigned_beat_is_stored_as_it_is_taken_at_512_bits(lane):
    """At 512 bits with RC straddled, a completion's beats go into the store in the cycle the realigner hands them on
    (no accumulator between): a 128-byte read's last R beat comes in the cycle after the RC beat that ends its
    completion (two with the accumulator), whether the completion starts at lane 0 or at lane 8 behind another."""
    h = Harness(id_width=4, burst_beats=2, mrrs=512, data_width=512, timeout=1 << 14)

    async def bench(ctx):
        ahead = [await h.read_one(ctx, 4, 0x7_0000_2000, 2)] if lane else []
        req = await h.read_one(ctx, 5, 0x7_0000_1080, 2)
        await h.send_straddled(ctx, [c for r in ahead + [req] for c in r.completions(rcb=128)])
        sent = h.cycle
        if ahead:
            check_data(await h.burst(ctx, 4, 2), ahead[0].addr, bb=h.bb)
        beats = await h.burst(ctx, 5, 2)
        check_data(beats, req.addr, bb=h.bb)
        assert beats[-1].cycle - sent == 1, f"the last R beat {beats[-1].cycle - sent} cycles after RC's last"

    h.run(bench)


@pytest.mark.parametrize(("nbytes", "after"), [(128, 0), (120, 1)])
def test_a_write_request_starts_as_its_last_beat_is_written_at_512_bits(nbytes, after):
    """At 512 bits (RQ straddled) a write request whose data the W beat being written completes starts in that beat's
    cycle, its header and first data half from the rows already in (a burst's last beat only if its strobes run to
    its end: else its end is known a cycle later); the requests are still the model's."""
    h = Harness(id_width=2, burst_beats=8, mps=128, data_width=512, seed=4)
    start = 0x4_0000_0080

    async def bench(ctx):
        await h.offer_write(ctx, 1, start, nbytes)
        last_beat = h.cycle
        ctx.set(h.dut.mem.bready, 1)
        await h.wait(ctx, 20)
        assert [(t.addr, t.dwords, t.first_be, t.last_be) for t in h.writes] == write_model(start, nbytes, 128)
        assert b"".join(t.enabled() for t in h.writes) == payload(start, nbytes)
        assert h.write_beats[0] - last_beat == after, \
            f"the last request's first RQ beat {h.write_beats[0] - last_beat} cycles after the last W beat"

    h.run(bench)
