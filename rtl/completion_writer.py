"""CompletionWriter: writes queues' completion words into their registered regions, and checks the location at enable."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from driver.abi import COMPLETION_BYTES, ErrorCode, Perm
from rtl.records import CODE_BITS, completion_writer_events_signature
from rtl.params import EngineParams
from rtl.region_table import lookup_signature
from rtl.round_robin import RoundRobin
from rtl.write_mux import write_source_signature

OUTSTANDING = 16  # completion-word writes awaiting their response


class CompletionWriter(wiring.Component):
    """Serves queues whose word is due (`dirty`) or whose completion location must be checked after
    enable (`checking`), in round robin. Taking a queue clears its dirty bit and captures its word;
    an event after that sets it again, so the word in memory catches up and never goes down.
    The location is looked up at every write (as the reference does): one that is not 8-byte
    aligned, registered, writable and inside its region is skipped, except at enable, where it
    halts the queue instead. Writes are issued without waiting for earlier responses."""

    def __init__(self, p: EngineParams):
        self.p = p
        nq = p.num_queues
        super().__init__({
            "dirty": In(nq), "checking": In(nq), "flush": In(1),
            "word": In(data.ArrayLayout(64, nq)),
            "compl_region": In(data.ArrayLayout(16, nq)),
            "compl_offset": In(data.ArrayLayout(64, nq)),
            "region": Out(lookup_signature()),
            "events": Out(completion_writer_events_signature(p.queue_bits)),
            "bus": Out(write_source_signature(p.data_width)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        dwb = p.data_bytes
        lg = (dwb - 1).bit_length()
        rr = m.submodules.rr = RoundRobin(p.num_queues)
        acks = m.submodules.acks = SyncFIFO(width=p.queue_bits, depth=OUTSTANDING)

        q = Signal(p.queue_bits)
        value = Signal(64)
        check = Signal()
        offset = Signal(64)
        addr = Signal(64)
        aw_done, w_done = Signal(), Signal()
        code = Signal(CODE_BITS)
        entry = self.region.entry
        # `take` happens in IDLE, before `q` holds the grant: it names the queue granted now. (Naming `q`, the
        # queue served before, cleared that queue's dirty bit: a word due after its capture was never
        # written, e.g. the halt of a queue when another queue's word was written next.)
        m.d.comb += [self.events.take.queue.eq(rr.grant), self.events.ok.queue.eq(q), self.events.fail.queue.eq(q),
                     self.events.fail.code.eq(code), self.events.issue.queue.eq(q)]
        with m.If(entry.perms == 0):
            m.d.comb += code.eq(ErrorCode.UNKNOWN_REGION)
        with m.Elif(~entry.perms[(Perm.WRITE).bit_length() - 1]):
            m.d.comb += code.eq(ErrorCode.PERMISSION)
        with m.Elif((entry.addr[:3] + offset[:3])[:3] != 0):  # the bus address: one aligned 8-byte write
            m.d.comb += code.eq(ErrorCode.MISALIGNED)
        with m.Elif(offset + COMPLETION_BYTES > entry.size):
            m.d.comb += code.eq(ErrorCode.OUT_OF_BOUNDS)

        lane = addr[3:lg] if lg > 3 else Const(0, 1)
        bus = self.bus
        m.d.comb += [
            bus.aw_addr.eq(addr & ~(dwb - 1)), bus.aw_len.eq(0),
            bus.w_data.eq(value << Cat(Const(0, 6), lane)),
            bus.w_strb.eq(Const(0xFF, dwb) << Cat(Const(0, 3), lane)),
            bus.w_last.eq(1),
        ]
        m.d.comb += rr.requests.eq((self.dirty | self.checking) & ~self.flush.replicate(p.num_queues))
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += [rr.advance.eq(1), self.events.take.valid.eq(rr.valid),
                             self.region.en.eq(1), self.region.id.eq(self.compl_region[rr.grant])]
                with m.If(rr.valid):
                    m.d.sync += [q.eq(rr.grant), value.eq(self.word[rr.grant]),
                                 check.eq(self.checking.bit_select(rr.grant, 1)),
                                 offset.eq(self.compl_offset[rr.grant])]
                    m.next = "LOOK"
            with m.State("LOOK"):
                m.d.sync += [addr.eq(entry.addr + offset), aw_done.eq(0), w_done.eq(0)]
                with m.If(code != 0):
                    m.d.comb += self.events.fail.valid.eq(check)
                    with m.If(~check | self.events.fail.ready):
                        m.next = "IDLE"
                with m.Else():
                    m.d.comb += self.events.ok.valid.eq(check)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [bus.aw_valid.eq(~aw_done & acks.w_rdy), bus.w_valid.eq(~w_done)]
                aw_now = bus.aw_valid & bus.aw_ready
                w_now = bus.w_valid & bus.w_ready
                m.d.comb += [self.events.issue.valid.eq(aw_now), acks.w_en.eq(aw_now), acks.w_data.eq(q)]
                with m.If(aw_now):
                    m.d.sync += aw_done.eq(1)
                with m.If(w_now):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | aw_now) & (w_done | w_now)):
                    m.next = "IDLE"
        m.d.comb += [
            bus.b_ready.eq(1),
            self.events.ack.valid.eq(bus.b_valid), self.events.ack.queue.eq(acks.r_data), acks.r_en.eq(bus.b_valid),
        ]
        # Between `take` (dirty cleared) and `issue` (counted outstanding) the queue's word is held here: the
        # queue stays busy meanwhile, or STATUS.BUSY falls while memory still has the old word.
        m.d.comb += [self.events.hold.valid.eq(~fsm.ongoing("IDLE")), self.events.hold.queue.eq(q)]
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & ~rr.valid & ~acks.r_rdy)
        return m
