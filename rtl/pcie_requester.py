"""PcieRequester: the engine's memory port (an AXI4 slave of 64, 128 or 256-bit beats) as requests on the Xilinx
UltraScale+ PCIe block's RQ stream and completions from its RC stream (256 or 512 bits, DWORD-aligned, no
straddling), a beat a cycle each way. At 512 bits the RQ beats also carry the packet marks the block reads there
(is_sop, is_eop and the last DWORD's lane: rtl/pcie_streams.py); with `rq_straddle` two requests may share a beat,
the second from lane 8 (rtl/pcie_rq_straddle.py), the writes cut into halves two a cycle
(rtl/pcie_write_halves.py); with `rc_straddle` completions may share a beat too, and are realigned to one a beat
with the descriptor beside the data (rtl/pcie_rc_realign.py), two beats per 128-byte completion instead of three.

- Sizes: `max_read_req` and `max_payload` take the Max_Read_Request_Size and Max_Payload_Size the host set in
  the Device Control register, in its encoding (0: 128 bytes ... 5: 4096), as the block reports them
  (cfg_max_read_req; cfg_max_payload, two bits on pcie4_uscale_plus: at most 1024). They are sampled while no
  burst is being cut into requests and capped at the constructor's max_read_bytes and max_payload_bytes, the
  most the card supports (reserved codes 6 and 7 read as the cap).
- A read burst (aligned to the beat: the address's low bits within a beat are ignored, as AXI places a beat's
  bytes by address) becomes memory read requests cut at every multiple of the read request size, so none is
  larger and none crosses 4 KiB, sent one a cycle. Each takes a free slot of a pool of 128 (the lowest) and
  carries it as its 8-bit PCIe tag, with the slot's generation number as the tag's top bit; a request waits
  while every slot is taken. So the link must have Extended Tag Field Enable set (hosts set it when the device
  supports it), and up to 128 read requests are in flight whatever the burst length or MRRS (16 KiB at 128
  bytes, 64 KiB at 512). Completions, in any order between tags and split on beat boundaries within one (a
  read completion boundary is at least 64 bytes), are stored by their lower address in a buffer of one burst
  per ID (2^id_width x max_burst_beats beats) and answered as that ID's R beats in order as soon as the next
  beat is in (IDs in any order between them, the lowest ready first). A completion whose lower address is not
  on a beat boundary is dropped.
- Errors end the read: a completion with a status other than Successful (UR, CA, CRS), the poisoned bit
  (EP) or any error code from the block fails the burst. Its beats already in are still answered in order up
  to the first one missing; from there every remaining beat is SLVERR with no data (the engine ends the
  descriptor in BUS_ERROR) and its requests not yet sent are never sent.
- Completion timeout: a read with a request not fully completed within completion_timeout_cycles of the
  burst's address (10 ms at 250 MHz by default; up to a quarter more, the timer's grain, and never cutting a
  completion TLP already arriving) fails the same way, the generation of each slot it still awaited moves on,
  and the ID may be used again once its last beat is answered. A completion that is not for a request in
  flight (its request done or its burst failed, its generation old: late after a timeout) or whose byte count
  is not what its request still awaits is dropped whole, never delivered as data. `timeouts` and `dropped`
  count both (modulo 2^16). A late completion could be taken as data only if its slot's generation had come
  round again (one bit: another request in that slot timed out since) and its byte count were the one the
  slot's new request awaits. A burst
  that fails by an error completion frees its slots without a new generation, as the tags of a completed
  request are free again.
- Writes: rtl/pcie_write_sender.py (each request out as soon as its data is gathered, two gather buffers so
  the next burst is taken while the previous one's requests go out). Between two requests on RQ a waiting
  read request goes first; a write request's beats are never split.

Completions are unpacked a 256-bit beat a cycle into engine beats, one a cycle: at 256 bits a 128-byte
completion takes 5 RC beats and 5 cycles (its descriptor's beat carries the first five DWORDs); at 64 bits its
32 DWORDs take 16 cycles, the R port's pace. At 512 bits with RC straddled a realigned beat is an engine beat, stored
(and answerable on R) in the cycle it comes.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import axi_signature
from rtl.pcie_completer import WIDTH
from rtl.pcie_requests import (MEM_READ, RC_USER_BITS, REQUESTER_DATA_WIDTHS, RQ_USER_BITS, SIZE_CODE_BITS, SIZES,
                               capped, rq_header, rq_user, size_code, size_of)
from rtl.pcie_rc_realign import RcRealign
from rtl.pcie_rq_straddle import straddle
from rtl.pcie_streams import RQ512_EOP_PTR, RQ512_IS_EOP, RQ512_IS_SOP, axis_signature, layout
from rtl.pcie_write_sender import PcieWriteSender

__all__ = ["COMPLETION_TIMEOUT_CYCLES", "PcieRequester", "RC_USER_BITS", "RQ_USER_BITS", "SIZES", "SIZE_CODE_BITS",
           "TIMEOUT_STEPS", "requests_per_burst", "size_code"]

TAG_BITS = 8  # an extended PCIe tag
SLOT_BITS = 7  # its low bits: a slot of the pool of read requests in flight; the rest a generation of the slot
MAX_ID_WIDTH = 8
# 10 ms at the block's 250 MHz user clock: inside the PCIe default range (50 us to 50 ms)
COMPLETION_TIMEOUT_CYCLES = 2_500_000
TIMEOUT_STEPS = 4  # the timer's grain: a quarter of the timeout
STATUS_BITS = 16
MAX_BURST_BEATS = 256  # AXI4's longest burst


def requests_per_burst(burst_bytes: int, beat_bytes: int = 8) -> int:
    """The most read requests a beat-aligned burst of up to `burst_bytes` is cut into: at every 128 bytes,
    the smallest read request size."""
    return -(-(burst_bytes - beat_bytes) // SIZES[0]) + 1


class PcieRequester(wiring.Component):
    def __init__(self, *, id_width: int, max_burst_beats: int, data_width: int = 64, max_payload_bytes: int = 1024,
                 max_read_bytes: int = 4096, completion_timeout_cycles: int = COMPLETION_TIMEOUT_CYCLES,
                 width: int = WIDTH, rq_straddle: bool = False, rc_straddle: bool = False):
        self.layout = lay = layout(width)
        if (rq_straddle or rc_straddle) and width != 512:
            raise ValueError(f"RQ and RC straddling are a 512-bit interface's, not a {width}-bit one's")
        self.rq_straddle, self.rc_straddle = rq_straddle, rc_straddle
        if data_width not in REQUESTER_DATA_WIDTHS or data_width > width:
            raise ValueError(f"the requester packs engine beats of {REQUESTER_DATA_WIDTHS} bits into the block's "
                             f"{width}-bit beats, not {data_width}-bit ones")
        if max_payload_bytes not in SIZES:
            raise ValueError(f"max_payload_bytes must be a PCIe payload size (128..4096), not {max_payload_bytes}")
        if max_read_bytes not in SIZES:
            raise ValueError(f"max_read_bytes must be a PCIe read request size (128..4096), not {max_read_bytes}")
        beat_bytes = data_width // 8
        if not 1 <= max_burst_beats <= MAX_BURST_BEATS or max_burst_beats * beat_bytes > 4096:
            raise ValueError(f"max_burst_beats must be 1..{MAX_BURST_BEATS} (AXI4) and a burst at most 4 KiB, not "
                             f"{max_burst_beats} beats of {beat_bytes} bytes")
        self.max_requests = requests_per_burst(max_burst_beats * beat_bytes, beat_bytes)
        if not 1 <= id_width <= MAX_ID_WIDTH:
            raise ValueError(f"id_width must be 1..{MAX_ID_WIDTH} (the store holds a burst per ID), not {id_width}")
        if not isinstance(completion_timeout_cycles, int) or completion_timeout_cycles < 16 * TIMEOUT_STEPS:
            raise ValueError(f"completion_timeout_cycles must be an int of at least {16 * TIMEOUT_STEPS} cycles, "
                             f"not {completion_timeout_cycles!r} (the PCIe default range is 50 us to 50 ms)")
        self.data_width, self.id_width, self.max_burst_beats = data_width, id_width, max_burst_beats
        self.slots, self.gen_bits = 1 << SLOT_BITS, TAG_BITS - SLOT_BITS
        self.max_payload_bytes, self.max_read_bytes = max_payload_bytes, max_read_bytes
        self.completion_timeout_cycles = completion_timeout_cycles
        super().__init__({
            "mem": In(axi_signature(64, data_width, id_width)),
            "rq": Out(axis_signature(width, lay.rq_user_bits)),
            "rc": In(axis_signature(width, lay.rc_user_bits)),
            "max_read_req": In(SIZE_CODE_BITS),
            "max_payload": In(SIZE_CODE_BITS),
            "timeouts": Out(STATUS_BITS),
            "dropped": Out(STATUS_BITS),
        })

    def _completions(self, m: Module):
        """The completions as the RC side takes them, and the lanes their descriptor takes in a first beat: the
        block's stream (the descriptor in lanes 0-2), or at 512 bits with RC straddled the realigned one (a
        completion a beat, the descriptor beside the data: rtl/pcie_rc_realign.py)."""
        rc = self.rc
        if self.rc_straddle:
            m.submodules.rc_realign = realign = RcRealign()
            wiring.connect(m, wiring.flipped(rc), realign.rc)
            return realign.out, 0
        return SimpleNamespace(tdata=rc.tdata, tkeep=rc.tkeep, tlast=rc.tlast, tvalid=rc.tvalid, tready=rc.tready,
                               sop=rc.tuser[self.layout.rc_sop], hdr=rc.tdata[:96]), 3

    def _rq_beats(self, m: Module, writer, read_valid, read_header, send_read) -> None:
        """RQ a request a beat at a time: a waiting read request between two write requests, else the writer's
        beats; at 512 bits with the packet marks in tuser."""
        rq, lay = self.rq, self.layout
        w_busy = Signal()  # a write request is partway out
        read_turn = ~w_busy & read_valid
        user = Signal.like(rq.tuser)  # byte enables; the 512-bit stream's packet marks are added below
        with m.If(read_turn):
            m.d.comb += [rq.tvalid.eq(1), rq.tkeep.eq(0b1111), rq.tlast.eq(1),
                         user.eq(rq_user(lay, Const(0xF, 4), Const(0xF, 4))), rq.tdata.eq(read_header)]
            with m.If(rq.tready):
                send_read()
        with m.Else():
            m.d.comb += [rq.tvalid.eq(writer.rq.tvalid), rq.tdata.eq(writer.rq.tdata), rq.tkeep.eq(writer.rq.tkeep),
                         rq.tlast.eq(writer.rq.tlast), user.eq(writer.rq.tuser), writer.rq.tready.eq(rq.tready)]
            with m.If(writer.rq.tvalid & rq.tready):
                m.d.sync += w_busy.eq(~writer.rq.tlast)
        if lay.width == 512:
            # the block reads a packet's start and end (its last DWORD's lane) from tuser at 512 bits; a request's
            # first beat is its start (w_busy: a write's further beats), its last beat its end
            last_lane = Signal(4)
            m.d.comb += last_lane.eq(sum(rq.tkeep[i] for i in range(lay.dwords)) - 1)
            m.d.comb += rq.tuser.eq(user | Cat(Const(0, RQ512_IS_SOP), ~w_busy)
                                    | Cat(Const(0, RQ512_IS_EOP), rq.tlast)
                                    | Cat(Const(0, RQ512_EOP_PTR), last_lane))
        else:
            m.d.comb += rq.tuser.eq(user)

    def _rq_halves(self, m: Module, writer, read_valid, read_header, send_read) -> None:
        """RQ straddled (512 bits): two 256-bit halves a beat, a request starting at either. The first half is the
        writer's next one while a write request is partway out, else a waiting read request, else the writer's
        next; the second continues the first's request, or after a request's end is a waiting read request (one a
        beat) or the writer's next request."""
        h0, h1 = writer.h0, writer.h1
        read = {"valid": read_valid, "data": read_header, "keep": Const(0b1111, 8), "be": Const(0xFF, 8),
                "sop": Const(1), "eop": Const(1)}
        w0 = {name: getattr(h0, name) for name in ("valid", "data", "keep", "be", "sop", "eop")}
        w1 = {name: getattr(h1, name) for name in ("valid", "data", "keep", "be", "sop", "eop")}
        read_a, read_b = Signal(name="read_first"), Signal(name="read_second")
        m.d.comb += [read_a.eq(~writer.in_tlp & read_valid),
                     read_b.eq(writer.in_tlp & h0.eop & read_valid)]
        a = {k: Mux(read_a, read[k], w0[k]) for k in read}
        b = {k: Mux(read_a, w0[k], Mux(read_b, read[k], w1[k])) for k in read}
        straddle(m, self.rq, a, b)
        with m.If(self.rq.tready & a["valid"]):
            with m.If(read_a | read_b):
                send_read()
            m.d.comb += writer.take.eq(Mux(read_a, h0.valid, Mux(read_b, 1, h0.valid + (h0.valid & h1.valid))))

    def elaborate(self, platform):
        m = Module()
        mem, lay = self.mem, self.layout
        dwords = lay.dwords
        beats, iw = self.max_burst_beats, self.id_width
        db = self.data_width // 8
        per_beat = db // 4  # DWORDs an engine beat carries
        lg = (db - 1).bit_length()
        bb = max(1, (beats - 1).bit_length())  # bits of a beat's index in its burst
        ids = range(1 << iw)
        burst_bytes = db * beats
        request_bytes = min(self.max_read_bytes, burst_bytes)  # the most one read request asks for
        next_of = [Signal(range(beats + 1), name=f"next{i}") for i in ids]  # the burst's next beat to answer
        end_of = [Signal(range(beats + 1), name=f"end{i}") for i in ids]  # its beats (next == end: ID idle)
        base_of = [Signal(12 - lg, name=f"base{i}") for i in ids]  # its address bits [11:lg]
        failed_of = [Signal(name=f"failed{i}") for i in ids]
        age_of = [Signal(range(TIMEOUT_STEPS + 2), name=f"age{i}") for i in ids]  # timer ticks since its address
        out_of = [Signal(range(self.max_requests + 1), name=f"out{i}") for i in ids]  # its requests awaited
        # the pool of read requests in flight, by the tag's low bits: the bytes a request still awaits (0: the
        # slot is free), the ID it reads for, the slot's generation (the tag's other bits)
        slots = range(self.slots)
        left_of = [Signal(range(request_bytes + 1), name=f"left{t}") for t in slots]
        owner_of = [Signal(iw, name=f"owner{t}") for t in slots]
        gen_of = [Signal(self.gen_bits, name=f"gen{t}") for t in slots]
        nxt, end, base, failed = Array(next_of), Array(end_of), Array(base_of), Array(failed_of)
        age, out, left, owner, gen = Array(age_of), Array(out_of), Array(left_of), Array(owner_of), Array(gen_of)
        waiting_of = [out_of[i] != 0 for i in ids]  # a request of the ID awaits completions
        waiting = Array(waiting_of)
        # beats in the store, not yet answered: bit Cat(beat, ID)
        stored = Signal(1 << (iw + bb))
        m.submodules.store = store = Memory(shape=self.data_width, depth=1 << (iw + bb), init=[])
        store_w = store.write_port()
        store_r = store.read_port(transparent_for=(store_w,))
        expired_age = TIMEOUT_STEPS + 1

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
        expired = Signal()
        m.d.comb += expired.eq((age[scan] == expired_age) & waiting[scan])

        # --- writes ----------------------------------------------------------------------------------------------
        m.submodules.writer = writer = PcieWriteSender(data_width=self.data_width, id_width=iw,
                                                       max_burst_beats=beats, max_payload_bytes=self.max_payload_bytes,
                                                       width=lay.width, straddle=self.rq_straddle)
        for name, member in writer.axi.signature.members.items():
            if member.flow == Out:  # (the writer's outputs: readies and the response)
                m.d.comb += getattr(mem, name).eq(getattr(writer.axi, name))
            else:
                m.d.comb += getattr(writer.axi, name).eq(getattr(mem, name))
        m.d.comb += writer.max_payload.eq(self.max_payload)

        # --- reads: a burst cut into requests, one a cycle ---------------------------------------------------------
        mrrs_code = Signal(SIZE_CODE_BITS)  # the size a burst is cut to, taken as its address is
        r_active = Signal()  # a burst's requests are being sent
        mrrs_now = Signal(SIZE_CODE_BITS)
        m.d.comb += mrrs_now.eq(Mux(r_active, mrrs_code, capped(self.max_read_req, self.max_read_bytes)))
        mrrs_bytes = size_of(mrrs_now, self.max_read_bytes)
        r_addr, r_left, r_id = Signal(64), Signal(range(burst_bytes + 1)), Signal(iw)
        with m.If(~r_active):
            m.d.sync += mrrs_code.eq(mrrs_now)
        m.d.comb += mem.arready.eq(~r_active & (nxt[mem.arid] == end[mem.arid]))  # (an ID is taken again once idle)
        with m.If(mem.arvalid & mem.arready):
            a = mem.arid
            m.d.sync += [r_addr.eq(Cat(Const(0, lg), mem.araddr[lg:])), r_left.eq((mem.arlen + 1) << lg),
                         r_id.eq(a), r_active.eq(1),
                         nxt[a].eq(0), end[a].eq(mem.arlen + 1), base[a].eq(mem.araddr[lg:12]), failed[a].eq(0)]
            for i in ids:
                with m.If(a == i):
                    # (after the timer above: an address in the cycle of a tick starts at age 0)
                    m.d.sync += [age_of[i].eq(0), stored[i << bb:(i + 1) << bb].eq(0)]
        # the burst whose next request may go now: the one being cut, or one whose address is taken in this cycle
        # (its first request leaves with it, not a cycle later)
        ar_fire = Signal()
        q_addr, q_left, q_id = Signal(64), Signal.like(r_left), Signal(iw)
        m.d.comb += [ar_fire.eq(mem.arvalid & mem.arready),
                     q_addr.eq(Mux(r_active, r_addr, Cat(Const(0, lg), mem.araddr[lg:]))),
                     q_left.eq(Mux(r_active, r_left, (mem.arlen + 1) << lg)),
                     q_id.eq(Mux(r_active, r_id, mem.arid))]
        room = mrrs_bytes - (q_addr[:12] & (mrrs_bytes - 1))  # bytes to the next multiple of the size
        n = Signal(range(request_bytes + 1))
        m.d.comb += n.eq(Mux(q_left < room, q_left, room))
        free = Signal(self.slots)  # slots no request awaits
        m.d.comb += free.eq(Cat(v == 0 for v in left_of))
        pool = Signal(SLOT_BITS)  # the lowest free slot: the next read request's
        for t in reversed(slots):
            with m.If(free[t]):
                m.d.comb += pool.eq(t)
        read_valid, sent_read = Signal(), Signal()
        m.d.comb += read_valid.eq(((r_active & ~failed[r_id]) | ar_fire) & free.any())
        with m.If(r_active & failed[r_id]):
            m.d.sync += r_active.eq(0)  # the burst failed: its other requests are not sent

        # --- RQ: a read request between two write requests, else the writer's beats ------------------------------
        read_header = rq_header(q_addr, n[2:], MEM_READ, Cat(pool, gen[pool]))

        def send_read():
            m.d.comb += sent_read.eq(1)
            m.d.sync += [left[pool].eq(n), owner[pool].eq(q_id), r_addr.eq(q_addr + n), r_left.eq(q_left - n)]
            with m.If(q_left == n):
                m.d.sync += r_active.eq(0)

        if self.rq_straddle:
            self._rq_halves(m, writer, read_valid, read_header, send_read)
        else:
            self._rq_beats(m, writer, read_valid, read_header, send_read)

        # --- the R side: each ID's beats in order from the store, SLVERR from the first missing one of a failed
        # burst. A beat written into the store in this cycle may be answered in it (the read port sees the write). --
        tag = Signal(iw)  # the ID the completion being taken answers (the RC side below)
        widx = Signal(bb)  # the beat its next data is
        stores = Signal()  # a beat is written into the store now
        w_tag, w_widx = Signal(iw), Signal(bb)  # where: the completion's ID, the beat (a first beat's from RC)
        lands = Signal()  # that beat may be answered in this cycle (not a first beat taken straight from RC)
        landing = Signal(1 << (iw + bb))
        m.d.comb += landing.eq(Mux(lands, 1, 0) << Cat(w_widx, w_tag))
        present = stored | landing
        ready = Signal(1 << iw)
        for i in ids:
            here = present[i << bb:(i + 1) << bb].bit_select(next_of[i][:bb], 1)
            m.d.comb += ready[i].eq((next_of[i] != end_of[i]) & (here | failed_of[i]))
        pick = Signal(iw)
        for i in reversed(ids):  # the lowest ready ID
            with m.If(ready[i]):
                m.d.comb += pick.eq(i)
        r_valid, rr_id, r_last, r_err = Signal(), Signal(iw), Signal(), Signal()
        m.d.comb += [mem.rvalid.eq(r_valid), mem.rid.eq(rr_id), mem.rlast.eq(r_last),
                     mem.rdata.eq(Mux(r_err, 0, store_r.data)), mem.rresp.eq(Mux(r_err, Resp.SLVERR, Resp.OKAY))]
        fire = ready.any() & (~r_valid | mem.rready)
        pick_next = Signal(range(beats + 1))
        m.d.comb += pick_next.eq(nxt[pick])
        beat_at = Cat(pick_next[:bb], pick)
        here = present.bit_select(beat_at, 1)
        m.d.comb += [store_r.addr.eq(beat_at), store_r.en.eq(fire)]
        with m.If(fire):
            last = pick_next + 1 == end[pick]
            m.d.sync += [r_valid.eq(1), rr_id.eq(pick), r_last.eq(last), r_err.eq(~here),
                         nxt[pick].eq(pick_next + 1), stored.bit_select(beat_at, 1).eq(0)]
            with m.If(last):
                m.d.sync += failed[pick].eq(0)
            with m.If(~here):  # the first SLVERR: every later beat of the burst is one too
                for i in ids:
                    with m.If(pick == i):
                        m.d.sync += stored[i << bb:(i + 1) << bb].eq(0)
        with m.Elif(mem.rready):
            m.d.sync += r_valid.eq(0)

        # --- the RC side: completions into the store, an engine beat a cycle ---------------------------------------
        # `acc` holds a completion's DWORDs not yet stored (a beat's worth at most, plus the RC beat just taken);
        # the bits above its count are zero. Realigned RC at 512-bit engine beats (`direct`) has each completion's
        # data from lane 0, an engine beat an RC beat: a beat is stored in the cycle it is taken, with no `acc`.
        direct = self.rc_straddle and per_beat == dwords
        hold = dwords + per_beat
        acc, acc_n = Signal(32 * hold), Signal(range(hold + 1))
        slot = Signal(SLOT_BITS)  # the request of the completion being taken
        mid = Signal()  # inside a TLP: its next beat is not a start of packet
        dropping = Signal()  # the TLP delivers nothing
        timeouts, dropped = Signal(STATUS_BITS), Signal(STATUS_BITS)
        m.d.comb += [self.timeouts.eq(timeouts), self.dropped.eq(dropped)]

        failing, fail_id, fail_timeout = Signal(), Signal(iw), Signal()  # a burst fails (applied below)

        def fail(i, timeout: bool = False):
            """The burst of ID `i` fails: no more of its completions are taken."""
            m.d.comb += [failing.eq(1), fail_id.eq(i), fail_timeout.eq(timeout)]

        src, header_lanes = self._completions(m)
        lanes = Cat(Mux(src.tkeep[i], src.tdata.word_select(i, 32), 0) for i in range(dwords))
        taken = Signal(range(dwords + 1))
        m.d.comb += taken.eq(sum(src.tkeep[i] for i in range(dwords)))
        # the RC descriptor: DW0 lower address [11:0], error code [15:12], byte count [28:16]; DW1 DWORD count,
        # status [13:11], poisoned [14]; DW2 tag [7:0]
        d = [src.hdr[32 * i: 32 * i + 32] for i in range(3)]
        c_slot, c_gen = d[2][:SLOT_BITS], d[2][SLOT_BITS:TAG_BITS]
        c_failed = (d[1][11:14] != 0) | d[1][14] | (d[0][12:16] != 0)
        c_left, c_id = Signal.like(left_of[0], name="c_left"), Signal(iw, name="c_id")
        c_widx = Signal(bb, name="c_widx")
        m.d.comb += [c_id.eq(owner[c_slot]), c_widx.eq(d[0][lg:12] - base[c_id])]

        slot_left = Signal.like(left_of[0], name="slot_left")  # the bytes the stored beat's request awaits
        w_slot = Signal(SLOT_BITS)

        def store_beat(data):
            # (no request awaiting bytes: more data than the byte count said, a malformed TLP, not delivered)
            with m.If(stores):
                m.d.comb += [store_w.addr.eq(Cat(w_widx, w_tag)), store_w.en.eq(1), store_w.data.eq(data)]
                # (a beat answered in the cycle it lands is not kept)
                m.d.sync += [stored.bit_select(Cat(w_widx, w_tag), 1).eq(~(fire & (beat_at == Cat(w_widx, w_tag)))),
                             widx.eq(w_widx + 1), left[w_slot].eq(slot_left - db)]

        if direct:
            first_ok = Signal()  # a first beat taken is the awaited completion's data
            m.d.comb += [c_left.eq(left[c_slot]),
                         w_tag.eq(Mux(mid, tag, c_id)), w_widx.eq(Mux(mid, widx, c_widx)),
                         w_slot.eq(Mux(mid, slot, c_slot)), slot_left.eq(Mux(mid, left[slot], c_left)),
                         stores.eq(src.tvalid & src.tready & (taken == dwords) & (slot_left != 0)
                                   & Mux(mid, ~dropping, first_ok)),
                         lands.eq(stores)]
        else:
            m.d.comb += [w_tag.eq(tag), w_widx.eq(widx), w_slot.eq(slot), slot_left.eq(left[slot])]
            emit = Signal()
            m.d.comb += [emit.eq(acc_n >= per_beat), stores.eq(emit & (slot_left != 0)), lands.eq(stores)]
            store_beat(acc[:self.data_width])
            # what stays after this cycle's beat: none between TLPs if less than a beat (a malformed tail)
            n_after = Signal(range(hold + 1))
            m.d.comb += n_after.eq(Mux(~mid & ~emit, 0, acc_n - Mux(emit, per_beat, 0)))
            shifted = Mux(emit, acc[32 * per_beat:], acc)
            m.d.sync += [acc.eq(shifted), acc_n.eq(n_after)]
            placed = Array(Cat(Const(0, 32 * k), lanes)[:32 * hold] for k in range(per_beat + 1))[n_after]
            # (the previous TLP's last beat may be stored in this cycle)
            m.d.comb += c_left.eq(Mux(stores & (slot == c_slot), slot_left - db, left[c_slot]))
        done = stores & (slot_left == db)  # the request's last bytes: its slot is free again
        c_ours = (c_left != 0) & (c_gen == gen[c_slot])
        # the bytes the request still awaits, from a beat boundary
        c_expected = (d[0][16:29] == c_left) & (d[0][2:lg] == 0)
        expire = ~mid & expired & (acc_n == 0)
        m.d.sync += scan.eq(Mux(expired & ~expire, scan, scan + 1))  # (an expired ID waits for the TLP to end)
        with m.If(mid):
            with m.If(src.tvalid & src.tready):
                m.d.sync += mid.eq(~src.tlast)
            if direct:
                m.d.comb += src.tready.eq(1)
            else:
                m.d.comb += src.tready.eq(dropping | (n_after + dwords <= hold))
                with m.If(src.tvalid & src.tready & ~dropping):
                    m.d.sync += [acc.eq(shifted | placed), acc_n.eq(n_after + taken)]
        with m.Elif(expire):
            # between TLPs only, so no TLP is cut; the ID's late completions now carry an old generation
            fail(scan, timeout=True)
            m.d.sync += timeouts.eq(timeouts + 1)
        with m.Elif(~expired & ((acc_n == 0) if direct else (n_after == 0))):
            m.d.comb += src.tready.eq(1)
            with m.If(src.tvalid):
                m.d.sync += [mid.eq(~src.tlast), dropping.eq(1)]
                with m.If(~src.sop | ~c_ours | ~(c_failed | c_expected)):
                    m.d.sync += dropped.eq(dropped + 1)
                with m.Elif(c_failed):
                    fail(c_id)  # the TLP's own data (a poisoned one has some) is dropped
                with m.Else():
                    m.d.sync += [dropping.eq(0), tag.eq(c_id), slot.eq(c_slot), widx.eq(c_widx)]
                    if direct:
                        m.d.comb += first_ok.eq(1)
                    else:
                        m.d.sync += [acc.eq(lanes[header_lanes * 32:]),
                                     acc_n.eq(Mux(taken > header_lanes, taken - header_lanes, 0))]
        if direct:
            store_beat(lanes)  # (after the first beat's `widx`: its store moves it on)

        # --- the pool and each ID's count of requests awaited (after every other update: a failure wins) ---------
        for i in ids:
            with m.If(failing & (fail_id == i)):
                m.d.sync += out_of[i].eq(0)
            with m.Else():
                m.d.sync += out_of[i].eq(out_of[i] + (sent_read & (q_id == i)) - (done & (w_tag == i)))
        with m.If(failing):
            m.d.sync += failed[fail_id].eq(1)
            for t in slots:
                # the ID's requests in flight, the one sent in this cycle too; after a timeout their late
                # completions carry an old generation
                mine = ((owner_of[t] == fail_id) & (left_of[t] != 0)) | (sent_read & (q_id == fail_id) & (pool == t))
                with m.If(mine):
                    m.d.sync += left_of[t].eq(0)
                    with m.If(fail_timeout):
                        m.d.sync += gen_of[t].eq(gen_of[t] + 1)
        return m
