"""PcieRequester: the engine's memory port (an AXI4 slave, 64-bit beats) as requests on the Xilinx UltraScale+
PCIe block's RQ stream and completions from its RC stream (256 bits, DWORD-aligned, no straddling).

- A read burst becomes one memory read request. Its 8-bit PCIe tag is the burst's AXI ID below a
  generation number of that ID (the tag's other bits), so the link must have Extended Tag Field Enable set
  once an ID has timed out (hosts set it when the device supports it). The engine's bursts are at most
  max_read_bytes and never cross 4 KiB. Completions, in any order between tags and split on 8-byte
  boundaries within one, come back as R beats of that ID.
- Errors end the read: a completion with a status other than Successful (UR, CA, CRS), the poisoned bit
  (EP) or any error code from the block answers the burst's remaining beats SLVERR (the engine ends the
  descriptor in BUS_ERROR); none of its data is delivered.
- Completion timeout: a read not fully completed within completion_timeout_cycles of its request (10 ms
  at 250 MHz by default; up to a quarter more, the timer's grain, and never cutting a completion TLP
  already arriving) is answered the same way, its ID's generation moves on and the ID may be used again
  at once. A completion that is not for a read in flight (its ID idle, its generation old: late after a
  timeout, or a tail after an error) or whose byte count is not what the read still awaits is dropped
  whole, never delivered as data. `timeouts` and `dropped` count both (modulo 2^16). A late completion
  could be taken as data only if its ID had timed out 2^(8 - id_width) more times since, and its byte
  count were the one the new read awaits.
- A write burst is gathered, then sent as memory writes of at most max_payload_bytes, from its first enabled
  byte to its last (the engine's strobes are one contiguous range); its response is OKAY once the last
  request is on the link (PCIe writes are posted and stay in order, so a write has no error to report).

Requests are built and completions taken a DWORD at a time: this is the function, not yet the line rate.
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
TAG_BITS = 8  # an extended PCIe tag
# 10 ms at the block's 250 MHz user clock: inside the PCIe default range (50 us to 50 ms)
COMPLETION_TIMEOUT_CYCLES = 2_500_000
TIMEOUT_STEPS = 4  # the timer's grain: a quarter of the timeout
STATUS_BITS = 16


def _field(value, width: int):
    """`value` zero-extended (or cut) to exactly `width` bits, so the fields after it keep their places."""
    return Cat(value, Const(0, max(0, width - len(value))))[:width]


def _rq_header(addr, dwords, kind: int, tag):
    """A 4-DWORD RQ descriptor: address, DWORD count and request type, tag (requester ID from the block)."""
    return Cat(Const(0, 2), _field(addr[2:], 62), _field(dwords, 11), Const(kind, 4), Const(0, 17),
               _field(tag, 8), Const(0, 24))


class PcieRequester(wiring.Component):
    def __init__(self, *, id_width: int, max_burst_beats: int, data_width: int = 64, max_payload_bytes: int = 128,
                 max_read_bytes: int = 512, completion_timeout_cycles: int = COMPLETION_TIMEOUT_CYCLES):
        if data_width != 64:
            raise ValueError(f"the requester serves a 64-bit engine, not {data_width}-bit: wider beats need "
                             "packing this first version does not have")
        if max_payload_bytes not in (128, 256, 512, 1024, 2048, 4096):
            raise ValueError(f"max_payload_bytes must be a PCIe payload size (128..4096), not {max_payload_bytes}")
        if max_burst_beats * 8 > max_read_bytes:
            raise ValueError(f"a burst of {max_burst_beats} beats ({max_burst_beats * 8} bytes) exceeds one read "
                             f"request of {max_read_bytes} bytes")
        if not 1 <= id_width < TAG_BITS:
            raise ValueError(f"AXI IDs are used as PCIe tags below at least one generation bit: 1..{TAG_BITS - 1} "
                             f"bits, not {id_width} (use fewer reads outstanding)")
        if not isinstance(completion_timeout_cycles, int) or completion_timeout_cycles < 16 * TIMEOUT_STEPS:
            raise ValueError(f"completion_timeout_cycles must be an int of at least {16 * TIMEOUT_STEPS} cycles, "
                             f"not {completion_timeout_cycles!r} (the PCIe default range is 50 us to 50 ms)")
        self.id_width, self.max_burst_beats = id_width, max_burst_beats
        self.mps_dwords = max_payload_bytes // 4
        self.completion_timeout_cycles = completion_timeout_cycles
        super().__init__({
            "mem": In(axi_signature(64, 64, id_width)),
            "rq": Out(axis_signature(WIDTH, RQ_USER_BITS)),
            "rc": In(axis_signature(WIDTH, RC_USER_BITS)),
            "timeouts": Out(STATUS_BITS),
            "dropped": Out(STATUS_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        mem, rq, rc = self.mem, self.rq, self.rc
        beats, iw = self.max_burst_beats, self.id_width
        ids = range(1 << iw)
        remaining_of = [Signal(9, name=f"remaining{i}") for i in ids]  # beats an ID's burst awaits (0: idle)
        gen_of = [Signal(TAG_BITS - iw, name=f"gen{i}") for i in ids]  # an ID's tag generation
        age_of = [Signal(range(TIMEOUT_STEPS + 2), name=f"age{i}") for i in ids]  # timer ticks since its request
        remaining, gen, age = Array(remaining_of), Array(gen_of), Array(age_of)
        expired_age = TIMEOUT_STEPS + 1

        # --- the completion timer: one prescaler, a small age per ID ---------------------------------------------
        # A read's age counts ticks from its request, so it expires between TIMEOUT_STEPS and TIMEOUT_STEPS + 1
        # tick periods later: between completion_timeout_cycles and a quarter more.
        period = -(-self.completion_timeout_cycles // TIMEOUT_STEPS)
        prescale, tick = Signal(range(period)), Signal()
        m.d.comb += tick.eq(prescale == 0)
        m.d.sync += prescale.eq(Mux(tick, period - 1, prescale - 1))
        for i in ids:
            with m.If(tick & (remaining_of[i] != 0) & (age_of[i] != expired_age)):
                m.d.sync += age_of[i].eq(age_of[i] + 1)
        scan = Signal(iw)  # the ID whose timer the RC side looks at this cycle
        m.d.sync += scan.eq(scan + 1)
        expired = Signal()
        m.d.comb += expired.eq((age[scan] == expired_age) & (remaining[scan] != 0))

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
                                                        Cat(mem.arid, gen[mem.arid]))),
                                 rq.tkeep.eq(0b1111), rq.tlast.eq(1), rq.tuser.eq(0xFF)]
                    with m.If(mem.arvalid & rq.tready):
                        # (after the timer above: a request in the cycle of a tick starts at age 0)
                        m.d.sync += [remaining[mem.arid].eq(mem.arlen + 1), age[mem.arid].eq(0)]
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
        tag = Signal(iw)  # the ID the completion (or the timeout) being handled answers
        mid = Signal()  # inside a TLP: its next beat is not a start of packet
        rlane = Signal(range(DWORDS + 1))
        low, have_low = Signal(32), Signal()
        timeouts, dropped = Signal(STATUS_BITS), Signal(STATUS_BITS)
        m.d.comb += [self.timeouts.eq(timeouts), self.dropped.eq(dropped)]
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

        # the RC descriptor: DW0 lower address, error code [15:12], byte count [28:16]; DW1 DWORD count,
        # status [13:11], poisoned [14]; DW2 tag [7:0]
        d = [rc.tdata[32 * i: 32 * i + 32] for i in range(DWORDS)]
        c_id, c_gen = d[2][:iw], d[2][iw:TAG_BITS]
        c_failed = (d[1][11:14] != 0) | d[1][14] | (d[0][12:16] != 0)
        c_ours = (remaining[c_id] != 0) & (c_gen == gen[c_id])
        c_expected = d[0][16:29] == Cat(Const(0, 3), remaining[c_id])  # the bytes the read still awaits
        with m.FSM(name="rc"):
            with m.State("TAKE"):
                with m.If(~mid & expired):
                    # between TLPs only, so no TLP is cut; the ID's late completions now carry an old generation
                    m.d.sync += [tag.eq(scan), gen[scan].eq(gen[scan] + 1), timeouts.eq(timeouts + 1)]
                    m.next = "FAIL"
                with m.Else():
                    m.d.comb += rc.tready.eq(1)
                    with m.If(rc.tvalid):
                        m.d.sync += [beat.eq(rc.tdata), keep.eq(rc.tkeep), rlane.eq(0), mid.eq(~rc.tlast)]
                        with m.If(~rc.tuser[RC_SOP_BIT] & mid):
                            m.next = "WALK"
                        with m.Elif(~rc.tuser[RC_SOP_BIT] | ~c_ours | ~(c_failed | c_expected)):
                            m.d.sync += dropped.eq(dropped + 1)
                            with m.If(~rc.tlast):
                                m.next = "DROP"
                        with m.Else():
                            m.d.sync += [tag.eq(c_id), rlane.eq(3), have_low.eq(0)]
                            with m.If(c_failed):
                                m.next = "FAIL"
                            with m.Else():
                                m.next = "WALK"
            with m.State("WALK"):
                with m.If((rlane == DWORDS) | ~keep.bit_select(rlane[:3], 1)):
                    m.next = "TAKE"
                with m.Elif(~have_low):
                    m.d.sync += [low.eq(beat.word_select(rlane[:3], 32)), have_low.eq(1), rlane.eq(rlane + 1)]
                with m.Elif(left_beats == 0):
                    # more data than the byte count said (a malformed TLP): not delivered
                    m.d.sync += [have_low.eq(0), rlane.eq(rlane + 1)]
                with m.Elif(r_free):
                    emit(Cat(low, beat.word_select(rlane[:3], 32)), Resp.OKAY)
                    m.d.sync += [have_low.eq(0), rlane.eq(rlane + 1)]
            with m.State("FAIL"):
                # the burst's remaining beats answered SLVERR; the TLP's own data (a poisoned one has some) is
                # dropped after
                with m.If(left_beats == 0):
                    with m.If(mid):
                        m.next = "DROP"
                    with m.Else():
                        m.next = "TAKE"
                with m.Elif(r_free):
                    emit(0, Resp.SLVERR)
            with m.State("DROP"):
                # the rest of a TLP that delivers nothing
                m.d.comb += rc.tready.eq(1)
                with m.If(rc.tvalid & rc.tlast):
                    m.d.sync += mid.eq(0)
                    m.next = "TAKE"
        return m
