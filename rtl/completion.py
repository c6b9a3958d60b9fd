"""CompletionUnit: retires descriptors in issue order once the write responses of their data are back."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import ErrorCode, Resp

from rtl.records import DoneKind, centry_layout, done_signature, write_response_stream
from rtl.params import index_bits


class CompletionUnit(wiring.Component):
    """Entries come from the write planner in the order their bursts were issued; responses come back
    in the same order (one write ID). An entry with `burst` waits for its response; one with `marker`
    then retires its descriptor: dropped, halting its queue (an error code, or any error response
    for its data: BUS_ERROR), or completed (counted in the descriptor and byte counters). Completions
    of a queue that has already halted are not counted: they ran after the error."""

    def __init__(self, *, num_queues: int):
        queue_bits = index_bits(num_queues)
        super().__init__({
            "cent": In(stream.Signature(centry_layout(queue_bits))),
            "b": In(write_response_stream()),
            "halted": In(num_queues),
            "done": Out(done_signature(queue_bits)),
            "descriptors": Out(64), "bytes": Out(64),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        e = self.cent.payload
        desc_err = Signal()
        fire, berr, err = Signal(), Signal(), Signal()
        m.d.comb += [
            self.b.ready.eq(self.cent.valid & e.burst),
            fire.eq(self.cent.valid & (~e.burst | self.b.valid)),
            self.cent.ready.eq(fire),
            berr.eq(e.burst & (self.b.payload != Resp.OKAY)),
            err.eq(desc_err | berr),
        ]
        d = self.done.entry
        m.d.comb += [d.queue.eq(e.queue), d.notify.eq(e.notify), d.cookie.eq(e.cookie), d.index.eq(e.index),
                     d.code.eq(Mux(e.code != 0, e.code, ErrorCode.BUS_ERROR))]
        with m.If(e.dropped):
            m.d.comb += d.kind.eq(DoneKind.RETIRE)
        with m.Elif((e.code != 0) | err):
            m.d.comb += d.kind.eq(DoneKind.HALT)
        with m.Elif(self.halted.bit_select(e.queue, 1)):
            m.d.comb += d.kind.eq(DoneKind.RETIRE)
        with m.Else():
            m.d.comb += d.kind.eq(DoneKind.SUCCESS)
        with m.If(fire):
            with m.If(e.marker):
                m.d.comb += self.done.valid.eq(1)
                m.d.sync += desc_err.eq(0)
                with m.If(d.kind == DoneKind.SUCCESS):
                    m.d.sync += [self.descriptors.eq(self.descriptors + 1), self.bytes.eq(self.bytes + e.length)]
            with m.Else():
                m.d.sync += desc_err.eq(err)
        m.d.comb += self.idle.eq(~self.cent.valid)
        return m
