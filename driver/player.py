"""The one player of conformance scenarios and of the demo workload, written once as programs of engine calls.

A program is a generator that yields calls, `(method, *args)`, and receives each call's result; it never
touches an engine itself. An executor runs it on a port: `run` on a synchronous port (BackendPort below,
over any in-process Backend), `run_async` on an asynchronous one (sim/sim_port.py, the engine under a
simulator). register_program.py does the same for the engine's register sequences. `play` and
`run_on_backend` (at the end) play a scenario and the workload on an in-process Backend; scenario.py and
workload.py hold the data played and never import this module.

A port offers: alloc(size, placement) -> handle, write(handle, offset, data), read(handle, offset, n),
address(handle), hole(size) -> unbacked bus address, the host calls set_region, clear_region,
configure_queue, enable_queue, disable_queue, reset, clear_errlog_overflow, the producer calls write_slots
and ring, the observations queue_state, error_log, errlog_overflow, counters, and the pacing calls pause()
(nothing to do until the engine moves), advance(n), idle(cycles), wait_idle(), deadline() and
expired(deadline), now() (seconds) and `timebase` (what now() counts).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from driver.abi import COMPLETION_BYTES, COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, DESCRIPTOR_BYTES, ErrorCode, Perm
from driver.backend import Backend, Buffer
from driver.errors import QueueError
from driver.scenario import Outcome, Scenario, descriptor_from
from driver.workload import GUARD, GUARD_BYTE, WorkloadResult, WorkloadRow, WorkloadSpec, descriptor_stream

T = TypeVar("T")
Program = Generator[tuple, Any, T]


# --- executors -------------------------------------------------------------------------------------------
def run(program: Program[T], port) -> T:
    """Run `program` on a synchronous port."""
    try:
        call = next(program)
        while True:
            call = program.send(getattr(port, call[0])(*call[1:]))
    except StopIteration as stop:
        return stop.value


async def run_async(program: Program[T], port) -> T:
    """Run `program` on a port whose calls may be coroutines."""
    try:
        call = next(program)
        while True:
            result = getattr(port, call[0])(*call[1:])
            if inspect.isawaitable(result):
                result = await result
            call = program.send(result)
    except StopIteration as stop:
        return stop.value


# --- scenarios -------------------------------------------------------------------------------------------
@dataclass
class ScenarioState:
    """What a scenario's steps left behind: its buffers and queues, for the outcome."""

    buffers: dict[str, tuple[Any, int]] = field(default_factory=dict)  # name -> (handle, size)
    completion: dict[int, tuple[Any, int]] = field(default_factory=dict)  # queue -> (handle, offset) of its word
    regions: dict[int, tuple[str | None, int]] = field(default_factory=dict)  # id -> (buffer name, offset)
    starts: dict[int, int] = field(default_factory=dict)
    posted: dict[int, int] = field(default_factory=dict)
    observed: list[dict] = field(default_factory=list)  # what the error-log steps saw, in order


def scenario_steps(scenario: Scenario) -> Program[ScenarioState]:
    """Allocate the scenario's buffers and perform its steps, without waiting for the engine to finish."""
    st = ScenarioState()
    for spec in scenario.buffers:
        handle = yield ("alloc", spec.size, spec.placement)
        yield ("write", handle, 0, spec.initial())
        st.buffers[spec.name] = (handle, spec.size)
    for step in scenario.steps:
        args = {k: v for k, v in step.items() if k != "op"}
        yield from _STEPS[step["op"]](st, **args)
    return st


def outcome(st: ScenarioState) -> Program[Outcome]:
    queues = {}
    for q in sorted(st.starts):
        s = yield ("queue_state", q)
        queues[q] = {
            "enabled": s.enabled, "halted": s.halted, "error": s.error.name,
            "error_cookie": s.error_cookie if s.halted else 0,
            "error_index": s.error_index if s.halted else 0,
            "completion_word": s.completion_word,
        }
    errlog = _entries((yield ("error_log",)))
    overflow = yield ("errlog_overflow",)
    counters = yield ("counters",)
    buffers = {}
    for name, (handle, size) in st.buffers.items():
        buffers[name] = yield ("read", handle, 0, size)
    return Outcome(buffers, queues, errlog, counters.descriptors, counters.bytes, bool(overflow), st.observed)


