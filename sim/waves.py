"""Per-descriptor timing read from a VCD of the engine's ports: doorbell -> first read request -> last write
response -> completion-counter write, and throughput over a window.

The VCD is self-describing: the BAR traffic (region table, queue set-up, window writes, doorbells) says
which descriptors were posted where, and the host-memory port says when the engine read and wrote them.
Bus events are sampled one time unit before each rising clock edge (a handshake is valid & ready there).

Attribution is by address: a read or write burst belongs to the oldest posted descriptor whose source
(destination) range it overlaps and that still has bytes to read (write). Several descriptors in flight
that read or write the same bytes can therefore be told apart only in posting order.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from vcdvcd import VCDVCD

from driver.abi import (COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, DESCRIPTOR_BYTES, DOORBELL_BITS, GLOBAL, QUEUE,
                        REGION, WINDOW_BASE, Flag, window_stride)
from driver.descriptor import Descriptor

CHANNELS = {
    # port: {channel: (payload signals)}; each channel also has <ch>valid and <ch>ready
    "csr": {"aw": ("awaddr",), "w": ("wdata",), "ar": ("araddr",), "r": ("rdata",)},
    "win": {"aw": ("awaddr", "awlen"), "w": ("wdata", "wstrb", "wlast")},
    "mem": {"ar": ("araddr", "arlen"), "aw": ("awaddr", "awlen"), "w": ("wdata", "wstrb", "wlast"), "b": ()},
}


class WaveformError(ValueError):
    """The VCD lacks what the measurement needs; the message says what and how to get a usable one."""


@dataclass(frozen=True)
class DescriptorTiming:
    """Clock cycles (from the first rising edge in the VCD) of one descriptor's milestones; None when
    it has none (IMM and empty descriptors read nothing; failed ones write nothing)."""

    queue: int
    index: int  # absolute producer index
    length: int
    flags: int
    doorbell: int
    first_read: int | None
    last_write_response: int | None
    counter_write: int | None

    @staticmethod
    def _gap(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else b - a

    @property
    def doorbell_to_read(self) -> int | None:
        return self._gap(self.doorbell, self.first_read)

    @property
    def read_to_last_response(self) -> int | None:
        return self._gap(self.first_read, self.last_write_response)

    @property
    def response_to_counter(self) -> int | None:
        return self._gap(self.last_write_response, self.counter_write)

    @property
    def doorbell_to_counter(self) -> int | None:
        return self._gap(self.doorbell, self.counter_write)

    def as_dict(self) -> dict:
        return {**asdict(self), "doorbell_to_read": self.doorbell_to_read,
                "read_to_last_response": self.read_to_last_response,
                "response_to_counter": self.response_to_counter, "doorbell_to_counter": self.doorbell_to_counter}


@dataclass(frozen=True)
class Throughput:
    start: int  # cycles, inclusive
    end: int  # cycles, exclusive
    payload_bytes: int  # bytes of data bursts written (by strobe), completion words excluded
    descriptors: int  # counter writes in the window that completed descriptors
    period_ns: float

    @property
    def gbps(self) -> float:
        """GB/s (10**9 bytes a second) of payload written."""
        span = (self.end - self.start) * self.period_ns
        return self.payload_bytes / span if span > 0 else 0.0


@dataclass
class WaveReport:
    period_ns: float
    cycles: int
    data_bytes: int
    descriptors: list[DescriptorTiming]
    writes: list[tuple[int, int]] = field(default_factory=list)  # (cycle, payload bytes) of data W beats

    def throughput(self, start: int | None = None, end: int | None = None) -> Throughput:
        """Payload written in [start, end) cycles; by default from the first doorbell to the last counter write."""
        if start is None:
            start = min((d.doorbell for d in self.descriptors), default=0)
        if end is None:
            end = max((d.counter_write + 1 for d in self.descriptors if d.counter_write is not None), default=self.cycles)
        done = sum(1 for d in self.descriptors if d.counter_write is not None and start <= d.counter_write < end)
        written = sum(n for c, n in self.writes if start <= c < end)
        return Throughput(start, end, written, done, self.period_ns)

    def summary(self) -> dict[str, dict[str, float]]:
        """Min, median and max of each interval over the descriptors that have it."""
        out = {}
        for name in ("doorbell_to_read", "read_to_last_response", "response_to_counter", "doorbell_to_counter"):
            values = [v for v in (getattr(d, name) for d in self.descriptors) if v is not None]
            if values:
                out[name] = {"count": len(values), "min": min(values), "median": statistics.median(values),
                             "max": max(values)}
        return out


# --- reading the VCD -----------------------------------------------------------------------------

def _value(text: str) -> int:
    """A VCD value as an integer; x and z bits read as 0."""
    if text in ("0", "1"):
        return int(text)
    return int(text.translate(_XZ), 2)


_XZ = str.maketrans("xXzZuUwW-", "000000000")


class _Signals:
    """The port signals of one VCD, sampled just before every rising clock edge."""

    def __init__(self, path: Path):
        if not path.exists():
            raise WaveformError(f"no VCD at {path}: run a simulation with waves on (ARKDMA_WAVES=1)")
        names = VCDVCD(str(path), only_sigs=True).signals
        self.refs = self._resolve(names, path)
        vcd = VCDVCD(str(path), signals=sorted(set(self.refs.values())))
        self.signals = {short: vcd[ref] for short, ref in self.refs.items()}
        scale = vcd.timescale.get("timescale")
        clk = self.signals["clk"].tv
        rises = [t for (t, v), (_, before) in zip(clk[1:], clk[:-1]) if v == "1" and before != "1"]
        if clk and clk[0][1] == "1" and clk[0][0] > 0:
            rises.insert(0, clk[0][0])
        if len(rises) < 3:
            raise WaveformError(f"{path}: the clock has fewer than 3 rising edges; nothing to measure")
        self.edges = np.array(rises, dtype=np.int64)
        step = float(np.median(np.diff(self.edges)))
        self.period_ns = step * float(scale) * 1e9 if scale else step
        self._cache: dict[str, np.ndarray] = {}

    @staticmethod
    def _resolve(names: list[str], path: Path) -> dict[str, str]:
        """Short port name (csr__awvalid, clk, ...) -> the shallowest VCD reference with that name."""
        wanted = {"clk", "rst"}
        for port, chans in CHANNELS.items():
            for ch, payload in chans.items():
                wanted |= {f"{port}__{ch}valid", f"{port}__{ch}ready"} | {f"{port}__{s}" for s in payload}
        found: dict[str, str] = {}
        for ref in names:
            leaf = re.sub(r"\s*\[\d+(:\d+)?\]$", "", ref).rsplit(".", 1)[-1]
            if leaf in wanted and (leaf not in found or ref.count(".") < found[leaf].count(".")):
                found[leaf] = ref
        missing = sorted(wanted - found.keys())
        if missing:
            raise WaveformError(f"{path} lacks the engine's port signals {', '.join(missing[:6])}"
                                f"{' ...' if len(missing) > 6 else ''}: is it a VCD of arkdma_engine?")
        return found

    def at_edges(self, short: str) -> np.ndarray:
        """The signal's value one time unit before every rising edge (object array of ints)."""
        if short not in self._cache:
            tv = self.signals[short].tv
            times = np.array([t for t, _ in tv], dtype=np.int64)
            values = np.array([_value(v) for _, v in tv] or [0], dtype=object)
            idx = np.searchsorted(times, self.edges - 1, side="right") - 1
            out = values[np.clip(idx, 0, None)]
            out[idx < 0] = 0
            self._cache[short] = out
        return self._cache[short]

    def handshakes(self, port: str, ch: str) -> list[tuple[int, dict[str, int]]]:
        """(cycle, payload) of every transfer on a channel, in order."""
        fire = (self.at_edges(f"{port}__{ch}valid") == 1) & (self.at_edges(f"{port}__{ch}ready") == 1)
        cycles = np.nonzero(fire)[0]
        cols = {s: self.at_edges(f"{port}__{s}") for s in CHANNELS[port][ch]}
        return [(int(c), {s: int(v[c]) for s, v in cols.items()}) for c in cycles]

    def width(self, short: str) -> int:
        return int(self.signals[short].size)


