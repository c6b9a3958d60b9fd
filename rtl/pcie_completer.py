"""PcieCompleter: the completer side of the Xilinx UltraScale+ PCIe block (its CQ and CC AXI streams, 256
bits, DWORD-aligned, no straddling) in front of a register bus: memory writes to the BAR become one bus
write per DWORD (with its byte enables), memory reads of up to 8 DWORDs become bus reads answered by one
completion. Anything else that wants an answer (I/O, atomics, longer reads) is answered Unsupported Request;
messages are dropped. A bus error answers Completer Abort.

CQ descriptor (first 4 DWORDs of a request): address [63:2] in DW0-1, DWORD count [10:0] and request type
[14:11] in DW2 with the requester ID in [31:16], tag [7:0], BAR aperture [24:19], TC [27:25] and attributes
[30:28] in DW3; first and last byte enables in tuser [3:0] and [7:4]. CC descriptor (3 DWORDs): lower
address, byte count; DWORD count, status, requester ID; tag, TC, attributes.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.register_bus import RegisterBusSignature

WIDTH = 256
DWORDS = WIDTH // 32
MAX_READ_DWORDS = 8
CQ_USER_BITS = 88
CC_USER_BITS = 33


class ReqType(enum.Enum, shape=4):
    MEM_READ = 0
    MEM_WRITE = 1
    IO_READ = 2
    IO_WRITE = 3
    FETCH_ADD = 4
    SWAP = 5
    CAS = 6
    LOCKED_READ = 7


class CplStatus(enum.Enum, shape=3):
    SC = 0  # successful completion
    UR = 1  # unsupported request
    CA = 4  # completer abort


def axis_signature(data_bits: int, user_bits: int) -> wiring.Signature:
    """An AXI stream of the PCIe block, from its source's side."""
    return wiring.Signature({"tdata": Out(data_bits), "tkeep": Out(data_bits // 32), "tlast": Out(1),
                             "tuser": Out(user_bits), "tvalid": Out(1), "tready": In(1)})


def _lead(be: Signal) -> Signal:
    """Bytes below the first enabled one of a 4-bit byte enable (0 when none is)."""
    return Mux(be[0] | (be == 0), 0, Mux(be[1], 1, Mux(be[2], 2, 3)))


def _trail(be: Signal) -> Signal:
    """Bytes above the last enabled one."""
    return Mux(be[3] | (be == 0), 0, Mux(be[2], 1, Mux(be[1], 2, 3)))


class PcieCompleter(wiring.Component):
    def __init__(self):
        super().__init__({
            "cq": In(axis_signature(WIDTH, CQ_USER_BITS)),
            "cc": Out(axis_signature(WIDTH, CC_USER_BITS)),
            "bus": Out(RegisterBusSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        cq, cc, bus = self.cq, self.cc, self.bus
        d = [cq.tdata[32 * i: 32 * i + 32] for i in range(DWORDS)]

        addr = Signal(32)
        count = Signal(11)  # DWORDs of the request
        left = Signal(11)  # DWORDs still to write or read
        req_id, tag = Signal(16), Signal(8)
        tc, attr = Signal(3), Signal(3)
        first_be, last_be = Signal(4), Signal(4)
        low_addr = Signal(7)
        beat, keep, last_beat = Signal(WIDTH), Signal(DWORDS), Signal()
        idx = Signal(range(DWORDS + 1))
        first_dw = Signal()
        status = Signal(CplStatus)
        rdata = Array(Signal(32, name=f"rdata{i}") for i in range(MAX_READ_DWORDS))
        got = Signal(range(MAX_READ_DWORDS + 1))

        aperture = Signal(6)
        mask = Signal(64)
        m.d.comb += [aperture.eq(d[3][19:25]), mask.eq((Const(1, 65) << aperture) - 1)]

        byte_count = Signal(13)
        with m.If(count == 1):
            m.d.comb += byte_count.eq(Mux(first_be == 0, 1, 4 - _lead(first_be) - _trail(first_be)))
        with m.Else():
            m.d.comb += byte_count.eq((count << 2) - _lead(first_be) - _trail(last_be))

        # completion header, then the data from DWORD 3 of the first beat
        header = Cat(low_addr, Const(0, 9), byte_count, Const(0, 3),  # DW0
                     Mux(status == CplStatus.SC, count, 0), status, Const(0, 2), req_id,  # DW1 (poisoned 0)
                     tag, Const(0, 16), Const(0, 1), tc, attr, Const(0, 1))  # DW2
        cpl_beat = Signal()  # 0: the first completion beat, 1: the second
        data_dws = Mux(status == CplStatus.SC, count, 0)
        m.d.comb += [cc.tuser.eq(0), bus.addr.eq(addr), bus.wdata.eq(beat.word_select(idx[:3], 32))]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid):
                    kind = d[2][11:15]
                    m.d.sync += [
                        addr.eq((Cat(Const(0, 2), d[0][2:], d[1]) & mask)[:32]),
                        low_addr.eq(Cat(_lead(cq.tuser[:4])[:2], d[0][2:7])),
                        count.eq(d[2][:11]), left.eq(d[2][:11]),
                        req_id.eq(d[2][16:32]), tag.eq(d[3][:8]), tc.eq(d[3][25:28]), attr.eq(d[3][28:31]),
                        first_be.eq(cq.tuser[:4]), last_be.eq(cq.tuser[4:8]),
                        beat.eq(cq.tdata), keep.eq(cq.tkeep), last_beat.eq(cq.tlast), idx.eq(4), first_dw.eq(1),
                        status.eq(CplStatus.SC), got.eq(0), cpl_beat.eq(0),
                    ]
                    with m.If(kind == ReqType.MEM_WRITE):
                        m.next = "WRITE"
                    with m.Elif((kind == ReqType.MEM_READ) & cq.tlast & (d[2][:11] <= MAX_READ_DWORDS)
                                & (d[2][:11] != 0)):
                        m.next = "READ"
                    with m.Elif(kind <= ReqType.LOCKED_READ):  # non-posted and not ours: Unsupported Request
                        m.d.sync += status.eq(CplStatus.UR)
                        m.next = "UR"
                    with m.Else():  # messages: nothing to answer
                        with m.If(~cq.tlast):
                            m.next = "DRAIN"

            with m.State("UR"):
                with m.If(last_beat):
                    m.next = "COMPLETE"
                with m.Else():
                    m.next = "DRAIN_THEN_COMPLETE"

            with m.State("WRITE"):
                dw_be = Mux(first_dw, first_be, Mux(left == 1, last_be, 0xF))
                with m.If(left == 0):
                    m.next = "IDLE"
                    with m.If(~last_beat):
                        m.next = "DRAIN"
                with m.Elif((idx == DWORDS) | ~keep.bit_select(idx[:3], 1)):
                    with m.If(last_beat):
                        m.next = "IDLE"  # the TLP ended before its DWORD count: what came is written
                    with m.Else():
                        m.next = "NEXT"
                with m.Elif(dw_be == 0):
                    m.d.sync += [idx.eq(idx + 1), left.eq(left - 1), addr.eq(addr + 4), first_dw.eq(0)]
                with m.Else():
                    m.d.comb += [bus.valid.eq(1), bus.write.eq(1), bus.strb.eq(dw_be)]
                    with m.If(bus.ready):
                        m.d.sync += [idx.eq(idx + 1), left.eq(left - 1), addr.eq(addr + 4), first_dw.eq(0)]

            with m.State("NEXT"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid):
                    m.d.sync += [beat.eq(cq.tdata), keep.eq(cq.tkeep), last_beat.eq(cq.tlast), idx.eq(0)]
                    m.next = "WRITE"

            with m.State("DRAIN"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid & cq.tlast):
                    m.next = "IDLE"

            with m.State("DRAIN_THEN_COMPLETE"):
                m.d.comb += cq.tready.eq(1)
                with m.If(cq.tvalid & cq.tlast):
                    m.next = "COMPLETE"

            with m.State("READ"):
                with m.If(left == 0):
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [bus.valid.eq(1), bus.write.eq(0)]
                    with m.If(bus.ready):
                        m.d.sync += [rdata[got[:3]].eq(bus.rdata), got.eq(got + 1), left.eq(left - 1),
                                     addr.eq(addr + 4)]
                        with m.If(bus.resp != Resp.OKAY):
                            m.d.sync += status.eq(CplStatus.CA)

            with m.State("COMPLETE"):
                first_data = Cat(*(rdata[i] for i in range(5)))
                second_data = Cat(*(rdata[i] for i in range(5, 8)), Const(0, 160))
                first_keep = Cat(Const(0b111, 3), *((data_dws > i) for i in range(5)))
                second_keep = Cat(*((data_dws > 5 + i) for i in range(3)), Const(0, 5))
                two_beats = data_dws > 5
                m.d.comb += [
                    cc.tvalid.eq(1),
                    cc.tdata.eq(Mux(cpl_beat, second_data, Cat(header, first_data))),
                    cc.tkeep.eq(Mux(cpl_beat, second_keep, first_keep)),
                    cc.tlast.eq(cpl_beat | ~two_beats),
                ]
                with m.If(cc.tready):
                    with m.If(cpl_beat | ~two_beats):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += cpl_beat.eq(1)
        return m