def _entries(log) -> list[dict]:
    """Error log entries as plain data, by queue and index (queues halting at once may log in either order;
    entries of one queue keep the order they were popped in)."""
    return sorted(({"queue": e.queue, "code": ErrorCode(e.code).name, "cookie": e.cookie, "index": e.index}
                   for e in log), key=lambda e: (e["queue"], e["index"]))


def play_scenario(scenario: Scenario) -> Program[Outcome]:
    """The steps, a wait until the engine is idle, and the outcome."""
    st = yield from scenario_steps(scenario)
    yield ("wait_idle",)
    return (yield from outcome(st))


def _region(st, id: int, buffer: str, offset: int, size: int, perms: int):
    addr = yield ("address", st.buffers[buffer][0])
    yield ("set_region", id, addr + offset, size, perms)
    st.regions[id] = (buffer, offset)


def _region_hole(st, id: int, size: int, perms: int):
    addr = yield ("hole", size)
    yield ("set_region", id, addr, size, perms)
    st.regions[id] = (None, 0)


def _clear_region(st, id: int):
    yield ("clear_region", id)
    st.regions.pop(id, None)


def _configure(st, queue: int, region: int, offset: int, start: int = 0):
    yield ("configure_queue", queue, region, offset, start)
    name, base = st.regions.get(region, (None, 0))
    if name is not None:
        st.completion[queue] = (st.buffers[name][0], base + offset)
    st.starts[queue] = start


def _enable(st, queue: int):
    yield ("enable_queue", queue)
    st.posted[queue] = st.starts.get(queue, 0)
    st.starts.setdefault(queue, 0)


def _disable(st, queue: int):
    yield ("disable_queue", queue)


def _write(st, queue: int, index: int, descriptors: list[dict]):
    yield ("write_slots", queue, index, b"".join(descriptor_from(d).pack() for d in descriptors))


def _ring(st, queue: int, value: int):
    yield ("ring", queue, value)


def _word(handle, offset: int) -> Program[int]:
    raw = yield ("read", handle, offset, COMPLETION_BYTES)
    return int.from_bytes(raw, "little")


def _post(st, queue: int, descriptors: list[dict]):
    """Post as a GPU producer does: flow control on the completion word in memory; a halted queue (the
    error bit in the word) ends the posting."""
    slots = yield ("slots",)
    raw = [descriptor_from(d).pack() for d in descriptors]
    done = 0
    deadline = yield ("deadline",)
    while done < len(raw):
        word = yield from _word(*st.completion[queue])
        if word >> COMPLETION_ERROR_BIT:
            return
        free = slots - (st.posted[queue] - (word & COMPLETION_COUNT_MASK))
        if free <= 0:
            if (yield ("expired", deadline)):
                raise TimeoutError(f"queue {queue}: no room in the window before the deadline")
            yield ("pause",)
            continue
        n = min(free, len(raw) - done)
        yield ("write_slots", queue, st.posted[queue], b"".join(raw[done : done + n]))
        st.posted[queue] += n
        done += n
        yield ("ring", queue, st.posted[queue])


def _advance(st, n: int):
    yield ("advance", n)


def _wait_idle(st):
    yield ("wait_idle",)


def _idle(st, cycles: int):
    yield ("idle", cycles)


def _reset(st):
    yield ("reset",)
    st.regions.clear()
    st.completion.clear()


def _observe_errlog(st, label: str):
    """Read STATUS.ERRLOG_OVERFLOW, leaving the log as it is."""
    overflow = yield ("errlog_overflow",)
    st.observed.append({"label": label, "overflow": bool(overflow)})


