"""RegionTable: region id -> (bus address, size, permissions), programmed by the host, looked up by the engine."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import REGION, REGION_ID_BITS
from rtl.records import region_entry_layout, table_port_signature
from rtl.params import index_bits

LOOKUPS = ("src", "dst", "cw")  # validator source and destination, completion writer


def lookup_signature() -> wiring.Signature:
    """One lookup as its user sees it: the entry arrives the cycle after `en`; perms are 0 for an id
    outside the table or not registered."""
    return wiring.Signature({"en": Out(1), "id": Out(REGION_ID_BITS), "entry": In(region_entry_layout())})


class RegionTable(wiring.Component):
    """The host writes ADDR_LO/HI and SIZE_LO/HI into one shared shadow, then PERMS of a region commits
    shadow and permissions into that region at once (PERMS = 0 unregisters it). Reads of a region's
    registers return its committed entry."""

    def __init__(self, *, num_regions: int):
        self.num_regions = num_regions
        members = {
            "regs": In(table_port_signature(index_bits(num_regions), 5, read_enable=True)),
        }
        for name in LOOKUPS:
            members[name] = In(lookup_signature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        nr, rb = self.num_regions, index_bits(self.num_regions)
        table = m.submodules.table = memory.Memory(shape=region_entry_layout(), depth=nr, init=[])
        valid = Signal(nr)
        shadow_addr = Signal(64)
        shadow_size = Signal(64)

        off = {r.name: r.offset for r in REGION.registers}
        wp = table.write_port()
        m.d.comb += [wp.addr.eq(self.regs.w_index), wp.data.addr.eq(shadow_addr), wp.data.size.eq(shadow_size),
                     wp.data.perms.eq(self.regs.w_data[:2])]
        with m.If(self.regs.w_valid):
            with m.Switch(self.regs.w_offset):
                with m.Case(off["ADDR_LO"]):
                    m.d.sync += shadow_addr[:32].eq(self.regs.w_data)
                with m.Case(off["ADDR_HI"]):
                    m.d.sync += shadow_addr[32:].eq(self.regs.w_data)
                with m.Case(off["SIZE_LO"]):
                    m.d.sync += shadow_size[:32].eq(self.regs.w_data)
                with m.Case(off["SIZE_HI"]):
                    m.d.sync += shadow_size[32:].eq(self.regs.w_data)
                with m.Case(off["PERMS"]):
                    m.d.comb += wp.en.eq(1)
                    m.d.sync += valid.bit_select(self.regs.w_index, 1).eq(self.regs.w_data[:2] != 0)

        for name in LOOKUPS:
            port = getattr(self, name)
            rp = table.read_port()
            # The id and the registered bits are captured with the read (so a region registered in the lookup's
            # cycle is not known with its old entry), and checked after the register: the users' id reaches it
            # through their arbitration (the completion writer's round robin), and the range check and the
            # 16-way pick settle alongside the memory's slower read
            id_r, valid_r, known = Signal(REGION_ID_BITS, name=f"{name}_id"), Signal(nr, name=f"{name}_valid"), Signal()
            m.d.comb += [rp.addr.eq(port.id[:rb]), rp.en.eq(port.en)]
            with m.If(port.en):
                m.d.sync += [id_r.eq(port.id), valid_r.eq(valid)]
            m.d.comb += known.eq((id_r < nr) & valid_r.bit_select(id_r[:rb], 1))
            m.d.comb += [port.entry.addr.eq(rp.data.addr), port.entry.size.eq(rp.data.size),
                         port.entry.perms.eq(Mux(known, rp.data.perms, 0))]

        hp = table.read_port()
        r_offset = Signal(5)
        r_known = Signal()
        m.d.comb += [hp.addr.eq(self.regs.r_index), hp.en.eq(self.regs.r_en)]
        with m.If(self.regs.r_en):
            m.d.sync += [r_offset.eq(self.regs.r_offset), r_known.eq(valid.bit_select(self.regs.r_index, 1))]
        with m.Switch(r_offset):
            with m.Case(off["ADDR_LO"]):
                m.d.comb += self.regs.r_data.eq(hp.data.addr[:32])
            with m.Case(off["ADDR_HI"]):
                m.d.comb += self.regs.r_data.eq(hp.data.addr[32:])
            with m.Case(off["SIZE_LO"]):
                m.d.comb += self.regs.r_data.eq(hp.data.size[:32])
            with m.Case(off["SIZE_HI"]):
                m.d.comb += self.regs.r_data.eq(hp.data.size[32:])
            with m.Case(off["PERMS"]):
                m.d.comb += self.regs.r_data.eq(Mux(r_known, hp.data.perms, 0))
        return m

