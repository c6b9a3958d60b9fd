"""PcieCompleter's window path in amaranth.sim, against a bytearray model: memory writes that start in the window
reach the AXI4 port a CQ beat a cycle, in their lanes with their byte enables; TLPs cut short, longer than their
count, one DWORD, straddling rows; a register write after window writes reaches the bus only once they are in.
At 256 bits (the board's streams) and 512 (the 512-bit card's: rows of 16 DWORDs, byte enables at tuser [11:8])."""

from __future__ import annotations

import random

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator

from rtl.pcie_completer import PcieCompleter, ReqType, WindowPort
from rtl.pcie_streams import WIDTHS, layout

BASE, END = 0x1000, 0x1400  # the window's BAR offsets
APERTURE = 13  # an 8 KiB BAR
GUARD = 0xA5


def _beats(addr: int, kind: int, count: int, payload: list[int], first_be: int, last_be: int,
           width: int = 256) -> list[tuple[int, int, int, int]]:
    """(tdata, tkeep, tlast, tuser) of one CQ request: the 4-DWORD descriptor, then `payload` (which may be shorter
    or longer than `count`, as a hostile requester sends it)."""
    header = [addr & 0xFFFFFFFC, 0, count & 0x7FF | kind << 11 | 0x1234 << 16, 7 | APERTURE << 19]
    dws = header + payload
    beats = []
    lay = layout(width)
    for at in range(0, len(dws), lay.dwords):
        row = dws[at:at + lay.dwords]
        data = sum(dw << 32 * i for i, dw in enumerate(row))
        keep = (1 << len(row)) - 1
        beats.append([data, keep, 0, first_be | last_be << lay.cq_last_be])
    beats[-1][2] = 1
    return [tuple(b) for b in beats]


def _apply(mem: bytearray, addr: int, count: int, payload: list[int], first_be: int, last_be: int) -> None:
    """What the window should hold after the write: DWORD k at addr + 4k, its enabled bytes, for the DWORDs that came."""
    for k, dw in enumerate(payload[:count]):
        be = first_be if k == 0 else (last_be if k == count - 1 else 0xF)
        for b in range(4):
            if be >> b & 1:
                mem[(addr & ~3) - BASE + 4 * k + b] = dw >> 8 * b & 0xFF


