"""PcieCompleter: the completer side of the Xilinx UltraScale+ PCIe block (its CQ and CC AXI streams, 256 or 512
bits, DWORD-aligned, no straddling) in front of a register bus: memory writes to the BAR become one bus
write per DWORD (with its byte enables), memory reads of up to 8 DWORDs become bus reads answered by one
completion. Anything else that wants an answer (I/O, atomics, longer reads) is answered Unsupported Request;
messages are dropped. A bus error answers Completer Abort.

With `window` (a WindowPort), memory writes that start inside the submission windows bypass the register bus:
each CQ beat becomes one beat of an AXI4 write burst on `win` (as wide as the stream, the payload rotated into its
lanes, the TLP's byte enables and tkeep as strobes), so a 128-byte TLP of four descriptors takes its 5 CQ beats
instead of 5 cycles per DWORD through the bus. A burst is announced (AW) with the rows the DWORD count spans;
a TLP that ends early fills them with beats of no strobes, one longer than its count has the rest dropped.
Every other request (a doorbell, a read) waits until the window's write responses for the bursts before it have
come back, so it reaches the engine after the descriptors it follows, as PCIe orders posted writes.

CQ descriptor (first 4 DWORDs of a request): address [63:2] in DW0-1, DWORD count [10:0] and request type
[14:11] in DW2 with the requester ID in [31:16], tag [7:0], BAR aperture [24:19], TC [27:25] and attributes
[30:28] in DW3; first and last byte enables in tuser [3:0] and [7:4] ([11:8] at 512 bits). CC descriptor (3
DWORDs): lower address, byte count; DWORD count, status, requester ID; tag, TC, attributes. At 512 bits a
completion is one beat, marked in tuser by is_sop and is_eop (rtl/pcie_streams.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import Burst, axi_signature
from rtl.pcie_streams import CC512_EOP_PTR, CC512_IS_EOP, CC512_IS_SOP, axis_signature, layout
from rtl.register_bus import RegisterBusSignature

WIDTH = 256  # the board's interface (Gen3 x8); 512 where the card is built for Gen3 x16 or Gen4 x8
DWORDS = WIDTH // 32
MAX_READ_DWORDS = 8
CQ_USER_BITS = layout(WIDTH).cq_user_bits
CC_USER_BITS = layout(WIDTH).cc_user_bits
WINDOW_BURSTS_OUT = 7  # window bursts announced whose write response has not come back


@dataclass(frozen=True)
class WindowPort:
    """BAR offsets [base, end) written straight into an AXI4 slave as wide as the CQ stream (the engine's
    submission windows), and that slave's address and ID widths."""
    base: int
    end: int
    addr_width: int
    id_width: int
    width: int = WIDTH

    def __post_init__(self):
        beat = layout(self.width).width // 8
        if self.base % beat or not 0 <= self.base < self.end <= 1 << self.addr_width:
            raise ValueError(f"the window path wants {beat}-byte aligned offsets in the port's {self.addr_width}-bit "
                             f"space, not [{self.base:#x}, {self.end:#x})")


class ReqType(enum.Enum, shape=4):
    MEM_READ = 0
    MEM_WRITE = 1
    IO_READ = 2
    IO_WRITE = 3
    FETCH_ADD = 4
    SWAP = 5
    CAS = 6
    LOCKED_READ = 7


class CplStatus(enum.Enum, shape=3):
    SC = 0  # successful completion
    UR = 1  # unsupported request
    CA = 4  # completer abort


def _lead(be: Signal) -> Signal:
    """Bytes below the first enabled one of a 4-bit byte enable (0 when none is)."""
    return Mux(be[0] | (be == 0), 0, Mux(be[1], 1, Mux(be[2], 2, 3)))


def _trail(be: Signal) -> Signal:
    """Bytes above the last enabled one."""
    return Mux(be[3] | (be == 0), 0, Mux(be[2], 1, Mux(be[1], 2, 3)))