# --- replaying the bus traffic -------------------------------------------------------------------

@dataclass
class _Pending:
    queue: int
    index: int
    desc: Descriptor
    doorbell: int
    src: tuple[int, int] | None  # bus range read, None when nothing is read
    dst: tuple[int, int] | None  # bus range written
    read: int = 0  # bytes of src covered by read bursts so far
    written: int = 0
    first_read: int | None = None
    last_response: int | None = None
    counter: int | None = None
    writes_open: int = 0  # write bursts issued whose response has not come back

    def timing(self) -> DescriptorTiming:
        return DescriptorTiming(self.queue, self.index, self.desc.length, self.desc.flags, self.doorbell,
                                self.first_read, self.last_response, self.counter)


@dataclass
class _Queue:
    start: int = 0
    producer: int = 0
    enabled: bool = False
    compl_region: int = 0
    compl_offset: int = 0
    word_addr: int | None = None


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


class _Replay:
    """Plays the bus transfers in time order against a model of the engine's registers."""

    def __init__(self, data_bytes: int, slots: int | None):
        self.dwb = data_bytes
        self.slots = slots
        self.regions: dict[int, tuple[int, int]] = {}  # id -> (addr, size)
        self.shadow = {"ADDR_LO": 0, "ADDR_HI": 0, "SIZE_LO": 0, "SIZE_HI": 0}
        self.queues: dict[int, _Queue] = {}
        self.window: dict[int, int] = {}  # BAR byte address -> value
        self.live: list[_Pending] = []
        self.done: list[_Pending] = []
        self.open_writes: list[tuple[str, object]] = []  # AW in order, awaiting B: ("data", pending) / ("word", None)
        self.writes: list[tuple[int, int]] = []

    # BAR
    def csr_write(self, cycle: int, addr: int, value: int) -> None:
        if addr == GLOBAL.address("CONTROL") and value & 2:  # RESET: everything forgotten
            self.regions.clear()
            self.queues.clear()
            self.done += self.live
            self.live = []
            return
        if REGION.base <= addr < QUEUE.base:
            rid, off = divmod(addr - REGION.base, REGION.stride)
            name = next((r.name for r in REGION.registers if r.offset == off), None)
            if name in self.shadow:
                self.shadow[name] = value
            elif name == "PERMS":
                if value & 3:
                    s = self.shadow
                    self.regions[rid] = (s["ADDR_HI"] << 32 | s["ADDR_LO"], s["SIZE_HI"] << 32 | s["SIZE_LO"])
                else:
                    self.regions.pop(rid, None)
            return
        if QUEUE.base <= addr < WINDOW_BASE:
            qn, off = divmod(addr - QUEUE.base, QUEUE.stride)
            q = self.queues.setdefault(qn, _Queue())
            name = next((r.name for r in QUEUE.registers if r.offset == off), None)
            if name == "START_LO":
                q.start = (q.start & ~0xFFFFFFFF) | value
            elif name == "START_HI":
                q.start = (q.start & 0xFFFFFFFF) | value << 32
            elif name == "COMPL_REGION":
                q.compl_region = value
            elif name == "COMPL_OFFSET_LO":
                q.compl_offset = (q.compl_offset & ~0xFFFFFFFF) | value
            elif name == "COMPL_OFFSET_HI":
                q.compl_offset = (q.compl_offset & 0xFFFFFFFF) | value << 32
            elif name == "CONTROL":
                if value & 1 and not q.enabled:
                    q.producer = q.start
                    region = self.regions.get(q.compl_region)
                    q.word_addr = region[0] + q.compl_offset if region else None
                q.enabled = bool(value & 1)
            elif name == "DOORBELL":
                self._doorbell(cycle, qn, q, value)

    def _doorbell(self, cycle: int, qn: int, q: _Queue, value: int) -> None:
        mask = (1 << DOORBELL_BITS) - 1
        target = (q.producer & ~mask) | value
        if target < q.producer:
            target += 1 << DOORBELL_BITS
        if not q.enabled or self.slots is None or target - q.producer > self.slots:
            return  # ignored, or an error the engine reports: nothing to time
        base = WINDOW_BASE + qn * window_stride(self.slots)
        for i in range(q.producer, target):
            at = base + (i % self.slots) * DESCRIPTOR_BYTES
            d = Descriptor.unpack(bytes(self.window.get(at + k, 0) for k in range(DESCRIPTOR_BYTES)))
            src = dst = None
            if d.length:
                if not d.flags & Flag.IMM and d.src_region in self.regions:
                    a = self.regions[d.src_region][0] + d.src_offset
                    src = (a, a + d.length)
                if d.dst_region in self.regions:
                    a = self.regions[d.dst_region][0] + d.dst_offset
                    dst = (a, a + d.length)
            self.live.append(_Pending(qn, i, d, cycle, src, dst))
        q.producer = target

    def window_write(self, addr: int, beat: int, data: int, strb: int) -> None:
        base = (addr & ~(self.dwb - 1)) + beat * self.dwb
        for lane in range(self.dwb):
            if strb >> lane & 1:
                self.window[base + lane] = data >> (8 * lane) & 0xFF

    # host memory
    def mem_read(self, cycle: int, addr: int, beats: int) -> None:
        span = (addr, addr + beats * self.dwb)
        for p in self.live:
            if p.src and p.read < p.desc.length and _overlap(span, p.src):
                p.read += _overlap(span, p.src)
                if p.first_read is None:
                    p.first_read = cycle
                return

    def mem_write(self, cycle: int, addr: int, beats: list[tuple[int, int]]) -> None:
        """One write burst, with its beats' (data, strobe)."""
        span = (addr, addr + len(beats) * self.dwb)
        for qn, q in self.queues.items():
            if q.word_addr is not None and span[0] <= q.word_addr < span[1] and len(beats) == 1:
                data, _ = beats[0]
                word = data >> (8 * (q.word_addr % self.dwb)) & ((1 << 64) - 1)
                self._counter(cycle, qn, word)
                self.open_writes.append(("word", None))
                return
        self.writes.append((cycle, sum(bin(s).count("1") for _, s in beats)))
        for p in self.live:
            if p.dst and p.written < p.desc.length and _overlap(span, p.dst):
                p.written += _overlap(span, p.dst)
                p.writes_open += 1
                self.open_writes.append(("data", p))
                return
        self.open_writes.append(("data", None))

    def mem_response(self, cycle: int) -> None:
        if not self.open_writes:
            return
        kind, p = self.open_writes.pop(0)
        if kind == "data" and p is not None:
            p.writes_open -= 1
            if p.written >= p.desc.length and p.writes_open == 0:
                p.last_response = cycle

    def _counter(self, cycle: int, qn: int, word: int) -> None:
        count = word & COMPLETION_COUNT_MASK
        failed = word >> COMPLETION_ERROR_BIT
        keep = []
        for p in self.live:
            if p.queue == qn and (p.index < count or failed):
                if p.index < count:
                    p.counter = cycle
                self.done.append(p)
            else:
                keep.append(p)
        self.live = keep