def _read_errlog(st, label: str):
    """Pop every entry of the error log, then read STATUS.ERRLOG_OVERFLOW."""
    entries = _entries((yield ("error_log",)))
    overflow = yield ("errlog_overflow",)
    st.observed.append({"label": label, "entries": entries, "overflow": bool(overflow)})


def _clear_errlog_overflow(st):
    yield ("clear_errlog_overflow",)


_STEPS = {"region": _region, "region_hole": _region_hole, "clear_region": _clear_region, "configure": _configure,
          "enable": _enable, "disable": _disable, "write": _write, "ring": _ring, "post": _post,
          "advance": _advance, "wait_idle": _wait_idle, "idle": _idle, "reset": _reset,
          "observe_errlog": _observe_errlog, "read_errlog": _read_errlog,
          "clear_errlog_overflow": _clear_errlog_overflow}


# --- the demo workload -----------------------------------------------------------------------------------
QUEUE = 0
COMPLETION_REGION, SRC_REGION, DST_REGION = 0, 1, 2


def _stream(raw: bytes, words, start: int) -> Program[tuple[float, float]]:
    """Post a descriptor stream with window flow control and wait for its last completion; the times of
    the first doorbell and of the last completion seen."""
    slots = yield ("slots",)
    count = len(raw) // DESCRIPTOR_BYTES
    posted = done = start
    first = None
    deadline = yield ("deadline",)
    while done < start + count:
        n = min(slots - (posted - done), start + count - posted)
        if n > 0:
            k = posted - start
            yield ("write_slots", QUEUE, posted, raw[k * DESCRIPTOR_BYTES : (k + n) * DESCRIPTOR_BYTES])
            posted += n
            yield ("ring", QUEUE, posted)
            if first is None:
                first = yield ("now",)
        yield ("pause",)
        word = yield from _word(words, 0)
        if word >> COMPLETION_ERROR_BIT:
            s = yield ("queue_state", QUEUE)
            raise QueueError(QUEUE, s.error, s.error_cookie, s.error_index)
        done = word
        if (yield ("expired", deadline)):
            raise TimeoutError(f"the workload stalled at descriptor {done - start} of {count}")
    last = yield ("now",)
    return first, last


def workload(spec: WorkloadSpec, placements: tuple[str, str] = ("host", "host")) -> Program[list[WorkloadRow]]:
    """`arkdma demo`'s workload: per size, back-to-back copies through one queue, every byte and every guard
    byte checked; timed from the first doorbell to the last completion by the port's clock."""
    rng = np.random.default_rng(spec.seed)
    timebase = yield ("timebase",)
    words = yield ("alloc", 64, "host")
    yield ("write", words, 0, bytes(64))
    yield ("set_region", COMPLETION_REGION, (yield ("address", words)), 64, Perm.WRITE)
    rows, start = [], 0
    for size in spec.sizes:
        n = spec.descriptors_for(size)
        total = n * size
        src = yield ("alloc", total, placements[0])
        dst = yield ("alloc", total + 2 * GUARD, placements[1])
        payload = rng.integers(0, 256, total, dtype=np.uint8).tobytes()
        yield ("write", src, 0, payload)
        yield ("write", dst, 0, bytes([GUARD_BYTE]) * (total + 2 * GUARD))
        yield ("set_region", SRC_REGION, (yield ("address", src)), total, Perm.READ)
        yield ("set_region", DST_REGION, (yield ("address", dst)), total + 2 * GUARD, Perm.WRITE)
        yield ("configure_queue", QUEUE, COMPLETION_REGION, 0, start)
        yield ("enable_queue", QUEUE)
        raw = descriptor_stream(n, size, SRC_REGION, DST_REGION, GUARD).tobytes()
        t0, t1 = yield from _stream(raw, words, start)
        yield ("disable_queue", QUEUE)
        yield ("clear_region", SRC_REGION)
        yield ("clear_region", DST_REGION)
        out = yield ("read", dst, 0, total + 2 * GUARD)
        guard = bytes([GUARD_BYTE]) * GUARD
        ok = out[:GUARD] == guard and out[GUARD + total :] == guard and out[GUARD : GUARD + total] == payload
        rows.append(WorkloadRow(size, n, t1 - t0, timebase, ok))
        start += n
    return rows