class PcieCompleter(wiring.Component):
    def __init__(self, window: WindowPort | None = None, width: int = WIDTH):
        self.layout = lay = layout(width)
        if window is not None and window.width != width:
            raise ValueError(f"the window port is {window.width}-bit, the CQ stream {width}-bit: they must match")
        self.window = window
        members = {
            "cq": In(axis_signature(width, lay.cq_user_bits)),
            "cc": Out(axis_signature(width, lay.cc_user_bits)),
            "bus": Out(RegisterBusSignature()),
        }
        if window is not None:
            members["win"] = Out(axi_signature(window.addr_width, width, window.id_width))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cq, cc, bus = self.cq, self.cc, self.bus
        lay = self.layout
        dwords, lb = lay.dwords, (lay.dwords - 1).bit_length()
        d = [cq.tdata[32 * i: 32 * i + 32] for i in range(dwords)]
        cq_last_be = cq.tuser[lay.cq_last_be:lay.cq_last_be + 4]

        addr = Signal(32)
        count = Signal(11)  # DWORDs of the request
        left = Signal(11)  # DWORDs still to write or read
        req_id, tag = Signal(16), Signal(8)
        tc, attr = Signal(3), Signal(3)
        first_be, last_be = Signal(4), Signal(4)
        low_addr = Signal(7)
        beat, keep, last_beat = Signal(lay.width), Signal(dwords), Signal()
        idx = Signal(range(dwords + 1))
        first_dw = Signal()
        status = Signal(CplStatus)
        rdata = Array(Signal(32, name=f"rdata{i}") for i in range(MAX_READ_DWORDS))
        got = Signal(range(MAX_READ_DWORDS + 1))

        aperture = Signal(6)
        mask = Signal(64)
        m.d.comb += [aperture.eq(d[3][19:25]), mask.eq((Const(1, 65) << aperture) - 1)]
        req_addr = Signal(32)  # the request's BAR offset
        m.d.comb += req_addr.eq((Cat(Const(0, 2), d[0][2:], d[1]) & mask)[:32])
        in_idle = Signal()  # the FSM waits for a request's first beat
        to_window, window_ready, bus_ready = self._window_path(m, req_addr, in_idle)

        byte_count = Signal(13)
        with m.If(count == 1):
            m.d.comb += byte_count.eq(Mux(first_be == 0, 1, 4 - _lead(first_be) - _trail(first_be)))
        with m.Else():
            m.d.comb += byte_count.eq((count << 2) - _lead(first_be) - _trail(last_be))

        # completion header, then the data from DWORD 3 of the first beat
        header = Cat(low_addr, Const(0, 9), byte_count, Const(0, 3),  # DW0
                     Mux(status == CplStatus.SC, count, 0), status, Const(0, 2), req_id,  # DW1 (poisoned 0)
                     tag, Const(0, 16), Const(0, 1), tc, attr, Const(0, 1))  # DW2
        cpl_beat = Signal()  # 0: the first completion beat, 1: the second
        data_dws = Mux(status == CplStatus.SC, count, 0)
        m.d.comb += [bus.addr.eq(addr), bus.wdata.eq(beat.word_select(idx[:lb], 32))]

        with m.FSM():
            with m.State("IDLE"):
                # a window write goes its own way when that is free; anything else once the window's writes are in
                m.d.comb += [in_idle.eq(1), cq.tready.eq(Mux(to_window, window_ready, bus_ready))]
                with m.If(cq.tvalid & ~to_window & bus_ready):
                    kind = d[2][11:15]
                    # a write's first DWORD goes on the bus now (WRITE then holds the same access until it is done)
                    with m.If((kind == ReqType.MEM_WRITE) & (d[2][:11] != 0) & cq.tkeep[4] & (cq.tuser[:4] != 0)):
                        m.d.comb += [bus.valid.eq(1), bus.write.eq(1), bus.addr.eq(req_addr), bus.wdata.eq(d[4]),
                                     bus.strb.eq(cq.tuser[:4])]
                    m.d.sync += [
                        addr.eq(req_addr),
                        low_addr.eq(Cat(_lead(cq.tuser[:4])[:2], d[0][2:7])),
                        count.eq(d[2][:11]), left.eq(d[2][:11]),
                        req_id.eq(d[2][16:32]), tag.eq(d[3][:8]), tc.eq(d[3][25:28]), attr.eq(d[3][28:31]),
                        first_be.eq(cq.tuser[:4]), last_be.eq(cq_last_be),
                        beat.eq(cq.tdata), keep.eq(cq.tkeep), last_beat.eq(cq.tlast), idx.eq(4), first_dw.eq(1),
                        status.eq(CplStatus.SC), got.eq(0), cpl_beat.eq(0),
                    ]
                    with m.If(kind == ReqType.MEM_WRITE):
                        m.next = "WRITE"
                    with m.Elif((kind == ReqType.MEM_READ) & cq.tlast & (d[2][:11] <= MAX_READ_DWORDS)
                                & (d[2][:11] != 0)):
                        m.next = "READ"
                    with m.Elif(kind <= ReqType.LOCKED_READ):  # non-posted and not ours: Unsupported Request
                        m.d.sync += status.eq(CplStatus.UR)
                        m.next = "UR"
                    with m.Else():  # messages: nothing to answer
                        with m.If(~cq.tlast):
                            m.next = "DRAIN"
                with m.If(cq.tvalid & to_window & window_ready & ~cq.tlast):
                    m.next = "WINDOW"

            with m.State("WINDOW"):  # the window burst's further beats (the path below takes them)
                m.d.comb += cq.tready.eq(window_ready)
                with m.If(cq.tvalid & window_ready & cq.tlast):
                    m.next = "IDLE"

            with m.State("UR"):
                with m.If(last_beat):
                    m.next = "COMPLETE"
                with m.Else():
                    m.next = "DRAIN_THEN_COMPLETE"

            with m.State("WRITE"):
                dw_be = Mux(first_dw, first_be, Mux(left == 1, last_be, 0xF))
                with m.If(left == 0):
                    m.next = "IDLE"
                    with m.If(~last_beat):
                        m.next = "DRAIN"
                with m.Elif((idx == dwords) | ~keep.bit_select(idx[:lb], 1)):
                    with m.If(last_beat):
                        m.next = "IDLE"  # the TLP ended before its DWORD count: what came is written
                    with m.Else():
                        m.next = "NEXT"
                with m.Elif(dw_be == 0):
                    m.d.sync += [idx.eq(idx + 1), left.eq(left - 1), addr.eq(addr + 4), first_dw.eq(0)]
                with m.Else():
                    m.d.comb += [bus.valid.eq(1), bus.write.eq(1), bus.strb.eq(dw_be)]
                    with m.If(bus.ready):
                        m.d.sync += [idx.eq(idx + 1), left.eq(left - 1), addr.eq(addr + 4), first_dw.eq(0)]

            with m.State("NEXT"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid):
                    m.d.sync += [beat.eq(cq.tdata), keep.eq(cq.tkeep), last_beat.eq(cq.tlast), idx.eq(0)]
                    m.next = "WRITE"

            with m.State("DRAIN"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid & cq.tlast):
                    m.next = "IDLE"

            with m.State("DRAIN_THEN_COMPLETE"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid & cq.tlast):
                    m.next = "COMPLETE"

            with m.State("READ"):
                with m.If(left == 0):
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [bus.valid.eq(1), bus.write.eq(0)]
                    with m.If(bus.ready):
                        m.d.sync += [rdata[got[:3]].eq(bus.rdata), got.eq(got + 1), left.eq(left - 1),
                                     addr.eq(addr + 4)]
                        with m.If(bus.resp != Resp.OKAY):
                            m.d.sync += status.eq(CplStatus.CA)

            with m.State("COMPLETE"):
                # the header's 3 DWORDs and as much data as fits in the first beat; at 256 bits the rest in a second
                first_n = min(dwords - 3, MAX_READ_DWORDS)
                first_data = Cat(*(rdata[i] for i in range(first_n)))
                second_data = Cat(*(rdata[i] for i in range(first_n, MAX_READ_DWORDS)),
                                  Const(0, 32 * (dwords - MAX_READ_DWORDS + first_n)))
                first_keep = Cat(Const(0b111, 3), *((data_dws > i) for i in range(first_n)))
                second_keep = Cat(*((data_dws > first_n + i) for i in range(MAX_READ_DWORDS - first_n)))
                two_beats = data_dws > first_n if first_n < MAX_READ_DWORDS else Const(0)
                if lay.width == 512:  # one beat: its start and its end (the last DWORD's lane) in tuser
                    m.d.comb += cc.tuser.eq((1 << CC512_IS_SOP) | (1 << CC512_IS_EOP)
                                            | ((data_dws + 2) << CC512_EOP_PTR))
                m.d.comb += [
                    cc.tvalid.eq(1),
                    cc.tdata.eq(Mux(cpl_beat, second_data, Cat(header, first_data))),
                    cc.tkeep.eq(Mux(cpl_beat, second_keep, first_keep)),
                    cc.tlast.eq(cpl_beat | ~two_beats),
                ]
                with m.If(cc.tready):
                    with m.If(cpl_beat | ~two_beats):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += cpl_beat.eq(1)
        return m

    def _window_path(self, m: Module, req_addr: Signal, in_idle: Signal):
        """The window writes' own path. Returns (this CQ beat starts a window write, the path takes a beat now,
        no window write is outstanding); without a window every request takes the bus."""
        cq = self.cq
        if self.window is None:
            return Const(0), Const(0), Const(1)
        w, win, lay = self.window, self.win, self.layout
        dwords, lb = lay.dwords, (lay.dwords - 1).bit_length()
        d = [cq.tdata[32 * i: 32 * i + 32] for i in range(dwords)]
        cq_last_be = cq.tuser[lay.cq_last_be:lay.cq_last_be + 4]
        kind, count = d[2][11:15], d[2][:11]
        to_window = Signal()
        m.d.comb += to_window.eq((kind == ReqType.MEM_WRITE) & (count != 0)
                                 & (req_addr >= w.base) & (req_addr < w.end))

        out = Signal(range(WINDOW_BURSTS_OUT + 1))  # bursts announced, their write response not yet back
        b_back = win.bvalid & win.bready
        aw_free = ~win.awvalid | win.awready
        w_free = ~win.wvalid | win.wready
        m.d.comb += [win.bready.eq(1), win.awsize.eq(lay.size_bits), win.awburst.eq(Burst.INCR)]
        with m.If(win.awvalid & win.awready):
            m.d.sync += win.awvalid.eq(0)
        with m.If(win.wvalid & win.wready):
            m.d.sync += win.wvalid.eq(0)

        # the burst being taken: its lane offset, rows, rows sent, payload DWORDs still to come, the last beat
        active, flush = Signal(), Signal()  # taking CQ beats; sending rows after the TLP's last beat
        off = Signal(range(dwords + 1))  # row = DWORDs [off, off + dwords) of (previous beat, this beat)
        rows, sent = Signal(8), Signal(8)
        left = Signal(11)
        first_be, last_be, single = Signal(4), Signal(4), Signal()
        prev, prev_strb = Signal(lay.width), Signal(lay.width // 8)

        header = cq.tvalid & in_idle & ~active & ~flush & to_window
        take = Signal()  # a CQ beat of a window write is taken this cycle
        window_ready = Signal()
        m.d.comb += [
            window_ready.eq(~flush & w_free & Mux(active, 1, aw_free & (out < WINDOW_BURSTS_OUT))),
            take.eq(cq.tvalid & window_ready & (active | header)),
        ]

        # this beat's strobes: payload DWORDs 0.. start at DWORD 4 of the first beat
        lane = req_addr[2:2 + lb]
        beat_left = Mux(active, left, count)
        fbe, lbe = Mux(active, first_be, cq.tuser[:4]), Mux(active, last_be, cq_last_be)
        one = Mux(active, single, count == 1)
        strb = Signal(lay.width // 8)
        for p in range(dwords):
            k = p - 4 if p >= 4 else None  # the payload DWORD at p in the first beat
            first_valid = Const(0) if k is None else (beat_left > k)
            later_valid = beat_left > p
            valid = cq.tkeep[p] & Mux(active, later_valid, first_valid)
            is_first = Const(1 if p == 4 else 0) & ~active
            is_last = Mux(active, beat_left == p + 1, Const(0) if k is None else (beat_left == k + 1))
            be = Mux(is_first, fbe, Mux(is_last & ~one, lbe, 0xF))
            m.d.comb += strb[4 * p: 4 * p + 4].eq(Mux(valid, be, 0))

        # the row sent now: from (previous beat, this beat), or (this beat, nothing) after the last
        low_first = lane < 4  # a first beat whose DWORDs land in the burst's first row and the next
        new_off = Signal(range(dwords + 1))
        m.d.comb += new_off.eq(Mux(low_first, 4 - lane, dwords + 4 - lane))
        row_off = Mux(active | flush, off, new_off)
        x_lo = Mux(flush, prev, Mux(active, prev, Mux(low_first, cq.tdata, 0)))
        x_hi = Mux(flush | (~active & low_first), 0, cq.tdata)
        s_lo = Mux(flush, prev_strb, Mux(active, prev_strb, Mux(low_first, strb, 0)))
        s_hi = Mux(flush | (~active & low_first), 0, strb)
        row, row_strb = Signal(lay.width), Signal(lay.width // 8)
        m.d.comb += [row.eq(Cat(x_lo, x_hi).bit_select(row_off * 32, lay.width)),
                     row_strb.eq(Cat(s_lo, s_hi).bit_select(row_off * 4, lay.width // 8))]
        n_rows = ((lane + count - 1) >> lb) + 1
        total = Mux(active | flush, rows, n_rows)
        done = Mux(active | flush, sent, 0)
        # a first beat landing in two rows waits for the next beat, unless it is the last
        send = Signal()
        m.d.comb += send.eq(Mux(flush, w_free, take & (done < total) & (active | ~low_first | cq.tlast)))
        with m.If(send):
            m.d.sync += [win.wvalid.eq(1), win.wdata.eq(row), win.wstrb.eq(row_strb), win.wlast.eq(done + 1 == total),
                         sent.eq(done + 1)]
        with m.If(header & take):
            m.d.sync += [win.awvalid.eq(1), win.awaddr.eq(req_addr & ~(lay.width // 8 - 1)), win.awlen.eq(n_rows - 1),
                         off.eq(new_off), rows.eq(n_rows), first_be.eq(cq.tuser[:4]), last_be.eq(cq_last_be),
                         single.eq(count == 1), active.eq(~cq.tlast)]
            with m.If(~send):
                m.d.sync += sent.eq(0)
        with m.If(take):
            # (a first beat sent with nothing after it leaves nothing to carry)
            m.d.sync += [prev.eq(cq.tdata), prev_strb.eq(Mux(~active & low_first & cq.tlast, 0, strb)),
                         left.eq(Mux(beat_left > Mux(active, dwords, dwords - 4),
                                     beat_left - Mux(active, dwords, dwords - 4), 0))]
            with m.If(cq.tlast):
                m.d.sync += [active.eq(0), flush.eq(done + send < total)]
        with m.If(flush & send):
            m.d.sync += prev_strb.eq(0)  # rows after the carried one are padding of a TLP that ended early
            with m.If(done + 1 == total):
                m.d.sync += flush.eq(0)
        m.d.sync += out.eq(out + (header & take) - b_back)
        return to_window, window_ready, ~active & ~flush & (out == 0)