def measure(path: Path | str, slots: int | None = None) -> WaveReport:
    """Per-descriptor timings and the payload writes of the engine run recorded in the VCD at `path`.
    `slots` (window slots per queue) is read from the driver's identity reads in the VCD when not given."""
    path = Path(path)
    sig = _Signals(path)
    dwb = sig.width("mem__wdata") // 8
    if slots is None:
        reads = list(zip(sig.handshakes("csr", "ar"), sig.handshakes("csr", "r")))
        slots = next((r["rdata"] for (_, a), (_, r) in reads if a["araddr"] == GLOBAL.address("SLOTS")), None)
        if not slots:
            raise WaveformError(f"{path}: the driver never read SLOTS in this recording; give the window slots per "
                                "queue (--slots N)")
    replay = _Replay(dwb, slots)

    events: list[tuple[int, int, str, object]] = []  # (cycle, order within a cycle, kind, data)
    csr_aw, csr_w = sig.handshakes("csr", "aw"), sig.handshakes("csr", "w")
    for (ca, a), (cw, w) in zip(csr_aw, csr_w):
        events.append((max(ca, cw), 1, "csr", (a["awaddr"], w["wdata"])))
    win_beats = iter(sig.handshakes("win", "w"))
    for c, a in sig.handshakes("win", "aw"):
        for k in range(a["awlen"] + 1):
            cb, b = next(win_beats)
            events.append((max(c, cb), 0, "win", (a["awaddr"], k, b["wdata"], b["wstrb"])))
    for c, a in sig.handshakes("mem", "ar"):
        events.append((c, 2, "read", (a["araddr"], a["arlen"] + 1)))
    mem_beats = iter(sig.handshakes("mem", "w"))
    for c, a in sig.handshakes("mem", "aw"):
        beats = []
        for _ in range(a["awlen"] + 1):
            cb, b = next(mem_beats, (c, {"wdata": 0, "wstrb": 0}))
            beats.append((b["wdata"], b["wstrb"]))
        events.append((c, 3, "write", (a["awaddr"], beats)))
    for c, _ in sig.handshakes("mem", "b"):
        events.append((c, 4, "response", None))
    events.sort(key=lambda e: (e[0], e[1]))

    for cycle, _, kind, data in events:
        if kind == "csr":
            replay.csr_write(cycle, *data)
        elif kind == "win":
            replay.window_write(*data)
        elif kind == "read":
            replay.mem_read(cycle, *data)
        elif kind == "write":
            replay.mem_write(cycle, *data)
        else:
            replay.mem_response(cycle)
    pending = sorted(replay.done + replay.live, key=lambda p: (p.doorbell, p.queue, p.index))
    return WaveReport(sig.period_ns, len(sig.edges), dwb, [p.timing() for p in pending], replay.writes)