def _requests(rng: random.Random) -> list[dict]:
    """Fixed cases first, then random ones; a register write (the doorbell's place) now and then."""
    out = []

    def write(addr, count, first_be=0xF, last_be=0xF, sent=None, extra=0):
        sent = count if sent is None else sent
        payload = [rng.getrandbits(32) for _ in range(sent + extra)]
        out.append(dict(addr=addr, count=count, payload=payload, first_be=first_be, last_be=last_be if count > 1 else 0))

    write(BASE, 4)  # a GPU's 16-byte store, lane 0
    write(BASE + 16, 4)  # and lane 4
    write(BASE + 32, 32)  # 128 bytes, 4 descriptors from a row's start
    write(BASE + 0xD4, 32)  # 128 bytes from lane 5: five rows
    write(BASE + 0x140, 8, 0b1000, 0b0001)  # one descriptor, a byte at each end
    write(BASE + 0x168, 13, 0b1110, 0b0111)  # straddling two slots from lane 2
    write(BASE + 0x200, 1, 0b0110)  # one DWORD, two bytes
    write(BASE + 0x224, 16, sent=3)  # cut short: 3 of 16 DWORDs come
    write(BASE + 0x260, 4, extra=9)  # longer than its count: the rest is dropped
    out.append(dict(addr=0x40, count=1, payload=[0xD00B], first_be=0xF, last_be=0, register=True))
    for _ in range(60):
        if rng.random() < 0.15:
            out.append(dict(addr=0x40 + 4 * rng.randrange(8), count=1, payload=[rng.getrandbits(32)], first_be=0xF,
                            last_be=0, register=True))
            continue
        count = rng.randint(1, 40)
        addr = BASE + 4 * rng.randrange((END - BASE) // 4 - count)
        write(addr, count, rng.randint(1, 15), rng.randint(1, 15))
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", [1, 2])
def test_window_writes_land_in_their_lanes_and_the_register_write_waits(seed, width):
    rng = random.Random(seed)
    dut = PcieCompleter(WindowPort(BASE, END, 13, 4, width), width)
    row_bytes, dwords = width // 8, width // 32
    cq, win, bus = dut.cq, dut.win, dut.bus
    requests = _requests(rng)
    mem = bytearray([GUARD]) * (END - BASE)
    want = bytearray(mem)
    seen_registers: list[tuple[int, int, bool]] = []  # (addr, data, window as wanted so far when it came)
    bursts: list[tuple[int, int, int]] = []  # (address, beats announced, beats that came)
    stamps: list[int] = []  # cycle of each window request's first beat taken
    state = {"cycle": 0, "done": False, "want_now": bytes(want)}

    async def requester(ctx):
        for r in requests:
            kind = ReqType.MEM_WRITE.value
            beats = _beats(r["addr"], kind, r["count"], r["payload"], r["first_be"], r["last_be"], width)
            for i, (data, keep, last, user) in enumerate(beats):
                if rng.random() < 0.2:
                    ctx.set(cq.tvalid, 0)
                    await ctx.tick().repeat(rng.randint(1, 3))
                ctx.set(cq.tdata, data)
                ctx.set(cq.tkeep, keep)
                ctx.set(cq.tlast, last)
                ctx.set(cq.tuser, user)
                ctx.set(cq.tvalid, 1)
                await ctx.tick().until(cq.tready)
                if i == 0 and not r.get("register"):
                    stamps.append(state["cycle"])
            ctx.set(cq.tvalid, 0)
            if not r.get("register"):
                _apply(want, r["addr"], r["count"], r["payload"], r["first_be"], r["last_be"])
            state["want_now"] = bytes(want)
        await ctx.tick().repeat(200)
        state["done"] = True

    async def window(ctx):
        queue, b_due = [], 0
        while not state["done"]:
            ctx.set(win.awready, rng.random() < 0.8)
            ctx.set(win.wready, bool(queue) and rng.random() < 0.8)
            ctx.set(win.bvalid, b_due > 0)
            (_, _, awvalid, awready, awaddr, awlen, awsize, wvalid, wready, wdata, wstrb, wlast,
             bvalid, bready) = await ctx.tick().sample(
                win.awvalid, win.awready, win.awaddr, win.awlen, win.awsize, win.wvalid, win.wready, win.wdata,
                win.wstrb, win.wlast, win.bvalid, win.bready)
            state["cycle"] += 1
            if bvalid and bready:
                b_due -= 1
            if wvalid and wready:
                burst = queue[0]
                row = burst[0] + row_bytes * burst[2]
                for b in range(row_bytes):
                    if wstrb >> b & 1:
                        mem[row - BASE + b] = wdata >> 8 * b & 0xFF
                burst[2] += 1
                assert wlast == (burst[2] == burst[1]), f"wlast wrong in the burst at {burst[0]:#x}"
                if wlast:
                    bursts.append(tuple(queue.pop(0)))
                    b_due += 1
            if awvalid and awready:
                assert 1 << awsize == row_bytes and awaddr % row_bytes == 0
                queue.append([awaddr, awlen + 1, 0])

    async def registers(ctx):
        answered = False
        while not state["done"]:
            _, _, valid, write, addr, data = await ctx.tick().sample(bus.valid, bus.write, bus.addr, bus.wdata)
            if valid and not answered:
                assert write
                seen_registers.append((addr, data, bytes(mem) == state["want_now"]))
                ctx.set(bus.ready, 1)
                answered = True
            else:
                ctx.set(bus.ready, 0)
                answered = False

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(requester)
    sim.add_testbench(window, background=True)
    sim.add_testbench(registers, background=True)
    sim.run()

    assert mem == want, f"the window differs from the model first at byte {next(i for i in range(len(mem)) if mem[i] != want[i])}"
    wanted_regs = [(r["addr"], r["payload"][0]) for r in requests if r.get("register")]
    assert [(a, d) for a, d, _ in seen_registers] == wanted_regs
    # each register write came after the window writes before it were in place
    assert all(in_place for _, _, in_place in seen_registers)
    assert len(bursts) == sum(1 for r in requests if not r.get("register"))
    for r, (addr, beats, came) in zip([r for r in requests if not r.get("register")], bursts):
        lane = (r["addr"] - BASE) // 4 % dwords
        assert addr == r["addr"] & -row_bytes and beats == came == (lane + r["count"] - 1) // dwords + 1


@pytest.mark.parametrize("width", WIDTHS)
def test_back_to_back_window_writes_take_a_cq_beat_a_cycle(width):
    """Four 128-byte writes (5 CQ beats each at 256 bits, 3 at 512) with the window always ready: a beat a cycle,
    where the register bus took 5 cycles a DWORD (170 a write)."""
    dut = PcieCompleter(WindowPort(BASE, END, 13, 4, width), width)
    per_write = -(-36 // (width // 32))
    cq, win = dut.cq, dut.win
    taken = []

    async def bench(ctx):
        ctx.set(win.awready, 1)
        ctx.set(win.wready, 1)
        ctx.set(win.bvalid, 0)
        cycle = 0
        for n in range(4):
            for data, keep, last, user in _beats(BASE + 128 * n, ReqType.MEM_WRITE.value, 32, list(range(32)), 0xF, 0xF,
                                                 width):
                ctx.set(cq.tdata, data)
                ctx.set(cq.tkeep, keep)
                ctx.set(cq.tlast, last)
                ctx.set(cq.tuser, user)
                ctx.set(cq.tvalid, 1)
                while True:
                    _, _, ready = await ctx.tick().sample(cq.tready)
                    cycle += 1
                    if ready:
                        taken.append(cycle)
                        break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(taken) == 4 * per_write and taken[-1] - taken[0] <= 4 * per_write, taken