# --- the synchronous port --------------------------------------------------------------------------------
class BackendPort:
    """A port over an in-process Backend: buffers are the backend's, time is the wall clock."""

    timebase_name = "wall clock"

    def __init__(self, backend: Backend, timeout: float = 30.0):
        self.backend, self.timeout = backend, timeout

    def alloc(self, size: int, placement: str) -> Buffer:
        return self.backend.alloc(size, placement)

    def write(self, buf: Buffer, offset: int, data: bytes) -> None:
        buf.write(offset, data)

    def read(self, buf: Buffer, offset: int, n: int) -> bytes:
        return buf.read(offset, n)

    def address(self, buf: Buffer) -> int:
        return buf.addr

    def hole(self, size: int) -> int:
        return self.backend.unbacked_address(size)

    def slots(self) -> int:
        return self.backend.geometry.slots

    def set_region(self, id: int, addr: int, size: int, perms: int) -> None:
        self.backend.set_region(id, addr, size, perms)

    def clear_region(self, id: int) -> None:
        self.backend.clear_region(id)

    def configure_queue(self, queue: int, region: int, offset: int, start: int) -> None:
        self.backend.configure_queue(queue, region, offset, start)

    def enable_queue(self, queue: int) -> None:
        self.backend.enable_queue(queue)

    def disable_queue(self, queue: int) -> None:
        self.backend.disable_queue(queue, self.timeout)

    def reset(self) -> None:
        self.backend.reset()

    def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        self.backend.write_slots(queue, index, raw)

    def ring(self, queue: int, value: int) -> None:
        self.backend.ring(queue, value)

    def queue_state(self, queue: int):
        return self.backend.queue_state(queue)

    def error_log(self):
        return self.backend.error_log()

    def errlog_overflow(self) -> bool:
        return self.backend.errlog_overflow()

    def clear_errlog_overflow(self) -> None:
        self.backend.clear_errlog_overflow()

    def counters(self):
        return self.backend.counters()

    def pause(self) -> None:
        self.backend.advance(self.backend.geometry.slots)  # the stepped reference moves; others run anyway

    def advance(self, n: int) -> None:
        self.backend.advance(n)

    def idle(self, cycles: int) -> None:
        """About `cycles` engine cycles (4 ns each) for a free-running engine; the stepped reference does nothing."""
        time.sleep(cycles * 4e-9)

    def wait_idle(self) -> None:
        self.backend.wait_idle(self.timeout)

    def deadline(self) -> float:
        return time.monotonic() + self.timeout

    def expired(self, deadline: float) -> bool:
        return time.monotonic() > deadline

    def now(self) -> float:
        return time.perf_counter()

    def timebase(self) -> str:
        return self.timebase_name


# --- on an in-process Backend ----------------------------------------------------------------------------
_PLACES = {"host": "host memory", "device": "GPU memory"}


def play(backend: Backend, scenario: Scenario, timeout: float = 30.0) -> Outcome:
    """Play `scenario` on an in-process Backend, as the driver and a CPU producer would."""
    return run(play_scenario(scenario), BackendPort(backend, timeout))


def run_on_backend(backend: Backend, spec: WorkloadSpec = WorkloadSpec(), src_placement: str = "host",
                   dst_placement: str = "host") -> WorkloadResult:
    """Run the workload through the CPU-side producer on an in-process engine, timed by the wall clock.
    Placements are the backend's ("host", or "device" for GPU memory where it reaches)."""
    result = WorkloadResult(backend.name)
    if (src_placement, dst_placement) != ("host", "host"):
        result.notes.append(f"copies from {_PLACES[src_placement]} to {_PLACES[dst_placement]}")
    result.rows = run(workload(spec, (src_placement, dst_placement)), BackendPort(backend, 600))
    return result