def print_report(report: WaveReport, console, limit: int | None = 50, start: int | None = None,
                 end: int | None = None) -> None:
    """The per-descriptor table (the first `limit` rows), the interval summary and the throughput in [start, end)."""
    from rich.table import Table

    def cell(v):
        return "-" if v is None else str(v)

    t = Table(title=f"descriptors ({report.period_ns:g} ns clock, {report.data_bytes * 8}-bit data; cycles)")
    for col in ("queue", "index", "bytes", "doorbell", "-> 1st read", "-> last B", "-> counter", "total"):
        t.add_column(col, justify="right")
    rows = report.descriptors if limit is None else report.descriptors[:limit]
    for d in rows:
        t.add_row(str(d.queue), str(d.index), str(d.length), str(d.doorbell), cell(d.doorbell_to_read),
                  cell(d.read_to_last_response), cell(d.response_to_counter), cell(d.doorbell_to_counter))
    console.print(t)
    if limit is not None and len(report.descriptors) > limit:
        console.print(f"({len(report.descriptors) - limit} more descriptors not shown)")
    s = Table(title="intervals (cycles)")
    for col in ("interval", "descriptors", "min", "median", "max"):
        s.add_column(col, justify="right")
    for name, v in report.summary().items():
        s.add_row(name, str(v["count"]), str(v["min"]), f"{v['median']:g}", str(v["max"]))
    console.print(s)
    tp = report.throughput(start, end)
    console.print(f"throughput: {tp.payload_bytes:,} payload bytes in cycles [{tp.start}, {tp.end}) = "
                  f"{tp.gbps:.2f} GB/s; {tp.descriptors} descriptors completed")
