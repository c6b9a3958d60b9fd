"""RegisterFile: decodes the BAR's registers from driver/abi.py and routes queue and region blocks to their owners."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from driver.abi import (
    DEVICE_MAGIC, GLOBAL, QUEUE, REGION, WINDOW_BASE, Capability, version_word, window_stride,
)
from rtl.abi_layouts import bits_of
from rtl.axil_slave import register_bus_signature
from rtl.records import errlog_read_signature, table_port_signature
from rtl.params import CSR_ADDR_WIDTH, index_bits

CAPS = (Capability.NOTIFY | Capability.FENCE | Capability.IMM | Capability.ERROR_LOG | Capability.BUS_ERRORS
        | Capability.PERF_COUNTERS)


class RegisterFile(wiring.Component):
    """Global registers live here (control, status, error log view, counters). Writes and reads in
    the REGION and QUEUE blocks go to the region table and the queue table. Reads are answered the
    cycle after the strobe. 64-bit counters read atomically: reading the low word latches the high
    word, which the next read of the high word returns.

    Writing 1 to STATUS.ERRLOG_OVERFLOW clears the error log's overflow flag (RW1C).

    CONTROL.RESET starts a flush: every queue stops, the pipeline drains (bus transactions in flight
    finish), then `soft_reset` clears queues, regions, the error log and the counters, and RESET
    reads 0 again."""

    def __init__(self, *, num_queues: int, slots: int, num_regions: int, data_width: int):
        self.num_queues, self.slots, self.num_regions, self.data_width = num_queues, slots, num_regions, data_width
        super().__init__({
            "bus": In(register_bus_signature(CSR_ADDR_WIDTH)),
            # queue table
            "queues": Out(table_port_signature(index_bits(num_queues), 6, word=True)),
            # region table
            "regions": Out(table_port_signature(index_bits(num_regions), 5, read_enable=True)),
            # error log
            "log": In(errlog_read_signature()),
            # engine state
            "engine_enable": Out(1), "flush": Out(1), "soft_reset": Out(1),
            "flush_next": Out(1),  # what `flush` holds from the next cycle on (for copies of it elsewhere)
            "drained": In(1),  # no descriptor or bus transaction in flight anywhere
            "idle": In(1),  # drained, and no queue has work
            "halted_any": In(1),
            "descriptors": In(64), "bytes": In(64), "reads_inflight": In(32),
            "stall_read": In(1), "stall_write": In(1), "stall_buffer": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        b = self.bus
        g = {r.name: r.offset for r in GLOBAL.registers}
        assert REGION.stride == 1 << 5 and QUEUE.stride == 1 << 6, "block strides are decoded as bit fields"

        def decode(addr):
            is_global = addr < REGION.base
            region = (addr - REGION.base)[5:]
            is_region = (addr >= REGION.base) & (addr < QUEUE.base) & (region < self.num_regions)
            queue = (addr - QUEUE.base)[6:]
            is_queue = (addr >= QUEUE.base) & (addr < WINDOW_BASE) & (queue < self.num_queues)
            return is_global, is_region, region, is_queue, queue

        # --- writes ----------------------------------------------------------------------
        wg, wr, wreg, wq, wque = decode(b.w_addr)
        m.d.comb += [
            self.queues.w_valid.eq(b.w_valid & wq), self.queues.w_index.eq(wque), self.queues.w_offset.eq(b.w_addr[:6]),
            self.queues.w_data.eq(b.w_data),
            self.regions.w_valid.eq(b.w_valid & wr & ~self.flush), self.regions.w_index.eq(wreg),
            self.regions.w_offset.eq(b.w_addr[:5]), self.regions.w_data.eq(b.w_data),
        ]
        enable_bit = bits_of(GLOBAL, "CONTROL", "ENABLE").start
        reset_bit = bits_of(GLOBAL, "CONTROL", "RESET").start
        overflow_bit = bits_of(GLOBAL, "STATUS", "ERRLOG_OVERFLOW").start  # RW1C; STATUS's other bits ignore writes
        m.d.comb += self.flush_next.eq(self.flush)
        m.d.sync += self.flush.eq(self.flush_next)
        with m.If(b.w_valid & wg):
            with m.Switch(b.w_addr[:12]):
                with m.Case(g["CONTROL"]):
                    m.d.sync += self.engine_enable.eq(b.w_data[enable_bit])
                    with m.If(b.w_data[reset_bit]):
                        m.d.comb += self.flush_next.eq(1)
                with m.Case(g["ERRLOG_POP"]):
                    m.d.comb += self.log.pop.eq(1)
                with m.Case(g["STATUS"]):
                    m.d.comb += self.log.clear_overflow.eq(b.w_data[overflow_bit])
        # `drained` is registered (its terms come from every stage): it counts once the flush has held for a
        # cycle, so that what started in the cycle before the flush has shown in it
        drained_r, flushing = Signal(), Signal()
        m.d.sync += [drained_r.eq(self.drained), flushing.eq(self.flush & ~self.soft_reset)]
        with m.If(self.flush & flushing & drained_r):
            m.d.comb += self.soft_reset.eq(1)
            m.d.comb += self.flush_next.eq(0)

        # --- counters --------------------------------------------------------------------
        cycles = Signal(64)
        stalls = {name: Signal(32, name=name.lower()) for name in ("STALL_READ", "STALL_WRITE", "STALL_BUFFER")}
        m.d.sync += cycles.eq(cycles + 1)
        for name, strobe in zip(stalls, (self.stall_read, self.stall_write, self.stall_buffer)):
            m.d.sync += stalls[name].eq(stalls[name] + strobe)
        with m.If(self.soft_reset):
            m.d.sync += [cycles.eq(0)] + [s.eq(0) for s in stalls.values()]

        # --- reads: decode at the strobe, answer next cycle ---------------------------------
        rg, rr_, rreg, rq, rque = decode(b.r_addr)
        r_global, r_queue = Signal(), Signal()
        r_off = Signal(12)
        m.d.comb += [self.regions.r_en.eq(b.r_valid & rr_), self.regions.r_index.eq(rreg), self.regions.r_offset.eq(b.r_addr[:5])]
        r_region = Signal()
        with m.If(b.r_valid):
            m.d.sync += [r_global.eq(rg), r_region.eq(rr_), r_queue.eq(rq), r_off.eq(b.r_addr[:12]),
                         self.queues.r_index.eq(rque)]
        m.d.comb += self.queues.r_offset.eq(r_off[:6])

        hi_latch = Signal(32)  # high word of the last 64-bit value whose low word was read
        status = {name: bits_of(GLOBAL, "STATUS", name).start
                  for name in ("ENABLED", "IDLE", "HALTED", "ERRLOG_VALID", "ERRLOG_OVERFLOW")}
        head_code, head_queue = bits_of(GLOBAL, "ERRLOG_HEAD", "CODE"), bits_of(GLOBAL, "ERRLOG_HEAD", "QUEUE")
        consts = {
            "ID": DEVICE_MAGIC, "VERSION": version_word(), "CAPS": int(CAPS), "NUM_QUEUES": self.num_queues,
            "SLOTS": self.slots, "NUM_REGIONS": self.num_regions,
            "DATA_BYTES": self.data_width // 8, "WINDOW_BASE": WINDOW_BASE, "WINDOW_STRIDE": window_stride(self.slots),
        }
        wide = {"CYCLES": cycles, "DESCRIPTORS": self.descriptors, "BYTES": self.bytes}
        with m.If(r_global):
            with m.Switch(r_off):
                for name, value in consts.items():
                    with m.Case(g[name]):
                        m.d.comb += b.r_data.eq(value)
                with m.Case(g["CONTROL"]):
                    m.d.comb += [b.r_data[enable_bit].eq(self.engine_enable), b.r_data[reset_bit].eq(self.flush)]
                with m.Case(g["STATUS"]):
                    m.d.comb += [
                        b.r_data[status["ENABLED"]].eq(self.engine_enable), b.r_data[status["IDLE"]].eq(self.idle),
                        b.r_data[status["HALTED"]].eq(self.halted_any),
                        b.r_data[status["ERRLOG_VALID"]].eq(self.log.valid),
                        b.r_data[status["ERRLOG_OVERFLOW"]].eq(self.log.overflow),
                    ]
                with m.Case(g["ERRLOG_HEAD"]):
                    m.d.comb += [b.r_data[head_code].eq(self.log.head.code),
                                 b.r_data[head_queue].eq(self.log.head.queue)]
                with m.Case(g["ERRLOG_COOKIE"]):
                    m.d.comb += b.r_data.eq(self.log.head.cookie)
                with m.Case(g["ERRLOG_INDEX"]):
                    m.d.comb += b.r_data.eq(self.log.head.index)
                for name, value in wide.items():
                    with m.Case(g[name + "_LO"]):
                        m.d.comb += b.r_data.eq(value[:32])
                        m.d.sync += hi_latch.eq(value[32:])
                    with m.Case(g[name + "_HI"]):
                        m.d.comb += b.r_data.eq(hi_latch)
                with m.Case(g["READS_INFLIGHT"]):
                    m.d.comb += b.r_data.eq(self.reads_inflight)
                for name, value in stalls.items():
                    with m.Case(g[name]):
                        m.d.comb += b.r_data.eq(value)
        with m.Elif(r_region):
            m.d.comb += b.r_data.eq(self.regions.r_data)
        with m.Elif(r_queue):
            qo = {r.name: r.offset for r in QUEUE.registers}
            with m.Switch(r_off[:6]):
                with m.Case(qo["COMPLETED_LO"]):
                    m.d.comb += b.r_data.eq(self.queues.r_word[:32])
                    m.d.sync += hi_latch.eq(self.queues.r_word[32:])
                with m.Case(qo["COMPLETED_HI"]):
                    m.d.comb += b.r_data.eq(hi_latch)
                with m.Default():
                    m.d.comb += b.r_data.eq(self.queues.r_data)
        return m
