"""CompletionWriter: writes queues' completion words into their registered regions, and checks the location at enable."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from driver.abi import COMPLETION_BYTES, ErrorCode, Perm
from rtl.records import CODE_BITS, completion_writer_port_signature, write_source_signature
from rtl.params import index_bits
from rtl.region_table import lookup_signature
from rtl.round_robin import RoundRobin
from rtl.validator import _sum_exceeds

OUTSTANDING = 16  # completion-word writes awaiting their response


class CompletionWriter(wiring.Component):
    """Serves queues whose word is due (`dirty`) or whose completion location must be checked after
    enable (`checking`), in round robin. Taking a queue clears its dirty bit and captures its word;
    an event after that sets it again, so the word in memory catches up and never goes down.
    The location is looked up at every write (as the reference does): one that is not 8-byte
    aligned, registered, writable and inside its region is skipped, except at enable, where it
    halts the queue instead. Writes are issued without waiting for earlier responses.

    With `pick_ahead` the queue granted is registered with its region id and looked up the next cycle (a cycle
    more per word), so the round robin's grant no longer leads into the region table's read."""

    def __init__(self, *, num_queues: int, data_width: int, pick_ahead: bool = False):
        self.num_queues, self.data_width, self.pick_ahead = num_queues, data_width, pick_ahead
        super().__init__({
            "flush": In(1),
            "queues": Out(completion_writer_port_signature(num_queues)),
            "region": Out(lookup_signature()),
            "bus": Out(write_source_signature(data_width)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        nq, queue_bits = self.num_queues, index_bits(self.num_queues)
        dwb = self.data_width // 8
        lg = (dwb - 1).bit_length()
        rr = m.submodules.rr = RoundRobin(nq)
        acks = m.submodules.acks = SyncFIFO(width=queue_bits, depth=OUTSTANDING)

        q = Signal(queue_bits)
        value = Signal(64)
        check = Signal()
        offset = Signal(64)
        addr = Signal(64)
        aw_done, w_done = Signal(), Signal()
        code, code_r = Signal(CODE_BITS), Signal(CODE_BITS)
        region_id = Signal(len(self.region.id))
        ok_r = Signal()
        entry = self.region.entry
        # `take` happens in IDLE, before `q` holds the grant: it names the queue granted now. (Naming `q`, the
        # queue served before, cleared that queue's dirty bit: a word due after its capture was never
        # written, e.g. the halt of a queue when another queue's word was written next.)
        m.d.comb += [self.queues.ok.queue.eq(q), self.queues.fail.queue.eq(q),
                     self.queues.fail.code.eq(code_r), self.queues.issue.queue.eq(q), self.queues.ok.valid.eq(ok_r)]
        with m.If(entry.perms == 0):
            m.d.comb += code.eq(ErrorCode.UNKNOWN_REGION)
        with m.Elif(~entry.perms[(Perm.WRITE).bit_length() - 1]):
            m.d.comb += code.eq(ErrorCode.PERMISSION)
        with m.Elif((entry.addr[:3] + offset[:3])[:3] != 0):  # the bus address: one aligned 8-byte write
            m.d.comb += code.eq(ErrorCode.MISALIGNED)
        with m.Elif(_sum_exceeds(offset, Const(COMPLETION_BYTES, 4), entry.size)):
            m.d.comb += code.eq(ErrorCode.OUT_OF_BOUNDS)

        lane = addr[3:lg] if lg > 3 else Const(0, 1)
        bus = self.bus
        m.d.comb += [
            bus.aw.payload.addr.eq(addr & ~(dwb - 1)), bus.aw.payload.len.eq(0),
            bus.w.payload.data.eq(value << Cat(Const(0, 6), lane)),
            bus.w.payload.strb.eq(Const(0xFF, dwb) << Cat(Const(0, 3), lane)),
            bus.w.payload.last.eq(1),
        ]
        m.d.comb += rr.requests.eq((self.queues.dirty | self.queues.checking) & ~self.flush.replicate(nq))
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += [rr.advance.eq(1), self.queues.take.eq(rr.grant_onehot)]
                if not self.pick_ahead:
                    m.d.comb += [self.region.en.eq(1), self.region.id.eq(self.queues.compl_region[rr.grant])]
                with m.If(rr.valid):
                    m.d.sync += [q.eq(rr.grant), value.eq(self.queues.word[rr.grant]),
                                 check.eq(self.queues.checking.bit_select(rr.grant, 1)),
                                 offset.eq(self.queues.compl_offset[rr.grant])]
                    if self.pick_ahead:
                        m.d.sync += region_id.eq(self.queues.compl_region[rr.grant])
                    m.next = "ADDR" if self.pick_ahead else "LOOK"
            if self.pick_ahead:
                with m.State("ADDR"):
                    m.d.comb += [self.region.en.eq(1), self.region.id.eq(region_id)]
                    m.next = "LOOK"
            with m.State("LOOK"):
                # the check's outcome is registered: a failed check at enable halts the queue from FAIL, a cycle
                # later; a passed one clears `checking` as the write starts (the write itself loses no cycle)
                m.d.sync += [addr.eq(entry.addr + offset), aw_done.eq(0), w_done.eq(0), code_r.eq(code)]
                with m.If(code != 0):
                    m.next = "IDLE"
                    with m.If(check):
                        m.next = "FAIL"
                with m.Else():
                    m.d.sync += ok_r.eq(check)
                    m.next = "WRITE"
            with m.State("FAIL"):
                m.d.comb += self.queues.fail.valid.eq(1)
                with m.If(self.queues.fail.ready):
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.sync += ok_r.eq(0)
                m.d.comb += [bus.aw.valid.eq(~aw_done & acks.w_rdy), bus.w.valid.eq(~w_done)]
                aw_now = bus.aw.valid & bus.aw.ready
                w_now = bus.w.valid & bus.w.ready
                m.d.comb += [self.queues.issue.valid.eq(aw_now), acks.w_en.eq(aw_now), acks.w_data.eq(q)]
                with m.If(aw_now):
                    m.d.sync += aw_done.eq(1)
                with m.If(w_now):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | aw_now) & (w_done | w_now)):
                    m.next = "IDLE"
        m.d.comb += [
            bus.b.ready.eq(1),
            self.queues.ack.valid.eq(bus.b.valid), self.queues.ack.queue.eq(acks.r_data), acks.r_en.eq(bus.b.valid),
        ]
        # Between `take` (dirty cleared) and `issue` (counted outstanding) the queue's word is held here: the
        # queue stays busy meanwhile, or STATUS.BUSY falls while memory still has the old word.
        m.d.comb += [self.queues.hold.valid.eq(~fsm.ongoing("IDLE")), self.queues.hold.queue.eq(q)]
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & ~rr.valid & ~acks.r_rdy)
        return m
