"""PcieRequester: the engine's memory port (an AXI4 slave, 64-bit beats) as requests on the Xilinx UltraScale+
PCIe block's RQ stream and completions from its RC stream (256 bits, DWORD-aligned, no straddling).

- Sizes: `max_read_req` and `max_payload` take the Max_Read_Request_Size and Max_Payload_Size the host set in
  the Device Control register, in its encoding (0: 128 bytes ... 5: 4096), as the block reports them
  (cfg_max_read_req; cfg_max_payload, two bits on pcie4_uscale_plus: at most 1024). They are sampled while no
  burst is being cut into requests and capped at the constructor's max_read_bytes and max_payload_bytes, the
  most the card supports (reserved codes 6 and 7 read as the cap).
- A read burst (8-byte aligned: the address's low three bits are ignored, as AXI places a beat's bytes by
  address) becomes memory read requests cut at every multiple of the read request size, so none is larger and
  none crosses 4 KiB. Each carries its own 8-bit PCIe tag: the burst's AXI ID, the request's place in the
  burst, then a generation number of that ID (the tag's other bits), so the link must have Extended Tag
  Field Enable set (hosts set it when the device supports it). Completions, in any order between tags and
  split on 8-byte boundaries within one, are stored by their lower address in a buffer of one burst per ID
  (2^id_width x max_burst_beats x 8 bytes: 8 KiB on the card) and answered as that ID's R beats in order as
  soon as the next beat is in (IDs in any order between them, the lowest ready first).
- Errors end the read: a completion with a status other than Successful (UR, CA, CRS), the poisoned bit
  (EP) or any error code from the block fails the burst. Its beats already in are still answered in order up
  to the first one missing; from there every remaining beat is SLVERR with no data (the engine ends the
  descriptor in BUS_ERROR) and its requests not yet sent are never sent.
- Completion timeout: a read with a request not fully completed within completion_timeout_cycles of the
  burst's address (10 ms at 250 MHz by default; up to a quarter more, the timer's grain, and never cutting a
  completion TLP already arriving) fails the same way, its ID's generation moves on and the ID may be used
  again once its last beat is answered. A completion that is not for a request in flight (its request done
  or its burst failed, its generation old: late after a timeout) or whose byte count is not what its request
  still awaits is dropped whole, never delivered as data. `timeouts` and `dropped` count both (modulo 2^16).
  A late completion could be taken as data only if its ID had timed out 2^gen_bits more times since (twice on
  the card: 16 IDs and 512-byte bursts, five requests at 128 bytes, leave one generation bit), and its byte
  count were the one a request of the same place in the new burst awaits.
- A write burst is sent as memory writes cut at every multiple of the payload size, from its first enabled
  byte to its last (the engine's strobes are one contiguous range), each as soon as its data is gathered
  (read requests may go between them while the next one's data comes in; the burst's last request waits for
  its last beat); its response is OKAY once the last request is on the link (PCIe writes are posted and stay
  in order, so a write has no error to report). The next burst's address is taken after that response.

Write payload is packed and completions are taken two DWORDs (one 64-bit engine beat) a cycle, a 256-bit beat
leaving or the next one coming in the cycle its last DWORD is done: a 128-byte write request takes a header
cycle and 16 data cycles, a 128-byte completion 17 cycles. One gather buffer: a burst's gathering overlaps
its own requests, not the previous burst's.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
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
SIZES = (128, 256, 512, 1024, 2048, 4096)  # Max_Payload_Size and Max_Read_Request_Size, by their code
SIZE_CODE_BITS = 3
MAX_BURST_BEATS = 256  # AXI4's longest burst


def size_code(size: int) -> int:
    """The Device Control encoding of a payload or read request size in bytes."""
    return SIZES.index(size)


def requests_per_burst(burst_bytes: int) -> int:
    """The most read requests an 8-byte-aligned burst of up to `burst_bytes` is cut into: at every 128 bytes,
    the smallest read request size."""
    return -(-(burst_bytes - 8) // SIZES[0]) + 1


def _field(value, width: int):
    """`value` zero-extended (or cut) to exactly `width` bits, so the fields after it keep their places."""
    return Cat(value, Const(0, max(0, width - len(value))))[:width]


def _rq_header(addr, dwords, kind: int, tag):
    """A 4-DWORD RQ descriptor: address, DWORD count and request type, tag (requester ID from the block)."""
    return Cat(Const(0, 2), _field(addr[2:], 62), _field(dwords, 11), Const(kind, 4), Const(0, 17),
               _field(tag, 8), Const(0, 24))


class PcieRequester(wiring.Component):
    def __init__(self, *, id_width: int, max_burst_beats: int, data_width: int = 64, max_payload_bytes: int = 1024,
                 max_read_bytes: int = 4096, completion_timeout_cycles: int = COMPLETION_TIMEOUT_CYCLES):
        if data_width != 64:
            raise ValueError(f"the requester serves a 64-bit engine, not {data_width}-bit: wider beats need "
                             "packing this first version does not have")
        if max_payload_bytes not in SIZES:
            raise ValueError(f"max_payload_bytes must be a PCIe payload size (128..4096), not {max_payload_bytes}")
        if max_read_bytes not in SIZES:
            raise ValueError(f"max_read_bytes must be a PCIe read request size (128..4096), not {max_read_bytes}")
        if not 1 <= max_burst_beats <= MAX_BURST_BEATS:
            raise ValueError(f"max_burst_beats must be 1..{MAX_BURST_BEATS} (AXI4), not {max_burst_beats}")
        self.max_requests = requests_per_burst(max_burst_beats * 8)
        self.place_bits = max(1, (self.max_requests - 1).bit_length())
        if not 1 <= id_width < TAG_BITS - self.place_bits:
            raise ValueError(f"a read request's tag is its AXI ID, its place in the burst ({self.place_bits} bits "
                             f"for {self.max_requests} requests of a {max_burst_beats * 8}-byte burst at 128 bytes "
                             f"each) and at least one generation bit: id_width must be 1..."
                             f"{TAG_BITS - self.place_bits - 1}, not {id_width} (use fewer reads outstanding or "
                             "shorter bursts)")
        if not isinstance(completion_timeout_cycles, int) or completion_timeout_cycles < 16 * TIMEOUT_STEPS:
            raise ValueError(f"completion_timeout_cycles must be an int of at least {16 * TIMEOUT_STEPS} cycles, "
                             f"not {completion_timeout_cycles!r} (the PCIe default range is 50 us to 50 ms)")
        self.id_width, self.max_burst_beats = id_width, max_burst_beats
        self.gen_bits = TAG_BITS - id_width - self.place_bits
        self.max_payload_bytes, self.max_read_bytes = max_payload_bytes, max_read_bytes
        self.completion_timeout_cycles = completion_timeout_cycles
        super().__init__({
            "mem": In(axi_signature(64, 64, id_width)),
            "rq": Out(axis_signature(WIDTH, RQ_USER_BITS)),
            "rc": In(axis_signature(WIDTH, RC_USER_BITS)),
            "max_read_req": In(SIZE_CODE_BITS),
            "max_payload": In(SIZE_CODE_BITS),
            "timeouts": Out(STATUS_BITS),
            "dropped": Out(STATUS_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        mem, rq, rc = self.mem, self.rq, self.rc
        beats, iw, pb = self.max_burst_beats, self.id_width, self.place_bits
        bb = max(1, (beats - 1).bit_length())  # bits of a beat's index in its burst
        ids = range(1 << iw)
        burst_bytes = 8 * beats
        request_bytes = min(self.max_read_bytes, burst_bytes)  # the most one read request asks for
        next_of = [Signal(range(beats + 1), name=f"next{i}") for i in ids]  # the burst's next beat to answer
        end_of = [Signal(range(beats + 1), name=f"end{i}") for i in ids]  # its beats (next == end: ID idle)
        base_of = [Signal(9, name=f"base{i}") for i in ids]  # its address bits [11:3]
        failed_of = [Signal(name=f"failed{i}") for i in ids]
        gen_of = [Signal(self.gen_bits, name=f"gen{i}") for i in ids]  # an ID's tag generation
        age_of = [Signal(range(TIMEOUT_STEPS + 2), name=f"age{i}") for i in ids]  # timer ticks since its address
        # bytes a read request still awaits, by the tag's low bits: Cat(ID, place in the burst)
        left_of = [Signal(range(request_bytes + 1), name=f"left{s & ((1 << iw) - 1)}_{s >> iw}")
                   for s in range(1 << (iw + pb))]
        nxt, end, base, failed = Array(next_of), Array(end_of), Array(base_of), Array(failed_of)
        gen, age, left = Array(gen_of), Array(age_of), Array(left_of)
        waiting_of = [Signal(name=f"waiting{i}") for i in ids]  # a request of the ID awaits completions
        for i in ids:
            m.d.comb += waiting_of[i].eq(Cat(left_of[i | p << iw] != 0 for p in range(self.max_requests)).any())
        waiting = Array(waiting_of)
        # beats in the store, not yet answered: bit Cat(beat, ID)
        stored = Signal(1 << (iw + bb))
        m.submodules.store = store = Memory(shape=64, depth=1 << (iw + bb), init=[])
        store_w, store_r = store.write_port(), store.read_port(transparent_for=())
        expired_age = TIMEOUT_STEPS + 1

        # --- sizes: the host's, capped at the card's, sampled between bursts ---------------------------------------
        mrrs_code, mps_code = Signal(SIZE_CODE_BITS), Signal(SIZE_CODE_BITS)
        mrrs_bytes = Array(Const(s, 13) for s in SIZES[:size_code(self.max_read_bytes) + 1])[mrrs_code]
        mps_dwords = Array(Const(s // 4, 11) for s in SIZES[:size_code(self.max_payload_bytes) + 1])[mps_code]

        def capped(code, size):
            return Mux(code > size_code(size), size_code(size), code)

        # --- the completion timer: one prescaler, a small age per ID ---------------------------------------------
        # A read's age counts ticks from its address, so it expires between TIMEOUT_STEPS and TIMEOUT_STEPS + 1
        # tick periods later: between completion_timeout_cycles and a quarter more.
        period = -(-self.completion_timeout_cycles // TIMEOUT_STEPS)
        prescale, tick = Signal(range(period)), Signal()
        m.d.comb += tick.eq(prescale == 0)
        m.d.sync += prescale.eq(Mux(tick, period - 1, prescale - 1))
        for i in ids:
            with m.If(tick & waiting_of[i] & (age_of[i] != expired_age)):
                m.d.sync += age_of[i].eq(age_of[i] + 1)
        scan = Signal(iw)  # the ID whose timer the RC side looks at this cycle
        m.d.sync += scan.eq(scan + 1)
        expired = Signal()
        m.d.comb += expired.eq((age[scan] == expired_age) & waiting[scan])

        # --- writes: a burst gathered, handed to the RQ side a request at a time as soon as its data is in -------
        buf = Array(Signal(64, name=f"wbuf{i}") for i in range(beats))
        w_addr, w_len, w_id = Signal(64), Signal(8), Signal(iw)
        w_count = Signal(range(beats + 1))
        first_strb, last_strb = Signal(8), Signal(8)
        w_full, w_sent = Signal(), Signal()  # the burst's last beat is in; the burst has been sent
        w_open = Signal()  # a burst's address is taken and the burst is not yet sent

        with m.FSM(name="gather"):
            with m.State("IDLE"):
                m.d.comb += mem.awready.eq(1)
                with m.If(mem.awvalid):
                    m.d.sync += [w_addr.eq(mem.awaddr), w_len.eq(mem.awlen), w_id.eq(mem.awid), w_count.eq(0),
                                 w_open.eq(1)]
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
                    m.d.sync += [w_full.eq(0), w_sent.eq(0), w_open.eq(0)]
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [mem.bvalid.eq(1), mem.bid.eq(w_id), mem.bresp.eq(Resp.OKAY)]
                with m.If(mem.bready):
                    m.next = "IDLE"

        # --- the RQ side: a write's requests, else a read's ----------------------------------------------------
        dw, dw_end = Signal(range(2 * beats + 1)), Signal(range(2 * beats + 1))  # next DWORD to send, the last
        tlp_left = Signal(range(2 * beats + 1))
        first_tlp = Signal()
        lane = Signal(range(DWORDS + 1))
        out_data, out_keep, out_user = Signal(WIDTH), Signal(DWORDS), Signal(8)
        r_addr, r_left, r_id, r_place = Signal(64), Signal(range(burst_bytes + 1)), Signal(iw), Signal(pb)
        w_mid = Signal()  # the burst's requests are being sent (read requests may come between them)
        # the last DWORD is known once the last beat is in; before that a request is sent only if it ends before
        # the last beat (so it is not the burst's last)
        m.d.comb += dw_end.eq(Cat(last_strb[4:] != 0, w_len))
        left_dw = dw_end - dw + 1
        addr = (w_addr & ~Const(7, 64)) + (dw << 2)
        room_dw = mps_dwords - (addr[2:12] & (mps_dwords - 1))  # DWORDs to the next multiple of the size
        tlp_in = Signal()  # the next write request's data is all gathered
        m.d.comb += tlp_in.eq(w_full | ((dw + room_dw <= Cat(Const(0, 1), w_len)) &
                                        (((dw + room_dw - 1) >> 1) < w_count)))

        def dword(i):
            return buf[i[1:]].word_select(i[0], 32)

        with m.FSM(name="rq"):
            with m.State("IDLE"):
                with m.If(~w_mid):
                    m.d.sync += [mrrs_code.eq(capped(self.max_read_req, self.max_read_bytes)),
                                 mps_code.eq(capped(self.max_payload, self.max_payload_bytes))]
                with m.If(w_mid & tlp_in):
                    m.next = "HEADER"
                with m.Elif(~w_mid & w_open & ~w_sent & (w_count != 0)):  # the burst's first beat is in
                    m.d.sync += [dw.eq(Mux(first_strb[:4] != 0, 0, 1)), first_tlp.eq(1), w_mid.eq(1)]
                with m.Elif(mem.arvalid & (nxt[mem.arid] == end[mem.arid])):  # (an ID is taken again once idle)
                    m.d.comb += mem.arready.eq(1)
                    a = mem.arid
                    m.d.sync += [r_addr.eq(Cat(Const(0, 3), mem.araddr[3:])), r_left.eq((mem.arlen + 1) << 3),
                                 r_id.eq(a), r_place.eq(0),
                                 nxt[a].eq(0), end[a].eq(mem.arlen + 1), base[a].eq(mem.araddr[3:12]),
                                 failed[a].eq(0)]
                    for i in ids:
                        with m.If(a == i):
                            # (after the timer above: an address in the cycle of a tick starts at age 0)
                            m.d.sync += [age_of[i].eq(0), stored[i << bb:(i + 1) << bb].eq(0)]
                    m.next = "READ"
            with m.State("READ"):
                room = mrrs_bytes - (r_addr[:12] & (mrrs_bytes - 1))  # bytes to the next multiple of the size
                n = Signal(range(request_bytes + 1))
                m.d.comb += n.eq(Mux(r_left < room, r_left, room))
                with m.If(failed[r_id]):
                    m.next = "IDLE"  # the burst failed: its other requests are not sent
                with m.Else():
                    m.d.comb += [rq.tvalid.eq(1), rq.tkeep.eq(0b1111), rq.tlast.eq(1), rq.tuser.eq(0xFF),
                                 rq.tdata.eq(_rq_header(r_addr, n[2:], MEM_READ, Cat(r_id, r_place, gen[r_id])))]
                    with m.If(rq.tready):
                        m.d.sync += [left[Cat(r_id, r_place)].eq(n), r_addr.eq(r_addr + n), r_left.eq(r_left - n),
                                     r_place.eq(r_place + 1)]
                        with m.If(r_left == n):
                            m.next = "IDLE"
            with m.State("HEADER"):
                n = Signal(range(2 * beats + 1))
                m.d.comb += n.eq(Mux(left_dw > room_dw, room_dw, left_dw))
                last_tlp = left_dw <= room_dw
                end_be = last_strb.word_select(dw_end[0], 4)
                # a one-DWORD request carries all its enables in first_be: the burst's first, last, or both
                fbe = Mux(first_tlp, first_strb.word_select(dw[0], 4), 0xF) & Mux((n == 1) & last_tlp, end_be, 0xF)
                lbe = Mux(n == 1, 0, Mux(last_tlp, end_be, 0xF))
                m.d.sync += [out_data.eq(_rq_header(addr, n, MEM_WRITE, Const(0, 8))), out_keep.eq(0b1111),
                             out_user.eq(Cat(fbe, lbe)), lane.eq(4), tlp_left.eq(n)]
                m.next = "FILL"
            with m.State("FILL"):
                # two DWORDs (one engine beat's worth) a cycle: lanes are filled in pairs from an even lane (the
                # header takes four), so a pair always fits; a beat goes out in the cycle its last DWORD is in
                pair = tlp_left >= 2
                step = Mux(pair, 2, 1)
                new_left, new_lane = Signal.like(tlp_left, name="fill_left"), Signal.like(lane, name="fill_lane")
                fill_data, fill_keep = Signal(WIDTH), Signal(DWORDS)
                m.d.comb += [new_left.eq(tlp_left - step), new_lane.eq(lane + step),
                             fill_data.eq(out_data), fill_keep.eq(out_keep),
                             fill_data.word_select(lane[:3], 32).eq(dword(dw)), fill_keep.bit_select(lane[:3], 1).eq(1)]
                with m.If(pair):
                    m.d.comb += [fill_data.word_select(lane[:3] + 1, 32).eq(dword(dw + 1)),
                                 fill_keep.bit_select(lane[:3] + 1, 1).eq(1)]
                m.d.sync += [dw.eq(dw + step), tlp_left.eq(new_left), lane.eq(new_lane),
                             out_data.eq(fill_data), out_keep.eq(fill_keep)]
                with m.If((new_lane == DWORDS) | (new_left == 0)):
                    m.d.comb += [rq.tvalid.eq(1), rq.tdata.eq(fill_data), rq.tkeep.eq(fill_keep),
                                 rq.tuser.eq(out_user), rq.tlast.eq(new_left == 0)]
                    with m.If(rq.tready):
                        m.d.sync += [out_data.eq(0), out_keep.eq(0), lane.eq(0)]
                        with m.If((new_left == 0) & (dw + step > dw_end)):
                            m.d.sync += [w_sent.eq(1), w_mid.eq(0)]
                            m.next = "IDLE"
                        with m.Elif(new_left == 0):
                            m.d.sync += first_tlp.eq(0)
                            with m.If(w_full):
                                m.next = "HEADER"
                            with m.Else():
                                m.next = "IDLE"  # (to wait for the next request's data, or send a read)
                    with m.Else():
                        m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [rq.tvalid.eq(1), rq.tdata.eq(out_data), rq.tkeep.eq(out_keep), rq.tuser.eq(out_user),
                             rq.tlast.eq(tlp_left == 0)]
                with m.If(rq.tready):
                    m.d.sync += [out_data.eq(0), out_keep.eq(0), lane.eq(0)]
                    with m.If(tlp_left != 0):
                        m.next = "FILL"
                    with m.Elif(dw > dw_end):
                        m.d.sync += [w_sent.eq(1), w_mid.eq(0)]
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += first_tlp.eq(0)
                        with m.If(w_full):
                            m.next = "HEADER"
                        with m.Else():
                            m.next = "IDLE"

        # --- the R side: each ID's beats in order from the store, SLVERR from the first missing one of a failed
        # burst ---------------------------------------------------------------------------------------------------
        ready = Signal(1 << iw)
        for i in ids:
            here = stored[i << bb:(i + 1) << bb].bit_select(next_of[i][:bb], 1)
            m.d.comb += ready[i].eq((next_of[i] != end_of[i]) & (here | failed_of[i]))
        pick = Signal(iw)
        for i in reversed(ids):  # the lowest ready ID
            with m.If(ready[i]):
                m.d.comb += pick.eq(i)
        r_valid, r_id, r_last, r_err = Signal(), Signal(iw), Signal(), Signal()
        m.d.comb += [mem.rvalid.eq(r_valid), mem.rid.eq(r_id), mem.rlast.eq(r_last),
                     mem.rdata.eq(Mux(r_err, 0, store_r.data)), mem.rresp.eq(Mux(r_err, Resp.SLVERR, Resp.OKAY))]
        fire = ready.any() & (~r_valid | mem.rready)
        pick_next = Signal(range(beats + 1))
        m.d.comb += pick_next.eq(nxt[pick])
        beat_at = Cat(pick_next[:bb], pick)
        here = stored.bit_select(beat_at, 1)
        m.d.comb += [store_r.addr.eq(beat_at), store_r.en.eq(fire)]
        with m.If(fire):
            last = pick_next + 1 == end[pick]
            m.d.sync += [r_valid.eq(1), r_id.eq(pick), r_last.eq(last), r_err.eq(~here),
                         nxt[pick].eq(pick_next + 1), stored.bit_select(beat_at, 1).eq(0)]
            with m.If(last):
                m.d.sync += failed[pick].eq(0)
            with m.If(~here):  # the first SLVERR: every later beat of the burst is one too
                for i in ids:
                    with m.If(pick == i):
                        m.d.sync += stored[i << bb:(i + 1) << bb].eq(0)
        with m.Elif(mem.rready):
            m.d.sync += r_valid.eq(0)

        # --- the RC side: completions into the store ---------------------------------------------------------------
        beat, keep = Signal(WIDTH), Signal(DWORDS)
        tag = Signal(iw)  # the ID the completion being taken answers
        slot = Signal(iw + pb)  # its request
        widx = Signal(bb)  # the beat its next data is
        mid = Signal()  # inside a TLP: its next beat is not a start of packet
        rlane = Signal(range(DWORDS + 1))
        low, have_low = Signal(32), Signal()
        timeouts, dropped = Signal(STATUS_BITS), Signal(STATUS_BITS)
        m.d.comb += [self.timeouts.eq(timeouts), self.dropped.eq(dropped)]

        def fail(i):
            """The burst of ID `i` fails: no more of its completions are taken."""
            m.d.sync += failed[i].eq(1)
            for k in ids:
                with m.If(i == k):
                    m.d.sync += [left_of[k | p << iw].eq(0) for p in range(self.max_requests)]

        # the RC descriptor: DW0 lower address [11:0], error code [15:12], byte count [28:16]; DW1 DWORD count,
        # status [13:11], poisoned [14]; DW2 tag [7:0]
        d = [rc.tdata[32 * i: 32 * i + 32] for i in range(DWORDS)]
        c_id, c_slot, c_gen = d[2][:iw], d[2][:iw + pb], d[2][iw + pb:TAG_BITS]
        c_failed = (d[1][11:14] != 0) | d[1][14] | (d[0][12:16] != 0)
        c_left, slot_left = Signal.like(left_of[0], name="c_left"), Signal.like(left_of[0], name="slot_left")
        scan_gen = Signal.like(gen_of[0], name="scan_gen")
        m.d.comb += [c_left.eq(left[c_slot]), slot_left.eq(left[slot]), scan_gen.eq(gen[scan])]
        c_ours = (c_left != 0) & (c_gen == gen[c_id])
        c_expected = d[0][16:29] == c_left  # the bytes the request still awaits
        with m.FSM(name="rc"):
            with m.State("TAKE"):
                with m.If(~mid & expired):
                    # between TLPs only, so no TLP is cut; the ID's late completions now carry an old generation
                    fail(scan)
                    m.d.sync += [gen[scan].eq(scan_gen + 1), timeouts.eq(timeouts + 1)]
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
                        with m.Elif(c_failed):
                            fail(c_id)  # the TLP's own data (a poisoned one has some) is dropped
                            with m.If(~rc.tlast):
                                m.next = "DROP"
                        with m.Else():
                            m.d.sync += [tag.eq(c_id), slot.eq(c_slot), rlane.eq(3), have_low.eq(0),
                                         widx.eq(d[0][3:12] - base[c_id])]
                            m.next = "WALK"
            with m.State("WALK"):
                # a 64-bit store entry a cycle: the held low DWORD and the next one, or two DWORDs of the beat;
                # the beat's last cycle takes the TLP's next beat (and pairs a lone last DWORD with its first)
                in0 = (rlane != DWORDS) & keep.bit_select(rlane[:3], 1)
                in1 = (rlane < DWORDS - 1) & keep.bit_select(rlane[:3] + 1, 1)
                w0, w1 = beat.word_select(rlane[:3], 32), beat.word_select(rlane[:3] + 1, 32)
                pair = ~have_low & in1
                new_rlane = Signal.like(rlane, name="walk_lane")
                m.d.comb += new_rlane.eq(rlane + Mux(pair, 2, 1))
                beat_done = ~in0 | (new_rlane == DWORDS) | ~keep.bit_select(new_rlane[:3], 1)
                with m.If(in0):
                    m.d.sync += rlane.eq(new_rlane)
                    with m.If(have_low | pair):
                        m.d.sync += have_low.eq(0)
                        # (no request awaiting bytes: more data than the byte count said, a malformed TLP,
                        # not delivered)
                        with m.If(slot_left != 0):
                            m.d.comb += [store_w.addr.eq(Cat(widx, tag)), store_w.en.eq(1),
                                         store_w.data.eq(Mux(have_low, Cat(low, w0), Cat(w0, w1)))]
                            m.d.sync += [stored.bit_select(Cat(widx, tag), 1).eq(1), widx.eq(widx + 1),
                                         left[slot].eq(slot_left - 8)]
                    with m.Else():
                        m.d.sync += [low.eq(w0), have_low.eq(1)]
                with m.If(beat_done):
                    with m.If(mid & rc.tvalid & ~rc.tuser[RC_SOP_BIT]):
                        m.d.comb += rc.tready.eq(1)
                        m.d.sync += [beat.eq(rc.tdata), keep.eq(rc.tkeep), rlane.eq(0), mid.eq(~rc.tlast)]
                        with m.If(in0 & ~have_low & ~pair & rc.tkeep[0]):
                            # the beat's last DWORD and the next beat's first make one entry
                            m.d.sync += [have_low.eq(0), rlane.eq(1)]
                            with m.If(slot_left != 0):
                                m.d.comb += [store_w.addr.eq(Cat(widx, tag)), store_w.en.eq(1),
                                             store_w.data.eq(Cat(w0, rc.tdata[:32]))]
                                m.d.sync += [stored.bit_select(Cat(widx, tag), 1).eq(1), widx.eq(widx + 1),
                                             left[slot].eq(slot_left - 8)]
                    with m.Else():
                        m.next = "TAKE"
            with m.State("DROP"):
                # the rest of a TLP that delivers nothing
                m.d.comb += rc.tready.eq(1)
                with m.If(rc.tvalid & rc.tlast):
                    m.d.sync += mid.eq(0)
                    m.next = "TAKE"
        return m
