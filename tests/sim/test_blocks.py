"""Block-level tests of the engine's parts in amaranth.sim, each against a Python model: round robin,
realigner, region table, validator (against the reference engine's checks) and the write mux's ordering."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Elaboratable, Module  # noqa: E402
from amaranth.lib import memory, wiring  # noqa: E402
from amaranth.sim import Simulator  # noqa: E402

from driver.abi import REGION, ErrorCode, Flag, Perm  # noqa: E402
from driver.descriptor import Descriptor  # noqa: E402
from driver.reference_engine import Region, validate  # noqa: E402
from rtl.records import JobKind  # noqa: E402
from rtl.params import EngineParams  # noqa: E402
from rtl.realign import Realigner, realign_model, strobe_model  # noqa: E402
from rtl.region_table import RegionTable  # noqa: E402
from rtl.round_robin import RoundRobin, round_robin_model  # noqa: E402
from rtl.validator import Validator  # noqa: E402
from rtl.write_mux import WriteMux  # noqa: E402

pytestmark = pytest.mark.sim
SMALL = EngineParams(data_width=64, num_queues=2, slots=16, num_regions=8, reads_outstanding=4,
                     writes_outstanding=8, buffer_bytes=1024, max_burst_beats=8)


def simulate(dut, bench, clocked: bool = True) -> None:
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_round_robin_matches_model(n):
    dut = RoundRobin(n)
    rng = random.Random(n)

    async def bench(ctx):
        start = 0
        for _ in range(400):
            requests = [rng.random() < 0.4 for _ in range(n)]
            advance = rng.random() < 0.7
            ctx.set(dut.requests, sum(1 << i for i, r in enumerate(requests) if r))
            ctx.set(dut.advance, advance)
            want = round_robin_model(requests, start)
            assert ctx.get(dut.valid) == (want is not None)
            assert ctx.get(dut.grant_onehot) == (0 if want is None else 1 << want), f"requests {requests}, start {start}"
            if want is not None:
                assert ctx.get(dut.grant) == want, f"requests {requests}, start {start}"
                if advance:
                    start = (want + 1) % n
            await ctx.tick()

    simulate(dut, bench)


@pytest.mark.parametrize("width", [64, 512])
def test_realigner_matches_model(width):
    dut = Realigner(width)
    lanes = width // 8
    rng = random.Random(width)

    async def bench(ctx):
        for _ in range(300):
            prev, cur = rng.randbytes(lanes), rng.randbytes(lanes)
            shift, fl, ll = rng.randrange(lanes), rng.randrange(lanes), rng.randrange(lanes)
            first, last = rng.random() < 0.5, rng.random() < 0.5
            for sig, v in ((dut.prev, int.from_bytes(prev, "little")), (dut.cur, int.from_bytes(cur, "little")),
                           (dut.shift, shift), (dut.first, first), (dut.first_lane, fl), (dut.last, last),
                           (dut.last_lane, ll)):
                ctx.set(sig, v)
            assert ctx.get(dut.out).to_bytes(lanes, "little") == realign_model(prev, cur, shift)
            assert ctx.get(dut.strb) == strobe_model(lanes, first, fl, last, ll)

    simulate(dut, bench, clocked=False)


REG_OFF = {r.name: r.offset for r in REGION.registers}


async def program_region(ctx, table, rid: int, addr: int, size: int, perms: int) -> None:
    for name, value in (("ADDR_LO", addr & 0xFFFFFFFF), ("ADDR_HI", addr >> 32), ("SIZE_LO", size & 0xFFFFFFFF),
                        ("SIZE_HI", size >> 32), ("PERMS", perms)):
        ctx.set(table.regs.w_valid, 1)
        ctx.set(table.regs.w_index, rid)
        ctx.set(table.regs.w_offset, REG_OFF[name])
        ctx.set(table.regs.w_data, value)
        await ctx.tick()
    ctx.set(table.regs.w_valid, 0)


def random_regions(rng: random.Random, n: int) -> list[Region | None]:
    out = []
    for _ in range(n):
        if rng.random() < 0.2:
            out.append(None)
        else:
            out.append(Region(rng.randrange(1 << 64) & ~0xFFF, rng.choice([0, 8, 4096, 1 << 20, rng.randrange(1 << 40)]),
                              rng.choice([Perm.READ, Perm.WRITE, Perm.READ | Perm.WRITE])))
    return out


def test_region_table_lookups_and_readback():
    p = SMALL
    dut = RegionTable(num_regions=p.num_regions)
    rng = random.Random(7)
    regions = random_regions(rng, p.num_regions)

    async def bench(ctx):
        for rid, r in enumerate(regions):
            if r is not None:
                await program_region(ctx, dut, rid, r.addr, r.size, int(r.perms))
        await program_region(ctx, dut, 1, 0x1234_0000, 64, 0)  # PERMS = 0 unregisters
        table = list(regions)
        table[1] = None
        for rid in list(range(p.num_regions + 3)) + [0xFFFF]:
            for port in (dut.src, dut.dst, dut.cw):
                ctx.set(port.en, 1)
                ctx.set(port.id, rid)
            await ctx.tick()
            for port in (dut.src, dut.dst, dut.cw):
                ctx.set(port.en, 0)
            want = table[rid] if rid < p.num_regions else None
            for port in (dut.src, dut.dst, dut.cw):
                assert ctx.get(port.entry.perms) == (int(want.perms) if want else 0), f"region {rid}"
                if want:
                    assert (ctx.get(port.entry.addr), ctx.get(port.entry.size)) == (want.addr, want.size)
            if rid < p.num_regions:
                for name in ("ADDR_LO", "SIZE_HI", "PERMS"):
                    ctx.set(dut.regs.r_en, 1)
                    ctx.set(dut.regs.r_index, rid)
                    ctx.set(dut.regs.r_offset, REG_OFF[name])
                    await ctx.tick()
                    ctx.set(dut.regs.r_en, 0)
                    if name == "PERMS":
                        assert ctx.get(dut.regs.r_data) == (int(want.perms) if want else 0)
                    elif want:
                        assert ctx.get(dut.regs.r_data) == (want.addr & 0xFFFFFFFF if name == "ADDR_LO" else want.size >> 32)

    simulate(dut, bench)


def random_descriptor(rng: random.Random, regions: list[Region | None]) -> Descriptor:
    """Mostly plausible descriptors near region bounds, with every error class in the mix."""
    n = len(regions)

    def rid():
        return rng.randrange(n) if rng.random() < 0.9 else rng.choice([n, n + 1, 0xFFFF])

    def offset_len(region_id):
        size = regions[region_id].size if region_id < n and regions[region_id] else 4096
        length = rng.choice([0, 1, 8, 64, rng.randrange(1, 5000)])
        off = rng.choice([0, max(0, size - length), max(0, size - length + 1), rng.randrange(size + 2),
                          (1 << 64) - rng.randrange(1, 100)])
        return off % (1 << 64), length

    src, dst = rid(), rid()
    if rng.random() < 0.1:
        dst = src
    so, length = offset_len(src)
    do, _ = offset_len(dst)
    flags = rng.choice([0, Flag.NOTIFY, Flag.FENCE]) | (Flag.IMM if rng.random() < 0.15 else 0)
    if flags & Flag.IMM:
        length = rng.choice([8, 8, 8, 4])  # 4: BAD_LENGTH
        do = do & ~7 if rng.random() < 0.8 else do | 4
    if rng.random() < 0.03:
        flags |= 0x100
    reserved = 1 if rng.random() < 0.03 else 0
    return Descriptor(src_offset=so, dst_offset=do, length=length, src_region=src, dst_region=dst, flags=int(flags),
                      reserved=reserved, cookie=rng.randrange(1 << 32))


class _ValidatorBench(Elaboratable):
    """The validator with a real region table and a window memory holding the descriptors."""

    def __init__(self, p: EngineParams, descriptors: list[Descriptor]):
        self.p, self.descriptors = p, descriptors
        self.validator = Validator(num_queues=p.num_queues, slots=p.slots, data_width=p.data_width,
                                   row_ptr_width=p.row_ptr_width, max_burst_beats=p.max_burst_beats)
        self.regions = RegionTable(num_regions=p.num_regions)

    def elaborate(self, platform):
        m = Module()
        v = m.submodules.validator = self.validator
        r = m.submodules.regions = self.regions
        wiring.connect(m, v.src, r.src)
        wiring.connect(m, v.dst, r.dst)
        init = [int.from_bytes(d.pack(), "little") for d in self.descriptors]
        win = m.submodules.window = memory.Memory(shape=256, depth=self.p.slots, init=init)
        rp = win.read_port()
        m.d.comb += [rp.en.eq(v.win.en), rp.addr.eq(v.win.slot), v.win.desc.eq(rp.data),
                     v.win.drain.eq((rp.data[192:208] & (Flag.FENCE | Flag.IMM)) != 0)]
        return m


def test_validator_agrees_with_reference_checks():
    p = SMALL
    rng = random.Random(11)
    regions = random_regions(rng, p.num_regions)
    rounds = 12
    batches = [[random_descriptor(rng, regions) for _ in range(p.slots)] for _ in range(rounds)]
    got: list[tuple[int, JobKind, int, int, int]] = []

    for batch in batches:
        dut = _ValidatorBench(p, batch)
        v = dut.validator

        async def bench(ctx, v=v, dut=dut):
            for rid, r in enumerate(regions):
                if r is not None:
                    await program_region(ctx, dut.regions, rid, r.addr, r.size, int(r.perms))
            ctx.set(v.inflight_zero, (1 << p.num_queues) - 1)
            sent = 0
            seen = 0
            for _ in range(20 * p.slots):
                if seen == p.slots:
                    break
                ctx.set(v.pick.valid, sent < p.slots)
                ctx.set(v.pick.payload.index, sent)
                # queues in turn: with no queue table here a failure stops nothing, but the validator itself drops
                # the next descriptor of the failing queue (test_validator_drops_behind_its_own_stop)
                ctx.set(v.pick.payload.queue, sent % p.num_queues)
                ready = rng.random() < 0.7  # backpressure from the job queue
                ctx.set(v.job.ready, ready)
                if ready and ctx.get(v.job.valid):
                    j = v.job.payload
                    got.append((ctx.get(j.index), ctx.get(j.kind), ctx.get(j.code), ctx.get(j.src_addr),
                                ctx.get(j.dst_addr)))
                    seen += 1
                if sent < p.slots and ctx.get(v.pick.ready):
                    sent += 1
                await ctx.tick()
            assert seen == p.slots, f"the validator returned {seen} of {p.slots} jobs"

        simulate(dut, bench)

    assert len(got) == rounds * p.slots
    codes = set()
    for k, (index, kind, code, src_addr, dst_addr) in enumerate(got):
        d = batches[k // p.slots][k % p.slots]
        assert index == k % p.slots, "jobs must leave in pick order"
        want = validate(d, regions)
        codes.add(want)
        assert ErrorCode(code) == want, f"{d}: engine says {ErrorCode(code).name}, reference {want.name}"
        if want != ErrorCode.NONE:
            assert kind == JobKind.ERROR
        elif d.flags & Flag.IMM:
            assert kind == JobKind.IMM and src_addr == d.src_offset
        else:
            assert kind == JobKind.COPY
            assert src_addr == (regions[d.src_region].addr + d.src_offset) % (1 << 64)
        if want == ErrorCode.NONE:
            assert dst_addr == (regions[d.dst_region].addr + d.dst_offset) % (1 << 64)
    assert len(codes) >= 6, f"the random descriptors reached only {sorted(c.name for c in codes)}"


@pytest.mark.parametrize("gap", [0, 1, 2, 3])
def test_validator_drops_behind_its_own_stop(gap):
    """A failure's stop reaches the queue table from a register, a cycle after the failing job: the next
    descriptor of that queue, leaving the validator in that cycle, must be dropped by the validator itself. Here no
    queue table answers the stop, so what follows a cycle or more later runs (the table would drop it); `gap`
    picks of the other queue come between the two."""
    p = SMALL
    regions = [Region(0x1000, 0x1000, Perm.READ | Perm.WRITE)] + [None] * (p.num_regions - 1)
    good = Descriptor(src_offset=0, dst_offset=0x800, length=64, src_region=0, dst_region=0)
    bad = Descriptor(src_offset=0, dst_offset=0x800, length=64, src_region=0, dst_region=5)  # not registered
    picks = [(0, bad)] + [(1, good)] * gap + [(0, good)]
    dut = _ValidatorBench(p, [d for _, d in picks] + [good] * (p.slots - len(picks)))
    v = dut.validator
    got = []

    async def bench(ctx):
        await program_region(ctx, dut.regions, 0, 0x1000, 0x1000, int(Perm.READ | Perm.WRITE))
        ctx.set(v.inflight_zero, (1 << p.num_queues) - 1)
        ctx.set(v.job.ready, 1)
        sent = 0
        for _ in range(40):
            ctx.set(v.pick.valid, sent < len(picks))
            if sent < len(picks):
                ctx.set(v.pick.payload.queue, picks[sent][0])
                ctx.set(v.pick.payload.index, sent)
            if ctx.get(v.job.valid):
                got.append((ctx.get(v.job.payload.queue), ctx.get(v.job.payload.kind)))
            if sent < len(picks) and ctx.get(v.pick.ready):
                sent += 1
            await ctx.tick()

    simulate(dut, bench)
    assert validate(bad, regions) == ErrorCode.UNKNOWN_REGION
    want = [(0, JobKind.ERROR)] + [(1, JobKind.COPY)] * gap + [(0, JobKind.DROP if gap == 0 else JobKind.COPY)]
    assert got == want


@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_window_drain_bit_follows_the_flags_written(data_width):
    """The window keeps, beside its block RAM, a bit per slot saying FENCE or IMM; the validator's squash reads that
    bit, so it must match the flags of the descriptor read, after any mix of partial writes (byte strobes), and in a
    cycle that reads a slot while it is written (both give the old value)."""
    from driver.abi import DESCRIPTOR_BYTES, WINDOW_BASE
    from rtl.windows import SubmissionWindows

    nq, slots, dwb = 2, 8, data_width // 8
    dut = SubmissionWindows(num_queues=nq, slots=slots, data_width=data_width, id_width=2)
    a, rd = dut.axi, dut.rd
    rng = random.Random(data_width)
    model = bytearray(nq * slots * DESCRIPTOR_BYTES)
    flags_at = 24  # the flags' low byte in a descriptor
    checked = set()

    async def bench(ctx):
        ctx.set(a.bready, 1)
        for _ in range(300):
            beat_at = rng.randrange(len(model) // dwb) * dwb
            data = bytearray(rng.randbytes(dwb))
            for b in range(dwb):  # make FENCE and IMM frequent in flags bytes
                if (beat_at + b) % DESCRIPTOR_BYTES == flags_at:
                    data[b] = rng.choice([0, Flag.NOTIFY, Flag.FENCE, Flag.IMM, Flag.FENCE | Flag.NOTIFY])
            strb = rng.randrange(1 << dwb) if rng.random() < 0.7 else (1 << dwb) - 1
            ctx.set(a.awvalid, 1)
            ctx.set(a.awaddr, WINDOW_BASE + beat_at)
            ctx.set(a.awsize, (dwb - 1).bit_length())
            ctx.set(a.awlen, 0)
            await ctx.tick()
            ctx.set(a.awvalid, 0)
            ctx.set(a.wvalid, 1)
            ctx.set(a.wdata, int.from_bytes(data, "little"))
            ctx.set(a.wstrb, strb)
            ctx.set(a.wlast, 1)
            # read a slot in the cycle of the write: the old descriptor and the old bit
            slot = rng.randrange(nq * slots)
            ctx.set(rd.en, 1)
            ctx.set(rd.queue, slot // slots)
            ctx.set(rd.slot, slot % slots)
            old = bytes(model[slot * DESCRIPTOR_BYTES:(slot + 1) * DESCRIPTOR_BYTES])
            assert ctx.get(a.wready)
            await ctx.tick()
            ctx.set(a.wvalid, 0)
            ctx.set(rd.en, 0)
            assert ctx.get(rd.desc.as_value()) == int.from_bytes(old, "little"), f"slot {slot}"
            assert ctx.get(rd.drain) == bool(old[flags_at] & (Flag.FENCE | Flag.IMM)), f"slot {slot}: {old[flags_at]}"
            checked.add(bool(old[flags_at] & (Flag.FENCE | Flag.IMM)))
            for b in range(dwb):
                if strb >> b & 1:
                    model[beat_at + b] = data[b]

    simulate(dut, bench)
    assert checked == {False, True}


@pytest.mark.parametrize("w_with_aw", [True, False])
def test_write_mux_keeps_address_order_for_data_and_responses(w_with_aw):
    """Data bursts and completion-word writes share one channel: W beats follow their AW in order and
    each response returns to the writer whose address was taken at that position, so a completion
    word issued after a burst's response is answered after it (with a burst's first beat in its address's
    cycle or from the cycle after)."""
    p = SMALL
    dut = WriteMux(data_width=p.data_width, id_width=p.read_id_width, writes_outstanding=p.writes_outstanding,
                   w_with_aw=w_with_aw)
    rng = random.Random(5)
    data_bursts = [(0x1000 * (i + 1), rng.randrange(4)) for i in range(40)]  # (address, awlen)
    cw_writes = [0x8000_0000 + 8 * i for i in range(25)]

    async def bench(ctx):
        d, c = dut.data, dut.cw
        d_aw = list(data_bursts)
        d_w = [(a, k, k == n) for a, n in data_bursts for k in range(n + 1)]  # beats tagged by burst address
        c_aw, c_w = list(cw_writes), list(cw_writes)
        bus_aw: list[tuple[int, int]] = []
        bus_w: list[tuple[int, bool]] = []
        pending_b: list[int] = []  # bursts whose last beat went out, awaiting their response
        b_to: list[tuple[str, int]] = []
        responses = 0
        for _ in range(5000):
            if responses == len(data_bursts) + len(cw_writes):
                break
            ctx.set(d.aw.valid, bool(d_aw))
            if d_aw:
                ctx.set(d.aw.payload.addr, d_aw[0][0])
                ctx.set(d.aw.payload.len, d_aw[0][1])
            ctx.set(d.w.valid, bool(d_w) and rng.random() < 0.8)
            if d_w:
                ctx.set(d.w.payload.data, d_w[0][0] << 8 | d_w[0][1])
                ctx.set(d.w.payload.last, d_w[0][2])
            ctx.set(c.aw.valid, bool(c_aw) and rng.random() < 0.3)
            if c_aw:
                ctx.set(c.aw.payload.addr, c_aw[0])
            ctx.set(c.w.valid, bool(c_w))
            if c_w:
                ctx.set(c.w.payload.data, c_w[0] << 8)
                ctx.set(c.w.payload.last, 1)
            ctx.set(d.b.ready, rng.random() < 0.8)
            ctx.set(c.b.ready, 1)
            ctx.set(dut.mem.awready, rng.random() < 0.6)
            ctx.set(dut.mem.wready, rng.random() < 0.7)
            b_now = bool(pending_b) and rng.random() < 0.5
            ctx.set(dut.mem.bvalid, b_now)
            ctx.set(dut.mem.bresp, 0)

            if ctx.get(dut.mem.awvalid) and ctx.get(dut.mem.awready):
                bus_aw.append((ctx.get(dut.mem.awaddr), ctx.get(dut.mem.awlen)))
            if ctx.get(dut.mem.wvalid) and ctx.get(dut.mem.wready):
                bus_w.append((ctx.get(dut.mem.wdata), bool(ctx.get(dut.mem.wlast))))
                if bus_w[-1][1]:
                    pending_b.append(len(pending_b) + responses)
            if b_now and ctx.get(dut.mem.bready):
                pending_b.pop(0)
                responses += 1
                b_to.append(("cw" if ctx.get(c.b.valid) else "data" if ctx.get(d.b.valid) else "none", responses))
            if d_aw and ctx.get(d.aw.ready):
                d_aw.pop(0)
            if d_w and ctx.get(d.w.valid) and ctx.get(d.w.ready):
                d_w.pop(0)
            if c_aw and ctx.get(c.aw.valid) and ctx.get(c.aw.ready):
                c_aw.pop(0)
            if c_w and ctx.get(c.w.valid) and ctx.get(c.w.ready):
                c_w.pop(0)
            await ctx.tick()

        assert responses == len(data_bursts) + len(cw_writes), "not every write was answered"
        # W beats follow the address order, each burst's beats together
        beats = iter(bus_w)
        for addr, n in bus_aw:
            for k in range(n + 1):
                data, last = next(beats)
                assert data >> 8 == addr and (addr >= 0x8000_0000 or data & 0xFF == k), f"beat {k} of {addr:#x}"
                assert last == (k == n)
        # responses go back to the writer of the address at that position
        assert [("cw" if a >= 0x8000_0000 else "data") for a, _ in bus_aw] == [who for who, _ in b_to]
        assert [a for a, _ in bus_aw if a < 0x8000_0000] == [a for a, _ in data_bursts]
        assert [a for a, _ in bus_aw if a >= 0x8000_0000] == cw_writes

    simulate(dut, bench)
