"""Conformance scenarios as plain data, and their Outcome. driver/player.py plays them (on a Backend, or on
the simulated engine through sim/sim_port.py).

A scenario is a list of operations a host and a producer perform (register regions, set up
queues, write descriptors, ring doorbells, wait, disable), plus named buffers with known
contents. Playing it on an engine yields an Outcome: every buffer's final bytes (guard bytes
included), every queue's state, the error log and the counters. The conformance suite plays
each scenario on every engine and compares the outcome with the reference engine's.

Scenarios are JSON-able so an engine that runs elsewhere (the RTL under a simulator) gets them as
files; the same player runs them there with an asynchronous port.

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
  idle          cycles                                 let a free-running engine work (4 ns a cycle)
  reset                                                global reset: queues and region table cleared
  observe_errlog  label                                read STATUS.ERRLOG_OVERFLOW (the log stays as it is)
  read_errlog     label                                pop every error log entry, then read the overflow flag
  clear_errlog_overflow                                write 1 to STATUS.ERRLOG_OVERFLOW
Descriptors are dicts of DESCRIPTOR field names (missing fields are 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from driver.abi import COMPLETION_COUNT_MASK
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
    errlog_overflow: bool = False  # STATUS.ERRLOG_OVERFLOW at the end
    observed: list[dict] = field(default_factory=list)  # what the observe_errlog/read_errlog steps saw, in order

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
            d["errlog_overflow"],
            d["observed"],
        )

    def completed(self, queue: int) -> int:
        return self.queues[queue]["completion_word"] & COMPLETION_COUNT_MASK


def descriptor_from(d: dict) -> Descriptor:
    return Descriptor(**d)


def dump(scenarios: list[Scenario]) -> str:
    return json.dumps([s.to_json() for s in scenarios])


def by_geometry(scenarios) -> dict[tuple[int, int, int], list[Scenario]]:
    """Scenarios grouped by the engine geometry they need, (num_queues, slots, num_regions), in their order:
    what an engine built per geometry (a simulated one) plays in one run each."""
    groups: dict[tuple[int, int, int], list[Scenario]] = {}
    for sc in scenarios:
        groups.setdefault((sc.num_queues, sc.slots, sc.num_regions), []).append(sc)
    return groups
