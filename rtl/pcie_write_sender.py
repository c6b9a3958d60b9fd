"""PcieWriteSender: the engine's write bursts (its AXI4 AW, W and B channels, as a slave) as memory write requests
on the UltraScale+ PCIe block's RQ stream (256 or 512 bits, DWORD-aligned, no straddling), a beat a cycle.

- A burst is sent from its first enabled byte to its last (the engine's strobes are one contiguous range) in
  requests each as long as the payload size allows from where the last one ended, cut at 4 KiB boundaries (so a
  burst of at most the payload size that crosses none is one request, wherever it starts).
  `max_payload` is the Max_Payload_Size code the host set, capped at `max_payload_bytes` and sampled while no
  burst is being cut.
- Each request goes out as soon as all its data is gathered (the burst's last one waits for its last beat,
  whose strobes end it), its header beat carrying its first four (at 512 bits twelve) DWORDs, then a whole beat
  of DWORDs a beat. tuser carries the first and last byte enables (rtl/pcie_streams.py has their places); the
  requester adds the 512-bit stream's packet marks. With `straddle` (512 bits only) the requests leave as 256-bit
  halves, two a cycle, a request starting at either half (rtl/pcie_write_halves.py), instead of on `rq`; there a
  request may start in the cycle the beat completing its data is written, its first halves from the rows already in.
- Four gather buffers, taken in turn: later bursts' addresses and data are taken while earlier bursts' requests
  are still going out, so bursts follow each other on RQ without a gap, short ones too (a buffer is busy from its
  address through its data to its last request: with two, 128-byte bursts left RQ idle between them). A burst's response is OKAY once its last beat
  is in: its requests leave before those of any burst after it (PCIe writes are posted and stay in order), so a
  write the engine makes after the response (its completion word) lands after the burst's data; the buffer is
  free again once its last request is on the stream. Responses come in burst order.

The buffers hold rows as wide as the stream, of DWORDs counted from the burst's address rounded down to a
row: an engine beat fills its lanes of a row, and an RQ beat takes a row's worth of consecutive DWORDs from two
rows.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import axi_channels
from rtl.pcie_completer import WIDTH
from rtl.pcie_requests import (MEM_WRITE, REQUESTER_DATA_WIDTHS, SIZE_CODE_BITS, SIZES, capped, lanes_mask,
                               rq_header, rq_user, size_of)
from rtl.pcie_streams import axis_signature, layout
from rtl.pcie_write_halves import Gather, half_signature, send_halves

BUFFERS = 4  # gather buffers (bursts taken while earlier ones' requests go out)


def _lowest(nibbles: list) -> Signal:
    """The index of the first nonzero 4-bit strobe nibble (0 if none)."""
    out = Const(0, max(1, (len(nibbles) - 1).bit_length()))
    for i in reversed(range(len(nibbles))):
        out = Mux(nibbles[i] != 0, i, out)
    return out


def _highest(nibbles: list) -> Signal:
    out = Const(0, max(1, (len(nibbles) - 1).bit_length()))
    for i in range(len(nibbles)):
        out = Mux(nibbles[i] != 0, i, out)
    return out


class PcieWriteSender(wiring.Component):
    def __init__(self, *, data_width: int, id_width: int, max_burst_beats: int, max_payload_bytes: int = 1024,
                 width: int = WIDTH, straddle: bool = False):
        self.layout = lay = layout(width)
        if straddle and width != 512:
            raise ValueError(f"RQ straddling is a 512-bit interface's, not a {width}-bit one's")
        self.straddle = straddle
        if data_width not in REQUESTER_DATA_WIDTHS or data_width > width:
            raise ValueError(f"data_width must be one of {REQUESTER_DATA_WIDTHS} and at most the stream's {width} "
                             f"bits, not {data_width}")
        if max_payload_bytes not in SIZES:
            raise ValueError(f"max_payload_bytes must be a PCIe payload size (128..4096), not {max_payload_bytes}")
        if not 1 <= max_burst_beats <= 256 or max_burst_beats * data_width // 8 > 4096:
            raise ValueError(f"max_burst_beats must be 1..256 and a burst at most 4 KiB, not {max_burst_beats} "
                             f"beats of {data_width} bits")
        self.data_width, self.id_width, self.max_burst_beats = data_width, id_width, max_burst_beats
        self.max_payload_bytes = max_payload_bytes
        out = ({"h0": Out(half_signature()), "h1": Out(half_signature()), "take": In(2), "in_tlp": Out(1)}
               if straddle else {"rq": Out(axis_signature(width, lay.rq_user_bits))})
        super().__init__({
            "axi": In(axi_channels(64, data_width, id_width, "aw", "w", "b")),
            **out,
            "max_payload": In(SIZE_CODE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        axi, lay = self.axi, self.layout
        dwords, lb, width = lay.dwords, (lay.dwords - 1).bit_length(), lay.width
        db = self.data_width // 8
        per_beat = db // 4  # DWORDs an engine beat carries
        lg = (db - 1).bit_length()
        beats = self.max_burst_beats
        rows = 1 << max(1, (-(-(dwords - per_beat + beats * per_beat) // dwords) - 1).bit_length())
        rb = (rows - 1).bit_length()
        pos_shape = range(dwords * rows + 1)  # a DWORD's place in its buffer

        m.submodules.buf = buf = Memory(shape=width, depth=BUFFERS * rows, init=[])
        buf_w = buf.write_port(granularity=32)

        # --- per gather buffer: the burst it holds -------------------------------------------------------------
        def per_half(shape, name):
            return Array(Signal(shape, name=f"{name}{h}") for h in range(BUFFERS))

        busy = per_half(1, "busy")  # its address is taken, its last request not yet out or its response not given
        answered = per_half(1, "answered")  # its response is given
        full = per_half(1, "full")  # its last beat is in
        sent = per_half(1, "sent")  # its last request is out
        addr, wid = per_half(64, "addr"), per_half(self.id_width, "id")
        count = per_half(range(beats + 1), "count")  # beats gathered
        first_dw, end_dw = per_half(pos_shape, "first_dw"), per_half(pos_shape, "end_dw")  # its first and last
        first_be, end_be = per_half(4, "first_be"), per_half(4, "end_be")
        # the buffers are taken, filled, sent and answered in turn
        aw_at, w_at, s_at, b_at = (Signal(range(BUFFERS), name=n) for n in ("aw_at", "w_at", "s_at", "b_at"))

        def lane0(a):
            """The DWORD lane of a burst's first beat in its first row."""
            return Cat(Const(0, lg - 2), a[lg:2 + lb])

        # --- AW, W and B ---------------------------------------------------------------------------------------
        m.d.comb += axi.awready.eq(~busy[aw_at])
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += [busy[aw_at].eq(1), full[aw_at].eq(0), sent[aw_at].eq(0), answered[aw_at].eq(0),
                         addr[aw_at].eq(axi.awaddr),
                         wid[aw_at].eq(axi.awid), count[aw_at].eq(0), aw_at.eq(aw_at + 1)]

        # a burst's first beat may come in the cycle its address is taken (into the buffer W fills next)
        opening = Signal()
        m.d.comb += [opening.eq(axi.awvalid & axi.awready & (aw_at == w_at)),
                     axi.wready.eq((busy[w_at] & ~full[w_at]) | opening)]
        k = Signal.like(count[0], name="w_beat")
        at = Signal(pos_shape, name="w_pos")
        m.d.comb += [k.eq(Mux(opening, 0, count[w_at])),
                     at.eq(lane0(Mux(opening, axi.awaddr, addr[w_at])) + k * per_beat)]
        nibbles = [axi.wstrb[4 * i:4 * i + 4] for i in range(per_beat)]
        lo, hi = _lowest(nibbles), _highest(nibbles)
        m.d.comb += [buf_w.addr.eq(Cat(at[lb:lb + rb], w_at)), buf_w.data.eq(Cat([axi.wdata] * (dwords // per_beat)))]
        with m.If(axi.wvalid & axi.wready):
            m.d.comb += buf_w.en.eq(Const((1 << per_beat) - 1, dwords) << at[:lb])
            m.d.sync += [count[w_at].eq(k + 1), end_dw[w_at].eq(at + hi),
                         end_be[w_at].eq(axi.wstrb.word_select(hi, 4))]
            with m.If(k == 0):
                m.d.sync += [first_dw[w_at].eq(at + lo), first_be[w_at].eq(axi.wstrb.word_select(lo, 4))]
            with m.If(axi.wlast):
                m.d.sync += [full[w_at].eq(1), w_at.eq(w_at + 1)]

        for h in range(BUFFERS):
            with m.If(busy[h] & sent[h] & answered[h]):
                m.d.sync += busy[h].eq(0)
        m.d.comb += [axi.bvalid.eq(busy[b_at] & full[b_at] & ~answered[b_at]), axi.bid.eq(wid[b_at]),
                     axi.bresp.eq(Resp.OKAY)]
        with m.If(axi.bvalid & axi.bready):
            m.d.sync += [answered[b_at].eq(1), b_at.eq(b_at + 1)]

        # --- the sender: the burst in buffer s_at, a request at a time -----------------------------------------
        mps_code = Signal(SIZE_CODE_BITS)
        mps_dwords = size_of(mps_code, self.max_payload_bytes, 4)
        sample_mps = [mps_code.eq(capped(self.max_payload, self.max_payload_bytes))]
        if self.straddle:
            w_in, w_last = Signal(name="w_in"), Signal(name="w_last")
            m.d.comb += [w_in.eq(axi.wvalid & axi.wready & ~opening & (~axi.wlast | (axi.wstrb == (1 << db) - 1))),
                         w_last.eq(axi.wlast)]
            gather = Gather(buf, lb, rb, pos_shape, busy, full, sent, addr, count, first_dw, end_dw, first_be, end_be,
                            s_at, lane0, per_beat, w_in, w_at, w_last, at + per_beat - 1)
            send_halves(m, gather, mps_dwords, self.h0, self.h1, self.take, self.in_tlp, sample_mps)
            return m
        rq = self.rq
        row_a, row_b = buf.read_port(domain="comb"), buf.read_port(domain="comb")
        mid = Signal()  # the burst's first request is out, its last not yet
        dw = Signal(pos_shape)  # the next DWORD to send (while mid)
        in_tlp = Signal()  # a request's data beats are going out
        tlp_left = Signal(range(1024 + 1))  # its DWORDs still to go
        tlp_be, tlp_last = Signal(8), Signal()

        s = s_at
        cur = Signal(pos_shape, name="cur_dw")
        m.d.comb += cur.eq(Mux(mid, dw, first_dw[s]))
        m.d.comb += [row_a.addr.eq(Cat(cur[lb:lb + rb], s)), row_b.addr.eq(Cat((cur[lb:lb + rb] + 1)[:rb], s))]
        window = Signal(width)
        m.d.comb += window.eq((Cat(row_a.data, row_b.data) >> (cur[:lb] * 32))[:width])

        tlp_addr = Signal(64)
        m.d.comb += tlp_addr.eq((addr[s] & ~Const(width // 8 - 1, 64)) + (cur << 2))
        room, left, n = Signal(range(1024 + 1)), Signal(pos_shape), Signal(range(1024 + 1))
        last = Signal()  # the request is the burst's last
        to_page = Signal(11)  # DWORDs to the next 4 KiB boundary
        m.d.comb += to_page.eq(1024 - tlp_addr[2:12])
        m.d.comb += [room.eq(Mux(to_page < mps_dwords, to_page, mps_dwords)),
                     left.eq(end_dw[s] - cur + 1),
                     last.eq(full[s] & (left <= room)),
                     n.eq(Mux(last, left, room))]
        gathered = lane0(addr[s]) + count[s] * per_beat  # DWORDs in the buffer so far (one past the last)
        header_ready = Signal()
        m.d.comb += header_ready.eq(busy[s] & ~sent[s] & (count[s] != 0) & (full[s] | (cur + room <= gathered)))

        fbe = Mux(~mid, first_be[s], 0xF) & Mux((n == 1) & last, end_be[s], 0xF)
        lbe = Mux(n == 1, 0, Mux(last, end_be[s], 0xF))
        head_data = Mux(n > dwords - 4, dwords - 4, n)  # the header beat's DWORDs of data
        fire = rq.tvalid & rq.tready

        def finish():
            m.d.sync += [sent[s].eq(1), s_at.eq(s_at + 1), mid.eq(0)]

        with m.If(in_tlp):
            step = Mux(tlp_left > dwords, dwords, tlp_left)
            m.d.comb += [rq.tvalid.eq(1), rq.tdata.eq(window), rq.tkeep.eq(lanes_mask(tlp_left, dwords)),
                         rq.tuser.eq(rq_user(lay, tlp_be[:4], tlp_be[4:])), rq.tlast.eq(tlp_left <= dwords)]
            with m.If(fire):
                m.d.sync += [dw.eq(dw + step), tlp_left.eq(tlp_left - step)]
                with m.If(tlp_left <= dwords):
                    m.d.sync += in_tlp.eq(0)
                    with m.If(tlp_last):
                        finish()
        with m.Else():
            m.d.comb += [rq.tvalid.eq(header_ready), rq.tdata.eq(Cat(rq_header(tlp_addr, n, MEM_WRITE, Const(0, 8)),
                                                                     window[:width - 128])),
                         rq.tkeep.eq(lanes_mask(4 + head_data, dwords)), rq.tuser.eq(rq_user(lay, fbe, lbe)),
                         rq.tlast.eq(n <= dwords - 4)]
            with m.If(fire):
                m.d.sync += [dw.eq(cur + head_data), tlp_left.eq(n - head_data), mid.eq(1),
                             tlp_be.eq(Cat(fbe, lbe)), tlp_last.eq(last), in_tlp.eq(n > dwords - 4)]
                with m.If((n <= dwords - 4) & last):
                    finish()
            with m.Elif(~mid):  # no burst is being cut: the host's size is taken now
                m.d.sync += sample_mps
        return m
