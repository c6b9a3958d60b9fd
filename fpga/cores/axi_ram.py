"""AxiRam: on-chip block RAM behind an AXI4 slave (the engine's "host memory" on a board), with a 32-bit side port."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In

from driver.abi import Resp
from rtl.register_bus import RegisterBusSignature
from rtl.axi import axi_signature


class AxiRam(wiring.Component):
    """`size_bytes` of RAM at bus addresses 0 .. size_bytes-1; an access beyond answers DECERR (reads return
    zeros) and writes nothing. One read burst and one write burst at a time, a beat a cycle each way;
    INCR bursts of any size (FIXED and WRAP are treated as INCR).

    The side port (the bring-up bridge) reads through its own read port (yosys keeps a second copy of
    the RAM for it) and writes through the shared write port, taking it from the AXI W channel for one
    cycle (wready low), so neither side can starve the other."""

    def __init__(self, size_bytes: int, data_width: int, addr_width: int, id_width: int):
        if data_width not in (32, 64, 128, 256, 512):
            raise ValueError(f"data_width must be 32, 64, 128, 256 or 512, not {data_width}")
        if size_bytes < 4096 or size_bytes & (size_bytes - 1):
            raise ValueError(f"size_bytes must be a power of two of at least 4096, not {size_bytes}")
        if size_bytes > 1 << addr_width:
            raise ValueError(f"{size_bytes} bytes do not fit {addr_width}-bit addresses")
        self.size_bytes, self.data_width, self.addr_width, self.id_width = size_bytes, data_width, addr_width, id_width
        super().__init__({
            "axi": In(axi_signature(addr_width, data_width, id_width)),
            "side": In(RegisterBusSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        a, side = self.axi, self.side
        dbytes = self.data_width // 8
        lane_bits = (dbytes - 1).bit_length()
        depth = self.size_bytes // dbytes
        mem = m.submodules.mem = memory.Memory(shape=self.data_width, depth=depth, init=[])
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()
        sp = mem.read_port()

        def inside(addr):
            return addr < self.size_bytes

        def next_addr(addr, size):
            return (addr & ~((Const(1, 8) << size) - 1)) + (Const(1, 8) << size)

        # --- reads: one burst at a time; a beat is read the cycle before it is offered --------------
        r_busy, r_addr, r_size, r_left = Signal(), Signal(self.addr_width), Signal(3), Signal(9)
        issue = Signal()
        m.d.comb += [
            a.arready.eq(~r_busy),
            issue.eq(r_busy & (r_left != 0) & (~a.rvalid | a.rready)),
            rp.addr.eq(r_addr >> lane_bits),
            rp.en.eq(issue),
            a.rdata.eq(rp.data),
        ]
        beat_bad = Signal()
        with m.If(a.arvalid & a.arready):
            m.d.sync += [r_busy.eq(1), r_addr.eq(a.araddr), r_size.eq(a.arsize), r_left.eq(a.arlen + 1),
                         a.rid.eq(a.arid)]
        with m.If(issue):
            m.d.sync += [a.rvalid.eq(1), a.rlast.eq(r_left == 1), r_left.eq(r_left - 1),
                         r_addr.eq(next_addr(r_addr, r_size)), beat_bad.eq(~inside(r_addr))]
        with m.Elif(a.rready):
            m.d.sync += a.rvalid.eq(0)
            with m.If(a.rvalid & a.rlast):
                m.d.sync += r_busy.eq(0)
        m.d.comb += a.rresp.eq(Mux(beat_bad, Resp.DECERR, Resp.OKAY))
        with m.If(beat_bad):
            m.d.comb += a.rdata.eq(0)

        # --- writes: one burst at a time, response after its last beat ------------------------------
        w_busy, w_addr, w_size, w_bad = Signal(), Signal(self.addr_width), Signal(3), Signal()
        side_write, side_pending = Signal(), Signal()
        m.d.comb += [
            side_write.eq(side.valid & side.write & ~side.ready & ~side_pending),
            a.awready.eq(~w_busy),
            a.wready.eq(w_busy & ~a.bvalid & ~side_write),
        ]
        with m.If(a.awvalid & a.awready):
            m.d.sync += [w_busy.eq(1), w_addr.eq(a.awaddr), w_size.eq(a.awsize), w_bad.eq(0), a.bid.eq(a.awid)]
        w_beat = Signal()
        m.d.comb += w_beat.eq(a.wvalid & a.wready)
        with m.If(w_beat):
            m.d.sync += [w_addr.eq(next_addr(w_addr, w_size)), w_bad.eq(w_bad | ~inside(w_addr))]
            with m.If(a.wlast):
                m.d.sync += a.bvalid.eq(1)
        with m.If(a.bvalid & a.bready):
            m.d.sync += [a.bvalid.eq(0), w_busy.eq(0)]
        m.d.comb += a.bresp.eq(Mux(w_bad, Resp.DECERR, Resp.OKAY))

        # --- the shared write port and the side port ------------------------------------------------
        side_lane = side.addr[2:lane_bits] if lane_bits > 2 else Const(0, 1)
        side_inside = inside(side.addr) & (side.addr[:2] == 0)
        with m.If(side_write):
            m.d.comb += [wp.addr.eq(side.addr >> lane_bits), wp.data.eq(Cat(*([side.wdata] * (dbytes // 4)))),
                         wp.en.eq(Mux(side_inside, side.strb << (side_lane * 4), 0))]
        with m.Else():
            m.d.comb += [wp.addr.eq(w_addr >> lane_bits), wp.data.eq(a.wdata),
                         wp.en.eq(Mux(w_beat & inside(w_addr), a.wstrb, 0))]

        # side accesses take two cycles: the request (the read port samples), then the answer
        side_lane_q = Signal.like(side_lane)
        m.d.comb += [sp.addr.eq(side.addr >> lane_bits), sp.en.eq(side.valid & ~side_pending)]
        m.d.sync += [side.ready.eq(0), side_pending.eq(0)]
        with m.If(side.valid & ~side.ready & ~side_pending):
            m.d.sync += [side_pending.eq(1), side_lane_q.eq(side_lane),
                         side.resp.eq(Mux(side_inside, Resp.OKAY, Resp.DECERR))]
        with m.If(side_pending):
            m.d.sync += side.ready.eq(1)
        m.d.comb += side.rdata.eq(Mux(side.resp == Resp.OKAY, sp.data.word_select(side_lane_q, 32), 0))
        return m
