"""Host memory behind the PCIe bridge, as the engine's AXI master sees it: cocotbext-axi's AXI slave
models over a sparse bus memory, with a configurable response latency and error answers for
addresses nothing backs."""

from __future__ import annotations

import bisect
import logging
from collections import deque

import cocotb
from cocotb.triggers import Event, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus
from cocotbext.axi.axi_slave import AxiSlaveRead, AxiSlaveWrite

from driver.memory import BusMemory, MemoryFault

PAGE = 4096


class HostMemory(BusMemory):
    """Buffers at bus addresses. Like real memory, a read may touch any byte of a 4 KiB page that
    holds a buffer (bytes outside buffers read as zero); pages with no buffer are unbacked and fault.
    Writes must stay inside buffers: a write outside one faults, so an engine bug shows up as an
    error response instead of silently landing between buffers."""

    def read_beat(self, addr: int, length: int) -> bytes:
        first, last = addr // PAGE, (addr + length - 1) // PAGE
        if any(not self._page_backed(p) for p in range(first, last + 1)):
            raise MemoryFault(addr, length)
        out = bytearray(length)
        i = max(0, self._index(addr) - 1)
        while i < len(self._spans) and self._spans[i].addr < addr + length:
            span = self._spans[i]
            lo, hi = max(addr, span.addr), min(addr + length, span.addr + len(span.data))
            if lo < hi:
                out[lo - addr : hi - addr] = span.data[lo - span.addr : hi - span.addr]
            i += 1
        return bytes(out)

    def _index(self, addr: int) -> int:
        return bisect.bisect(self._starts, addr)

    def _page_backed(self, page: int) -> bool:
        lo, hi = page * PAGE, (page + 1) * PAGE
        i = self._index(lo) - 1
        for span in self._spans[max(i, 0) : max(i, 0) + 2]:
            if span.addr < hi and lo < span.addr + len(span.data):
                return True
        return False

    def clear(self) -> None:
        """Forget every buffer (between scenarios)."""
        self._spans.clear()
        self._starts.clear()
        self._next = self.BASE


class _Target:
    """The slave models' memory interface over HostMemory (async, exceptions become SLVERR)."""

    def __init__(self, memory: HostMemory):
        self.memory = memory

    async def read(self, addr: int, length: int) -> bytes:
        return self.memory.read_beat(addr, length)

    async def write(self, addr: int, data: bytes) -> None:
        self.memory.write(addr, data)


class _DelayLine:
    """Items in arrival order, each due `delay_ns` after it was put in."""

    def __init__(self, delay_ns: float):
        self.delay_ns = delay_ns
        self.items: deque = deque()
        self.arrived = Event()

    def put(self, item) -> None:
        self.items.append((get_sim_time("ns") + self.delay_ns, item))
        self.arrived.set()

    async def get(self) -> tuple[object, bool]:
        """The next item once it is due, and whether that meant waiting for it past its arrival."""
        while not self.items:
            self.arrived.clear()
            await self.arrived.wait()
        due, item = self.items.popleft()
        now = get_sim_time("ns")
        if due > now:
            await Timer(due - now, "ns")
        return item, due > now

    def clear(self) -> None:
        self.items.clear()


class _DelayedSink:
    """Stands in for an AXI sink channel: items come out `delay_ns` after they were taken from the bus,
    and the bus side keeps accepting meanwhile (a pipelined memory, not one request at a time)."""

    def __init__(self, sink, delay_ns: float):
        self.sink, self.line = sink, _DelayLine(delay_ns)
        self._pump = cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            self.line.put(await self.sink.recv())

    async def recv(self):
        item, _ = await self.line.get()
        return item

    def clear(self):
        self.line.clear()
        self.sink.clear()

    def __getattr__(self, name):
        return getattr(self.sink, name)


class _DelayedSource:
    """Stands in for an AXI source channel: what is sent goes out on the bus `delay_ns` later."""

    def __init__(self, source, clock, delay_ns: float):
        self.source, self.clock, self.line = source, clock, _DelayLine(delay_ns)
        self._pump = cocotb.start_soon(self._run())

    async def send(self, item):
        self.line.put(item)

    async def _run(self):
        while True:
            item, waited = await self.line.get()
            if waited:
                await RisingEdge(self.clock)  # back onto the clock after a timed wait
            await self.source.send(item)

    def clear(self):
        self.line.clear()
        self.source.clear()

    def __getattr__(self, name):
        return getattr(self.source, name)


class HostMemoryPort:
    """The AXI slave the engine's `mem` master talks to: reads answered `read_latency` cycles after
    the address was taken (first beat), write responses `write_latency` cycles after the last beat;
    bursts stream at one beat a cycle and many may be in flight. Unbacked addresses answer SLVERR."""

    def __init__(self, dut, prefix: str, clock, reset, memory: HostMemory, period_ns: float,
                 read_latency: int, write_latency: int):
        bus = AxiBus.from_prefix(dut, prefix)
        target = _Target(memory)
        self.read = AxiSlaveRead(bus.read, clock, reset, target=target)
        self.write = AxiSlaveWrite(bus.write, clock, reset, target=target)
        for part in (self.read, self.write):
            part.log.setLevel(logging.WARNING)
        for ch in (self.read.ar_channel, self.read.r_channel, self.write.aw_channel, self.write.w_channel,
                   self.write.b_channel):
            ch.log.setLevel(logging.WARNING)
        # The sink takes the address at a clock edge and the source drives a cycle after a send:
        # two cycles of the latency are the models' own.
        self.read.ar_channel = _DelayedSink(self.read.ar_channel, max(0, read_latency - 2) * period_ns)
        self.write.b_channel = _DelayedSource(self.write.b_channel, clock, max(0, write_latency - 2) * period_ns)
        self.channels = (self.read.ar_channel.sink, self.read.r_channel, self.write.aw_channel,
                         self.write.w_channel, self.write.b_channel.source)

    def set_pause(self, generator_factory) -> None:
        """Backpressure and idle cycles on every channel: each gets its own generator of pause bits."""
        for ch in self.channels:
            ch.set_pause_generator(generator_factory() if generator_factory else None)
            if not generator_factory:
                ch.pause = False  # removing a generator leaves the channel as its last value left it
