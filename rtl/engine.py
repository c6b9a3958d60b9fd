"""Engine: the arkdma DMA engine, its BAR (AXI4-Lite registers, AXI4 submission windows) and its host-memory AXI4 master."""

from __future__ import annotations

from amaranth import Module, ResetInserter, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rtl.axi import axi_lite_signature, axi_signature, join
from rtl.axil_slave import AxiLiteSlave
from rtl.completion import CompletionUnit
from rtl.completion_writer import CompletionWriter
from rtl.error_log import ErrorLog
from rtl.fall_through import FallThroughFIFO
from rtl.head_fifo import HeadFIFO
from rtl.records import centry_layout, job_layout, wentry_layout
from rtl.params import ADDR_WIDTH, EngineParams
from rtl.queues import Queues
from rtl.read_engine import ReadEngine
from rtl.read_tracker import ReadTracker
from rtl.region_table import RegionTable
from rtl.register_file import RegisterFile
from rtl.validator import Validator
from rtl.windows import SubmissionWindows
from rtl.write_data import WriteData
from rtl.write_mux import WriteMux
from rtl.write_planner import WritePlanner

JOB_QUEUE = 4  # validated jobs waiting for the read engine
W_ENTRIES = 8  # write bursts planned ahead of their data


class Engine(wiring.Component):
    """Ports (AXI signal names, master's view inside each):

    csr  AXI4-Lite slave, 32-bit: the registers of driver/abi.py (BAR offsets below WINDOW_BASE).
    win  AXI4 slave at the data width: the submission windows (BAR offsets from WINDOW_BASE up; the
         port decodes full BAR offsets). A PCIe-to-AXI bridge or interconnect routes the BAR's two
         ranges to the two ports; the GPU's descriptor writes land as wide bursts, its doorbell
         write as one AXI4-Lite write.
    mem  AXI4 master at the data width: host and GPU memory through the bridge.

    Data path: Queues (scheduler) -> Validator -> ReadEngine -> [bus] -> ReadTracker -> buffer ->
    WritePlanner / WriteData -> WriteMux -> [bus] -> CompletionUnit -> Queues; the CompletionWriter
    writes completion words through the same write channel.
    """

    def __init__(self, params: EngineParams):
        if not isinstance(params, EngineParams):
            raise TypeError(f"Engine wants an EngineParams, not {type(params).__name__}")
        self.params = params
        p = params
        super().__init__({
            "csr": In(axi_lite_signature(p.csr_addr_width)),
            "win": In(axi_signature(p.bar_addr_width, p.data_width, p.window_id_width)),
            "mem": Out(axi_signature(ADDR_WIDTH, p.data_width, p.read_id_width)),
            # the host's Max_Payload_Size (PCIe code, 128 << code bytes) where a PCIe link is behind `mem`: with
            # write_burst_bytes, write bursts end at multiples of it where it is larger (0 elsewhere)
            "max_payload": In(3),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        soft_reset = Signal()

        axil = m.submodules.axil = AxiLiteSlave(p.csr_addr_width)
        nq, dw, rp = p.num_queues, p.data_width, p.row_ptr_width
        regs = m.submodules.regs = RegisterFile(num_queues=nq, slots=p.slots, num_regions=p.num_regions, data_width=dw)
        windows = m.submodules.windows = SubmissionWindows(num_queues=nq, slots=p.slots, data_width=dw,
                                                           id_width=p.window_id_width)
        regions = RegionTable(num_regions=p.num_regions)
        queues = Queues(num_queues=nq, slots=p.slots)
        errlog = ErrorLog(p.errlog_depth)
        completion = CompletionUnit(num_queues=nq)
        cw = CompletionWriter(num_queues=nq, data_width=dw, pick_ahead=p.extra_stages)
        for name, unit in (("regions", regions), ("queues", queues), ("errlog", errlog),
                           ("completion", completion), ("cw", cw)):
            m.submodules[name] = ResetInserter(soft_reset)(unit)
        validator = m.submodules.validator = Validator(num_queues=nq, slots=p.slots, data_width=dw, row_ptr_width=rp,
                                                       max_burst_beats=p.max_burst_beats)
        reader = m.submodules.reader = ReadEngine(num_queues=nq, data_width=dw, reads_outstanding=p.reads_outstanding,
                                                  buffer_rows=p.buffer_rows, row_ptr_width=rp,
                                                  max_burst_beats=p.max_burst_beats)
        tracker = m.submodules.tracker = ReadTracker(data_width=dw, reads_outstanding=p.reads_outstanding,
                                                     buffer_rows=p.buffer_rows, row_ptr_width=rp)
        planner = m.submodules.planner = WritePlanner(num_queues=nq, data_width=dw, row_ptr_width=rp,
                                                      max_burst_beats=p.max_burst_beats,
                                                      write_burst_bytes=p.write_burst_bytes,
                                                      rows_in_cycle=not p.extra_stages, skid=p.extra_stages,
                                                      load_gap=p.extra_stages)
        wdata = m.submodules.wdata = WriteData(data_width=dw, buffer_rows=p.buffer_rows, row_ptr_width=rp)
        # with fall_through a burst's first W beat may also go in its address's cycle
        wmux = m.submodules.wmux = WriteMux(data_width=dw, id_width=p.read_id_width,
                                            writes_outstanding=p.writes_outstanding, w_with_aw=p.fall_through)
        buf = m.submodules.buffer = memory.Memory(shape=p.data_width, depth=p.buffer_rows, init=[])

        wiring.connect(m, wiring.flipped(self.csr), axil.axil)
        wiring.connect(m, axil.regs, regs.bus)
        wiring.connect(m, wiring.flipped(self.win), windows.axi)

        # registers
        wiring.connect(m, regs.queues, queues.regs)
        wiring.connect(m, regs.regions, regions.regs)
        wiring.connect(m, errlog.read, regs.log)
        wiring.connect(m, queues.log, errlog.push)
        m.d.comb += [
            soft_reset.eq(regs.soft_reset),
            queues.engine_enable.eq(regs.engine_enable), queues.flush.eq(regs.flush),
            regs.halted_any.eq(queues.halted.any()),
            regs.descriptors.eq(completion.descriptors), regs.bytes.eq(completion.bytes),
            regs.reads_inflight.eq(tracker.inflight),
            regs.stall_read.eq(self.mem.arvalid & ~self.mem.arready),
            regs.stall_write.eq(wmux.stall_write), regs.stall_buffer.eq(reader.stall_buffer),
        ]

        # scheduler -> validator
        wiring.connect(m, queues.pick, validator.pick)
        wiring.connect(m, validator.win, windows.rd)
        m.d.comb += validator.inflight_zero.eq(queues.inflight_zero)
        wiring.connect(m, validator.squash, queues.squash)
        wiring.connect(m, validator.issue, queues.issue)
        wiring.connect(m, validator.stop, queues.stop_v)
        wiring.connect(m, planner.stop, queues.stop_p)
        wiring.connect(m, validator.src, regions.src)
        wiring.connect(m, validator.dst, regions.dst)
        wiring.connect(m, cw.region, regions.cw)

        # validator -> read engine -> write planner
        # with fall_through the job queue and the write entries show an entry in its cycle while empty: a doorbell's
        # first read and a burst's first beat each start a cycle sooner
        # without fall_through the job queue is a HeadFIFO (a SyncFIFO's cycles): the fields the read engine decides on
        # or loads from (kind, queue, zero, the source and the first read burst) from a register, the rest (which only
        # passes on to the write planner's queue) from the storage
        jlay = job_layout(p.queue_bits, rp)
        jobq = m.submodules.jobq = (
            FallThroughFIFO(jlay.size, JOB_QUEUE) if p.fall_through
            else HeadFIFO(jlay.size, JOB_QUEUE, slow=[(jlay[f].offset, jlay[f].offset + jlay[f].width)
                                                      for f in ("index", "cookie", "code", "notify", "dst_addr",
                                                                "length", "row0")]))
        wiring.connect(m, validator.job, jobq.w)
        wiring.connect(m, jobq.r, reader.job)
        wjobq = m.submodules.wjobq = SyncFIFOBuffered(width=job_layout(p.queue_bits, rp).size,
                                                  depth=max(16, p.reads_outstanding))
        wiring.connect(m, reader.wjob, wjobq.w_stream)
        wiring.connect(m, wjobq.r_stream, planner.wjob)
        wiring.connect(m, queues.stops, validator.stops, reader.stops)
        # `flush` fans out to every queue of the table: the write planner and the completion writer read a copy of
        # it, the same every cycle, held inverted so that synthesis keeps it apart from the register it copies
        flush_copy_n = Signal(init=1)
        m.d.sync += flush_copy_n.eq(~regs.flush_next)
        m.d.comb += [getattr(planner.stops, name).eq(getattr(queues.stops, name))
                     for name in queues.stops.signature.members if name != "flush"]
        m.d.comb += [planner.stops.flush.eq(~flush_copy_n), cw.flush.eq(~flush_copy_n)]

        # reads: bursts out, data into the buffer
        wiring.connect(m, reader.tag, tracker.tag)
        join(m, reader.ar, self.mem)
        join(m, tracker.r, self.mem)
        buf_w = buf.write_port()
        wiring.connect(m, tracker.buf, buf_w)
        m.d.comb += reader.row_free.eq(wdata.row_free)

        # writes: a burst goes out once its rows are filled; data from the buffer, realigned
        m.d.comb += [planner.filled.eq(tracker.filled), planner.row_alloc.eq(reader.row_alloc),
                     planner.max_payload.eq(self.max_payload),
                     wdata.filled.eq(tracker.filled)]
        wiring.connect(m, tracker.fault, planner.fault)
        # without fall_through the write entries are a SyncFIFO whose oldest entry is in a register (HeadFIFO, the same
        # cycles), so the write-data generator decides from registers, not from the LUT-RAM's output; the fields only
        # its A stage reads are left in the storage
        wlay = wentry_layout(p.data_bytes, rp)
        went = m.submodules.went = (
            FallThroughFIFO(wlay.size, W_ENTRIES) if p.fall_through
            else HeadFIFO(wlay.size, W_ENTRIES, slow=[(wlay[f].offset, wlay[f].offset + wlay[f].width)
                                                      for f in ("shift", "first_lane", "last_lane", "imm")]))
        wiring.connect(m, planner.went, went.w)
        wiring.connect(m, went.r, wdata.went)
        # with fall_through a row may be read in the cycle the tracker writes it: `filled` counts it then, and the
        # write entries fall through to the write-data generator in the cycle the planner decides the burst
        wiring.connect(m, wdata.buf, buf.read_port(transparent_for=(buf_w,) if p.fall_through else ()))
        centq = m.submodules.centq = SyncFIFOBuffered(width=centry_layout(p.queue_bits).size, depth=p.writes_outstanding)
        wiring.connect(m, planner.cent, centq.w_stream)
        # the completion unit reads its entry from a register, not from the FIFO's block RAM (whose output is
        # late): an entry is written at its burst's address, a memory round trip before its response
        cent_valid, cent_data = Signal(), Signal(centry_layout(p.queue_bits))
        m.d.comb += [centq.r_en.eq(~cent_valid | completion.cent.ready),
                     completion.cent.valid.eq(cent_valid), completion.cent.payload.eq(cent_data)]
        with m.If(completion.cent.ready):
            m.d.sync += cent_valid.eq(0)
        with m.If(centq.r_en & centq.r_rdy):
            m.d.sync += [cent_valid.eq(1), cent_data.eq(centq.r_data)]
        wiring.connect(m, planner.aw, wmux.data.aw)
        wiring.connect(m, wdata.w, wmux.data.w)
        wiring.connect(m, wmux.data.b, completion.b)
        wiring.connect(m, cw.bus, wmux.cw)
        join(m, wmux.mem, self.mem)

        # completion
        m.d.comb += completion.halted.eq(queues.halted)
        wiring.connect(m, completion.done, queues.done)
        wiring.connect(m, cw.queues, queues.cw)

        drained = Signal()
        m.d.comb += [
            drained.eq(validator.idle & (jobq.level == 0) & reader.idle & (wjobq.level == 0) & planner.idle
                       & (went.level == 0) & wdata.idle & (centq.level == 0) & completion.idle & wmux.idle & cw.idle),
            regs.drained.eq(drained),
            regs.idle.eq(drained & ~queues.busy.any()),
        ]
        return m

