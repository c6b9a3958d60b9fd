"""Conformance scenarios as plain data, and the synchronous driver model that plays them on a Backend.

A scenario is a list of operations a host and a producer perform (register regions, set up
queues, write descriptors, ring doorbells, wait, disable), plus named buffers with known
contents. Playing it on an engine yields an Outcome: every buffer's final bytes (guard bytes
included), every queue's state, the error log and the counters. The conformance suite plays
each scenario on every engine and compares the outcome with the reference engine's.

Scenarios are JSON-able so an engine that runs elsewhere (the RTL under a simulator) can
play them with its own (asynchronous) driver model: `sim/` reads the same JSON.

Operations (dicts with "op"):
  region        id, buffer, offset, size, perms        program a region over part of a buffer
  region_hole   id, size, perms                        a region over bus addresses nothing backs
  clear_region  id
  configure     queue, region, offset, start           completion word location and START
  enable        queue
  disable       queue
  write         queue, index, descriptors              raw window writes (no doorbell)
  ring          queue, value                           raw doorbell write
  post          queue, descriptors                     producer with flow control: write, ring, wait for room
  advance       n                                      let the engine run about n descriptors
  wait_idle
  reset                                                global reset: queues and region table cleared
Descriptors are dicts of DESCRIPTOR field names (missing fields are 0).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from driver.abi import COMPLETION_BYTES, COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, ErrorCode
from driver.backend import Backend, Buffer
from driver.descriptor import Descriptor


@dataclass(frozen=True)
class BufferSpec:
    name: str
    size: int
    fill: str = "random"  # "random" (seeded by name and seed) or "byte"
    value: int = 0  # the byte, for fill == "byte"
    seed: int = 0
    placement: str = "host"

    def initial(self) -> bytes:
        if self.fill == "byte":
            return bytes([self.value]) * self.size
        rng = np.random.default_rng([self.seed, *self.name.encode()])
        return rng.integers(0, 256, self.size, dtype=np.uint8).tobytes()


@dataclass
class Scenario:
    name: str
    buffers: list[BufferSpec]
    steps: list[dict]
    num_queues: int = 1
    slots: int = 16
    num_regions: int = 16
    needs: tuple[str, ...] = ()  # capabilities beyond the basics, e.g. ("bus_errors",)
    prefix: bool = False  # outcome depends on how far the engine got: compare with the reference run that far
    expect: dict = field(default_factory=dict)  # hand-written expectations, checked on every engine

    def to_json(self) -> dict:
        d = asdict(self)
        d["buffers"] = [asdict(b) for b in self.buffers]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Scenario":
        d = dict(d)
        d["buffers"] = [BufferSpec(**b) for b in d["buffers"]]
        d["needs"] = tuple(d.get("needs", ()))
        return cls(**d)

    def with_advance(self, n: int) -> "Scenario":
        """The same scenario with every `advance` step set to n (to replay a prefix on the reference)."""
        steps = [dict(s, n=n) if s["op"] == "advance" else s for s in self.steps]
        return Scenario(**{**self.__dict__, "steps": steps})


@dataclass
class Outcome:
    buffers: dict[str, bytes]
    queues: dict[int, dict]  # QueueState fields except `busy`, codes as names
    errlog: list[dict]
    descriptors: int
    bytes: int

    def to_json(self) -> dict:
        return {**asdict(self), "buffers": {k: v.hex() for k, v in self.buffers.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Outcome":
        return cls(
            {k: bytes.fromhex(v) for k, v in d["buffers"].items()},
            {int(k): v for k, v in d["queues"].items()},
            d["errlog"],
            d["descriptors"],
            d["bytes"],
        )

    def completed(self, queue: int) -> int:
        return self.queues[queue]["completion_word"] & COMPLETION_COUNT_MASK


def descriptor_from(d: dict) -> Descriptor:
    return Descriptor(**d)


def dump(scenarios: list[Scenario]) -> str:
    return json.dumps([s.to_json() for s in scenarios])


class ScenarioPlayer:
    """Plays a scenario on a synchronous Backend, as the real driver and a CPU producer would."""

    def __init__(self, backend: Backend, scenario: Scenario, timeout: float = 30.0):
        self.backend, self.scenario, self.timeout = backend, scenario, timeout
        self.buffers: dict[str, Buffer] = {}
        self.completion: dict[int, tuple[Buffer, int]] = {}  # queue -> where its completion word is
        self.regions: dict[int, tuple[str | None, int]] = {}  # region id -> (buffer name, offset)
        self.starts: dict[int, int] = {}
        self.posted: dict[int, int] = {}

    def play(self) -> Outcome:
        for spec in self.scenario.buffers:
            buf = self.backend.alloc(spec.size, spec.placement)
            buf.write(0, spec.initial())
            self.buffers[spec.name] = buf
        for step in self.scenario.steps:
            getattr(self, "_op_" + step["op"])(**{k: v for k, v in step.items() if k != "op"})
        self.backend.wait_idle(self.timeout)
        return self.outcome()

    def outcome(self) -> Outcome:
        queues = {}
        for q in sorted(self.starts):
            st = self.backend.queue_state(q)
            queues[q] = {
                "enabled": st.enabled,
                "halted": st.halted,
                "error": st.error.name,
                "error_cookie": st.error_cookie if st.halted else 0,
                "error_index": st.error_index if st.halted else 0,
                "completion_word": st.completion_word,
            }
        errlog = sorted(
            ({"queue": e.queue, "code": ErrorCode(e.code).name, "cookie": e.cookie, "index": e.index}
             for e in self.backend.error_log()),
            key=lambda e: (e["queue"], e["index"]),
        )
        counters = self.backend.counters()
        return Outcome(
            {name: buf.read(0, buf.size) for name, buf in self.buffers.items()},
            queues,
            errlog,
            counters.descriptors,
            counters.bytes,
        )

    # --- host operations -------------------------------------------------------------
    def _op_region(self, id: int, buffer: str, offset: int, size: int, perms: int) -> None:
        self.backend.set_region(id, self.buffers[buffer].addr + offset, size, perms)
        self.regions[id] = (buffer, offset)

    def _op_region_hole(self, id: int, size: int, perms: int) -> None:
        self.backend.set_region(id, self.backend.unbacked_address(size), size, perms)
        self.regions[id] = (None, 0)

    def _op_clear_region(self, id: int) -> None:
        self.backend.clear_region(id)
        self.regions.pop(id, None)

    def _op_configure(self, queue: int, region: int, offset: int, start: int = 0) -> None:
        self.backend.configure_queue(queue, region, offset, start)
        name, base = self.regions.get(region, (None, 0))
        if name is not None:
            self.completion[queue] = (self.buffers[name], base + offset)
        self.starts[queue] = start

    def _op_enable(self, queue: int) -> None:
        self.backend.enable_queue(queue)
        self.posted[queue] = self.starts.get(queue, 0)
        self.starts.setdefault(queue, 0)

    def _op_disable(self, queue: int) -> None:
        self.backend.disable_queue(queue, self.timeout)

    # --- producer operations ---------------------------------------------------------
    def _op_write(self, queue: int, index: int, descriptors: list[dict]) -> None:
        raw = b"".join(descriptor_from(d).pack() for d in descriptors)
        self.backend.write_slots(queue, index, raw)

    def _op_ring(self, queue: int, value: int) -> None:
        self.backend.ring(queue, value)

    def _completion_word(self, queue: int) -> int:
        buf, off = self.completion[queue]
        return int.from_bytes(buf.read(off, COMPLETION_BYTES), "little")

    def _op_post(self, queue: int, descriptors: list[dict]) -> None:
        slots = self.backend.geometry.slots
        raw = [descriptor_from(d).pack() for d in descriptors]
        done = 0
        deadline = time.monotonic() + self.timeout
        while done < len(raw):
            word = self._completion_word(queue)
            if word >> COMPLETION_ERROR_BIT:
                return  # halted: a real producer stops posting
            free = slots - (self.posted[queue] - (word & COMPLETION_COUNT_MASK))
            if free <= 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"queue {queue}: no room in the window for {self.timeout} s")
                self.backend.advance(1)
                continue
            n = min(free, len(raw) - done)
            self.backend.write_slots(queue, self.posted[queue], b"".join(raw[done : done + n]))
            self.posted[queue] += n
            done += n
            self.backend.ring(queue, self.posted[queue])

    def _op_advance(self, n: int) -> None:
        self.backend.advance(n)

    def _op_wait_idle(self) -> None:
        self.backend.wait_idle(self.timeout)

    def _op_idle(self, cycles: int) -> None:
        """Let a free-running engine work for about `cycles` engine cycles (4 ns each); the stepped reference
        model does nothing meanwhile."""
        time.sleep(cycles * 4e-9)

    def _op_reset(self) -> None:
        self.backend.reset()
        self.regions.clear()
        self.completion.clear()


def play(backend: Backend, scenario: Scenario, timeout: float = 30.0) -> Outcome:
    return ScenarioPlayer(backend, scenario, timeout).play()
