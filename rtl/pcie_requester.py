"""PcieRequester: the engine's memory port (an AXI4 slave, 64-bit beats) as requests on the Xilinx UltraScale+
PCIe block's RQ stream and completions from its RC stream (256 bits, DWORD-aligned, no straddling).

- A read burst becomes one memory read request tagged with its AXI ID (the engine's bursts are at most
  max_read_bytes and never cross 4 KiB). Completions, in any order between tags and split on 8-byte
  boundaries within one, come back as R beats of that ID; an unsuccessful completion answers the burst's
  remaining beats SLVERR.
- A write burst is gathered, then sent as memory writes of at most max_payload_bytes, from its first enabled
  byte to its last (the engine's strobes are one contiguous range); its response is OKAY once the last
  request is on the link (PCIe writes are posted and stay in order).

Requests are built and completions taken a DWORD at a time: this is the function, not yet the line rate.
Not here yet: a completion timeout (a read whose completion never comes waits forever).
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import axi_signature
from rtl.pcie_completer import DWORDS, WIDTH, axis_signature

RQ_USER_BITS = 62
RC_USER_BITS = 75
RC_SOP_BIT = 32
MEM_READ, MEM_WRITE = 0, 1


def _field(value, width: int):
    """`value` zero-extended (or cut) to exactly `width` bits, so the fields after it keep their places."""
    return Cat(value, Const(0, max(0, width - len(value))))[:width]


def _rq_header(addr, dwords, kind: int, tag):
    """A 4-DWORD RQ descriptor: address, DWORD count and request type, tag (requester ID from the block)."""
    return Cat(Const(0, 2), _field(addr[2:], 62), _field(dwords, 11), Const(kind, 4), Const(0, 17),
               _field(tag, 8), Const(0, 24))


class PcieRequester(wiring.Component):
    def __init__(self, *, id_width: int, max_burst_beats: int, data_width: int = 64, max_payload_bytes: int = 128,
                 max_read_bytes: int = 512):
        if data_width != 64:
            raise ValueError(f"the requester serves a 64-bit engine, not {data_width}-bit: wider beats need "
                             "packing this first version does not have")
        if max_payload_bytes not in (128, 256, 512, 1024, 2048, 4096):
            raise ValueError(f"max_payload_bytes must be a PCIe payload size (128..4096), not {max_payload_bytes}")
        if max_burst_beats * 8 > max_read_bytes:
            raise ValueError(f"a burst of {max_burst_beats} beats ({max_burst_beats * 8} bytes) exceeds one read "
                             f"request of {max_read_bytes} bytes")
        if not 1 <= id_width <= 8:
            raise ValueError(f"AXI IDs are used as PCIe tags: 1..8 bits, not {id_width}")
        self.id_width, self.max_burst_beats = id_width, max_burst_beats
        self.mps_dwords = max_payload_bytes // 4
        super().__init__({
            "mem": In(axi_signature(64, 64, id_width)),
            "rq": Out(axis_signature(WIDTH, RQ_USER_BITS)),
            "rc": In(axis_signature(WIDTH, RC_USER_BITS)),
        })

    def elaborate(self, platform):
        m = Module()
        mem, rq, rc = self.mem, self.rq, self.rc
        beats, iw = self.max_burst_beats, self.id_width
        remaining = Array(Signal(9, name=f"remaining{i}") for i in range(1 << iw))  # beats a tag's burst awaits

        # --- writes: a burst gathered, then handed to the RQ side ------------------------------------------------
        buf = Array(Signal(64, name=f"wbuf{i}") for i in range(beats))
        w_addr, w_len, w_id = Signal(64), Signal(8), Signal(iw)
        w_count = Signal(range(beats + 1))
        first_strb, last_strb = Signal(8), Signal(8)
        w_full, w_sent = Signal(), Signal()  # a gathered burst waits for the RQ side; it has been sent

        with m.FSM(name="gather"):
            with m.State("IDLE"):
                m.d.comb += mem.awready.eq(1)
                with m.If(mem.awvalid):
                    m.d.sync += [w_addr.eq(mem.awaddr), w_len.eq(mem.awlen), w_id.eq(mem.awid), w_count.eq(0)]
                    m.next = "GATHER"
            with m.State("GATHER"):
                m.d.comb += mem.wready.eq(1)
                with m.If(mem.wvalid):
                    m.d.sync += [buf[w_count].eq(mem.wdata), w_count.eq(w_count + 1), last_strb.eq(mem.wstrb)]
                    with m.If(w_count == 0):
                        m.d.sync += first_strb.eq(mem.wstrb)
                    with m.If(mem.wlast):
                        m.d.sync += w_full.eq(1)
                        m.next = "SENDING"
            with m.State("SENDING"):
                with m.If(w_sent):
                    m.d.sync += [w_full.eq(0), w_sent.eq(0)]
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [mem.bvalid.eq(1), mem.bid.eq(w_id), mem.bresp.eq(Resp.OKAY)]
                with m.If(mem.bready):
                    m.next = "IDLE"

        # --- the RQ side: a write's requests, else a read request -------------------------------------------------
        dw, dw_end = Signal(range(2 * beats + 1)), Signal(range(2 * beats + 1))  # next DWORD to send, the last
        tlp_left = Signal(range(self.mps_dwords + 1))
        first_tlp = Signal()
        lane = Signal(range(DWORDS + 1))
        out_data, out_keep, out_user = Signal(WIDTH), Signal(DWORDS), Signal(8)

        def dword(i):
            return buf[i[1:]].word_select(i[0], 32)

        with m.FSM(name="rq"):
            with m.State("IDLE"):
                with m.If(w_full & ~w_sent):
                    m.d.sync += [dw.eq(Mux(first_strb[:4] != 0, 0, 1)), dw_end.eq(Cat(last_strb[4:] != 0, w_len)),
                                 first_tlp.eq(1)]
                    m.next = "HEADER"
                with m.Else():
                    # a read request goes out in the cycle its address is taken
                    m.d.comb += [rq.tvalid.eq(mem.arvalid), mem.arready.eq(rq.tready),
                                 rq.tdata.eq(_rq_header(mem.araddr, Cat(Const(0, 1), mem.arlen + 1), MEM_READ,
                                                        mem.arid)),
                                 rq.tkeep.eq(0b1111), rq.tlast.eq(1), rq.tuser.eq(0xFF)]
                    with m.If(mem.arvalid & rq.tready):
                        m.d.sync += remaining[mem.arid].eq(mem.arlen + 1)
            with m.State("HEADER"):
                left = dw_end - dw + 1
                n = Signal(range(self.mps_dwords + 1))
                m.d.comb += n.eq(Mux(left > self.mps_dwords, self.mps_dwords, left))
                last_tlp = left <= self.mps_dwords
                end_be = last_strb.word_select(dw_end[0], 4)
                # a one-DWORD request carries all its enables in first_be: the burst's first, last, or both
                fbe = Mux(first_tlp, first_strb.word_select(dw[0], 4), 0xF) & Mux((n == 1) & last_tlp, end_be, 0xF)
                lbe = Mux(n == 1, 0, Mux(last_tlp, end_be, 0xF))
                addr = (w_addr & ~Const(7, 64)) + (dw << 2)
                m.d.sync += [out_data.eq(_rq_header(addr, n, MEM_WRITE, Const(0, 8))), out_keep.eq(0b1111),
                             out_user.eq(Cat(fbe, lbe)), lane.eq(4), tlp_left.eq(n)]
                m.next = "FILL"
            with m.State("FILL"):
                with m.If((lane == DWORDS) | (tlp_left == 0)):
                    m.next = "SEND"
                with m.Else():
                    m.d.sync += [out_data.word_select(lane[:3], 32).eq(dword(dw)),
                                 out_keep.bit_select(lane[:3], 1).eq(1),
                                 lane.eq(lane + 1), dw.eq(dw + 1), tlp_left.eq(tlp_left - 1)]
            with m.State("SEND"):
                m.d.comb += [rq.tvalid.eq(1), rq.tdata.eq(out_data), rq.tkeep.eq(out_keep), rq.tuser.eq(out_user),
                             rq.tlast.eq(tlp_left == 0)]
                with m.If(rq.tready):
                    m.d.sync += [out_data.eq(0), out_keep.eq(0), lane.eq(0)]
                    with m.If(tlp_left != 0):
                        m.next = "FILL"
                    with m.Elif(dw > dw_end):
                        m.d.sync += w_sent.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += first_tlp.eq(0)
                        m.next = "HEADER"

        # --- the RC side: completions into R beats ------------------------------------------------------------
        beat, keep = Signal(WIDTH), Signal(DWORDS)
        tag = Signal(iw)
        rlane = Signal(range(DWORDS + 1))
        low, have_low = Signal(32), Signal()
        r_valid, r_data, r_id, r_last, r_resp = Signal(), Signal(64), Signal(iw), Signal(), Signal(2)
        m.d.comb += [mem.rvalid.eq(r_valid), mem.rdata.eq(r_data), mem.rid.eq(r_id), mem.rlast.eq(r_last),
                     mem.rresp.eq(r_resp)]
        with m.If(mem.rvalid & mem.rready):
            m.d.sync += r_valid.eq(0)
        r_free = ~r_valid | mem.rready
        left_beats = remaining[tag]

        def emit(data, resp):
            m.d.sync += [r_valid.eq(1), r_data.eq(data), r_id.eq(tag), r_resp.eq(resp), r_last.eq(left_beats == 1),
                         remaining[tag].eq(left_beats - 1)]

        d = [rc.tdata[32 * i: 32 * i + 32] for i in range(DWORDS)]
        with m.FSM(name="rc"):
            with m.State("TAKE"):
                m.d.comb += rc.tready.eq(1)
                with m.If(rc.tvalid):
                    m.d.sync += [beat.eq(rc.tdata), keep.eq(rc.tkeep), rlane.eq(0)]
                    with m.If(rc.tuser[RC_SOP_BIT]):
                        m.d.sync += [tag.eq(d[2][:iw]), rlane.eq(3), have_low.eq(0)]
                        with m.If((d[1][11:14] != 0) | (d[0][12:16] != 0)):
                            m.next = "FAIL"
                        with m.Else():
                            m.next = "WALK"
                    with m.Else():
                        m.next = "WALK"
            with m.State("WALK"):
                with m.If((rlane == DWORDS) | ~keep.bit_select(rlane[:3], 1)):
                    m.next = "TAKE"
                with m.Elif(~have_low):
                    m.d.sync += [low.eq(beat.word_select(rlane[:3], 32)), have_low.eq(1), rlane.eq(rlane + 1)]
                with m.Elif(r_free):
                    emit(Cat(low, beat.word_select(rlane[:3], 32)), Resp.OKAY)
                    m.d.sync += [have_low.eq(0), rlane.eq(rlane + 1)]
            with m.State("FAIL"):
                # the burst's remaining beats answered SLVERR; the completion itself carries no data to take
                with m.If(left_beats == 0):
                    m.next = "TAKE"
                with m.Elif(r_free):
                    emit(0, Resp.SLVERR)
        return m
