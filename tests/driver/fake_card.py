"""A stand-in for the card behind its BAR: the register map of driver/abi.py decoded onto the reference
engine, which runs whatever is posted as soon as a doorbell (or an enable) is written, as hardware would."""

from __future__ import annotations

from driver.abi import (
    DESCRIPTOR_BYTES, DEVICE_MAGIC, GLOBAL, MAX_QUEUES, QUEUE, REGION, WINDOW_BASE, bar_bytes, version_word,
    window_stride,
)
from driver.bar import Bar
from driver.reference_engine import ReferenceEngine

RUN_ALL = 1 << 30


class FakeCardBar(Bar):
    def __init__(self, engine: ReferenceEngine):
        self.engine = engine
        g = engine.geometry
        self.size = bar_bytes(g.num_queues, g.slots)
        self.regs: dict[int, int] = {}
        self.errlog = []
        self.errlog_overflow = False
        self.enabled = False
        self.writes: list[tuple[int, int]] = []  # every 32-bit write, in order
        self.windows = bytearray(g.num_queues * window_stride(g.slots))

    # --- decoding -----------------------------------------------------------------------
    @staticmethod
    def _block(offset: int, block, count: int) -> tuple[int, str] | None:
        if block.base <= offset < block.base + count * block.stride:
            index, rel = divmod(offset - block.base, block.stride)
            for r in block.registers:
                if r.offset == rel:
                    return index, r.name
        return None

    def read32(self, offset: int) -> int:
        self.check(offset)
        g = self.engine.geometry
        # the card's log holds ERRLOG_DEPTH entries and drops new ones when full, as the engines do
        new, room = self.engine.error_log(), self.engine._errlog_depth - len(self.errlog)
        self.errlog_overflow |= len(new) > room or self.engine.errlog_overflow()
        self.errlog += new[:room]
        if offset < REGION.base:
            name = next((r.name for r in GLOBAL.registers if r.offset == offset), None)
            values = {
                "ID": DEVICE_MAGIC, "VERSION": version_word(), "CAPS": int(g.caps), "NUM_QUEUES": g.num_queues,
                "SLOTS": g.slots, "NUM_REGIONS": g.num_regions, "DATA_BYTES": 0, "WINDOW_BASE": WINDOW_BASE,
                "WINDOW_STRIDE": window_stride(g.slots), "CONTROL": int(self.enabled),
            }
            if name in values:
                return values[name]
            if name == "STATUS":
                halted = any(self.engine.queue_state(q).halted for q in range(g.num_queues))
                return (int(self.enabled) | 1 << 1 | int(halted) << 2 | int(bool(self.errlog)) << 3
                        | int(self.errlog_overflow) << 4)
            if name in ("ERRLOG_HEAD", "ERRLOG_COOKIE", "ERRLOG_INDEX"):
                if not self.errlog:
                    return 0
                e = self.errlog[0]
                return {"ERRLOG_HEAD": int(e.code) | e.queue << 16, "ERRLOG_COOKIE": e.cookie,
                        "ERRLOG_INDEX": e.index}[name]
            c = self.engine.counters()
            return {"DESCRIPTORS_LO": c.descriptors & 0xFFFFFFFF, "DESCRIPTORS_HI": c.descriptors >> 32,
                    "BYTES_LO": c.bytes & 0xFFFFFFFF, "BYTES_HI": c.bytes >> 32}.get(name, 0)
        hit = self._block(offset, QUEUE, MAX_QUEUES)
        if hit and hit[0] < g.num_queues:
            q, name = hit
            st = self.engine.queue_state(q)
            if name == "STATUS":
                return int(st.enabled) | int(st.busy) << 1 | int(st.halted) << 2 | int(st.error) << 8
            derived = {"COMPLETED_LO": st.completion_word & 0xFFFFFFFF, "COMPLETED_HI": st.completion_word >> 32,
                       "ERROR_COOKIE": st.error_cookie, "ERROR_INDEX": st.error_index}
            if name in derived:
                return derived[name]
        return self.regs.get(offset, 0)

    def write32(self, offset: int, value: int) -> None:
        self.check(offset)
        self.writes.append((offset, value))
        g = self.engine.geometry
        if offset >= WINDOW_BASE:
            rel = offset - WINDOW_BASE
            self.windows[rel : rel + 4] = value.to_bytes(4, "little")
            q, within = divmod(rel, window_stride(g.slots))
            slot = within // DESCRIPTOR_BYTES
            start = q * window_stride(g.slots) + slot * DESCRIPTOR_BYTES
            self.engine.write_slots(q, slot, bytes(self.windows[start : start + DESCRIPTOR_BYTES]))
            return
        old = self.regs.get(offset, 0)
        self.regs[offset] = value
        if offset == GLOBAL.address("CONTROL"):
            self.enabled = bool(value & 1)
            if value & 2:  # RESET: queues, regions and the error log cleared; self-clearing
                self.engine.reset()
                self.errlog.clear()
                self.errlog_overflow = False
                self.regs = {offset: value & ~2}
        elif offset == GLOBAL.address("ERRLOG_POP") and self.errlog:
            self.errlog.pop(0)
        elif offset == GLOBAL.address("STATUS") and value & 1 << 4:  # ERRLOG_OVERFLOW is write-1-to-clear
            self.errlog_overflow = False
            self.engine.clear_errlog_overflow()
        elif hit := self._block(offset, REGION, g.num_regions):
            r, name = hit
            if name == "PERMS":
                reg = lambda n: self.regs.get(REGION.address(n, r), 0)  # noqa: E731
                addr, size = reg("ADDR_HI") << 32 | reg("ADDR_LO"), reg("SIZE_HI") << 32 | reg("SIZE_LO")
                self.engine.set_region(r, addr, size, value)
        elif hit := self._block(offset, QUEUE, g.num_queues):
            q, name = hit
            reg = lambda n: self.regs.get(QUEUE.address(n, q), 0)  # noqa: E731
            if name == "CONTROL" and value & 1 and not old & 1:
                self.engine.configure_queue(q, reg("COMPL_REGION"), reg("COMPL_OFFSET_HI") << 32 | reg("COMPL_OFFSET_LO"),
                                            reg("START_HI") << 32 | reg("START_LO"))
                self.engine.enable_queue(q)
            elif name == "CONTROL" and old & 1 and not value & 1:
                self.engine.disable_queue(q)
            elif name == "DOORBELL":
                self.engine.ring(q, value)
                self.engine.advance(RUN_ALL)
