"""A small builder for conformance scenarios: buffers, regions, queues and descriptors with the
hand-written expectations that go with them (what must be copied, what must stay untouched)."""

from __future__ import annotations

from driver.abi import Flag, Perm
from driver.scenario import BufferSpec, Scenario

GEOMETRY = {"num_queues": 4, "slots": 16, "num_regions": 16}
COMPLETION_REGION = 15  # every scenario keeps its completion words in region 15
COMPLETION_STRIDE = 64
GUARD_BYTE = 0xA5
RW = int(Perm.READ | Perm.WRITE)


def desc(src_region=0, src_offset=0, dst_region=0, dst_offset=0, length=0, flags=0, cookie=0, reserved=0) -> dict:
    return {
        "src_region": src_region, "src_offset": src_offset, "dst_region": dst_region,
        "dst_offset": dst_offset, "length": length, "flags": int(flags), "cookie": cookie, "reserved": reserved,
    }


def imm(dst_region: int, dst_offset: int, value: int, flags=0, cookie=0, length=8) -> dict:
    return desc(0, value, dst_region, dst_offset, length, int(flags) | Flag.IMM, cookie)


class Builder:
    """Collects a scenario step by step. Regions remember their buffer so expectations can be
    written in region coordinates."""

    def __init__(self, name: str, needs: tuple[str, ...] = (), prefix: bool = False, **geometry):
        self.scenario = Scenario(name, [], [], **{**GEOMETRY, **geometry}, needs=needs, prefix=prefix)
        self.regions: dict[int, tuple[str, int]] = {}
        self.expect: dict = {"queues": {}, "copied": [], "untouched": [], "values": []}
        self.scenario.expect = self.expect
        self._cw_buffer = self._cw_region = False

    # --- memory and regions ---------------------------------------------------------
    def buffer(self, name: str, size: int, fill: str = "random", value: int = 0, placement: str = "host") -> str:
        self.scenario.buffers.append(BufferSpec(name, size, fill, value, placement=placement))
        return name

    def region(self, rid: int, buffer: str, offset: int = 0, size: int | None = None, perms: int = RW) -> int:
        if size is None:
            size = self._size(buffer) - offset
        self.scenario.steps.append({"op": "region", "id": rid, "buffer": buffer, "offset": offset, "size": size,
                                    "perms": int(perms)})
        self.regions[rid] = (buffer, offset)
        return rid

    def hole(self, rid: int, size: int, perms: int = RW) -> int:
        self.scenario.steps.append({"op": "region_hole", "id": rid, "size": size, "perms": int(perms)})
        return rid

    def clear_region(self, rid: int) -> None:
        self.scenario.steps.append({"op": "clear_region", "id": rid})

    def _size(self, buffer: str) -> int:
        return next(b.size for b in self.scenario.buffers if b.name == buffer)

    # --- queues ---------------------------------------------------------------------
    def queue(self, q: int, start: int = 0, enable: bool = True, completion_slot: int | None = None) -> int:
        """Configure queue q with its completion word in the shared "completions" buffer (slot q unless
        told otherwise), then enable it."""
        if not self._cw_buffer:
            self.buffer("completions", self.scenario.num_queues * COMPLETION_STRIDE, "byte", 0)
            self._cw_buffer = True
        if not self._cw_region:
            self.region(COMPLETION_REGION, "completions", perms=Perm.WRITE)
            self._cw_region = True
        slot = q if completion_slot is None else completion_slot
        self.configure(q, COMPLETION_REGION, slot * COMPLETION_STRIDE, start)
        if enable:
            self.enable(q)
        return q

    def configure(self, q: int, region: int, offset: int, start: int = 0) -> None:
        self.scenario.steps.append({"op": "configure", "queue": q, "region": region, "offset": offset, "start": start})

    def enable(self, q: int) -> None:
        self.scenario.steps.append({"op": "enable", "queue": q})

    def disable(self, q: int) -> None:
        self.scenario.steps.append({"op": "disable", "queue": q})

    def post(self, q: int, descriptors: list[dict]) -> None:
        self.scenario.steps.append({"op": "post", "queue": q, "descriptors": descriptors})

    def write(self, q: int, index: int, descriptors: list[dict]) -> None:
        self.scenario.steps.append({"op": "write", "queue": q, "index": index, "descriptors": descriptors})

    def ring(self, q: int, value: int) -> None:
        self.scenario.steps.append({"op": "ring", "queue": q, "value": value})

    def advance(self, n: int) -> None:
        self.scenario.steps.append({"op": "advance", "n": n})

    def idle(self, cycles: int) -> None:
        """Let the engine run `cycles` clock cycles before the next step (simulation), about as long elsewhere."""
        self.scenario.steps.append({"op": "idle", "cycles": cycles})

    def wait_idle(self) -> None:
        self.scenario.steps.append({"op": "wait_idle"})

    def reset(self) -> None:
        self.scenario.steps.append({"op": "reset"})
        self.regions.clear()
        self._cw_region = False

    # --- the error log --------------------------------------------------------------
    def observe_errlog(self, label: str, *, overflow: bool) -> None:
        """Read STATUS.ERRLOG_OVERFLOW here (the log untouched); it must read `overflow`."""
        self.scenario.steps.append({"op": "observe_errlog", "label": label})
        self.expect.setdefault("errlog", {})[label] = {"overflow": overflow}

    def read_errlog(self, label: str, *, entries: int, overflow: bool) -> None:
        """Pop the whole error log here, then read STATUS.ERRLOG_OVERFLOW: `entries` entries, then `overflow`."""
        self.scenario.steps.append({"op": "read_errlog", "label": label})
        self.expect.setdefault("errlog", {})[label] = {"entries": entries, "overflow": overflow}

    def clear_errlog_overflow(self) -> None:
        self.scenario.steps.append({"op": "clear_errlog_overflow"})

    # --- expectations ---------------------------------------------------------------
    def where(self, rid: int, offset: int) -> tuple[str, int]:
        buf, base = self.regions[rid]
        return buf, base + offset

    def expect_copy(self, d: dict) -> None:
        """The bytes of descriptor d arrive exactly (sources are never written in these scenarios)."""
        sb, so = self.where(d["src_region"], d["src_offset"])
        db, do = self.where(d["dst_region"], d["dst_offset"])
        self.expect["copied"].append([sb, so, db, do, d["length"]])

    def expect_untouched(self, buffer: str, lo: int, hi: int) -> None:
        self.expect["untouched"].append([buffer, lo, hi])

    def expect_untouched_dst(self, d: dict) -> None:
        db, do = self.where(d["dst_region"], d["dst_offset"])
        self.expect_untouched(db, do, do + d["length"])

    def expect_may_run(self, d: dict) -> None:
        """Descriptor d follows a BUS_ERROR in its queue without FENCE: an engine may have started it, so
        each byte of its destination is either untouched or its copy (never anything else)."""
        sb, so = self.where(d["src_region"], d["src_offset"])
        db, do = self.where(d["dst_region"], d["dst_offset"])
        self.expect.setdefault("may_run", []).append([db, do, d["length"], sb, so])

    def expect_count_at_most(self, q: int, most: int) -> None:
        """Queue q's completion word in memory holds no error and a count of at most `most` (after a hard
        reset, whatever the engine wrote before it)."""
        self.expect.setdefault("count_at_most", []).append(["completions", q * COMPLETION_STRIDE, most])

    def expect_value(self, rid: int, offset: int, value: int) -> None:
        buf, off = self.where(rid, offset)
        self.expect["values"].append([buf, off, value])

    def expect_queue(self, q: int, *, completed: int, error: str = "NONE", cookie: int | None = None,
                     index: int | None = None, enabled: bool = True, in_memory: bool = True) -> None:
        """Queue q's final state; with in_memory, its completion word in memory equals the engine's own."""
        e = {"completed": completed, "error": error, "halted": error != "NONE", "enabled": enabled,
             "in_memory": in_memory}
        if cookie is not None:
            e["cookie"] = cookie
        if index is not None:
            e["index"] = index
        self.expect["queues"][q] = e

    def build(self) -> Scenario:
        return self.scenario
