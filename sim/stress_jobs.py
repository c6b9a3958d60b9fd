"""Simulator jobs that stress the engine: several jobs on one testbench (one simulator start), idle and
backpressure on every AXI channel, and a global reset with descriptors in flight.

A BatchJob (sim/job_types.py) holds ScenariosJobs and ResetInFlightJobs, each under its own pause
(RandomPause: each cycle a channel pauses with a probability; PeriodicPause: cycles of traffic, then idle).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator

from driver import player
from sim.job_types import (Pause, PeriodicPause, RandomPause, ResetInFlightJob, ScenariosJob, kind_of,
                           pause_from_json)
from sim.driver_model import SimDriver
from sim.sim_port import SimPort
from sim.tb import EngineTB


def pause_factory(spec: Pause | dict | None) -> Callable[[], Iterator[bool]] | None:
    """A maker of pause generators (one per channel, each with its own seed or phase), or None for no pauses.
    `spec` is a Pause, or its JSON form (generated cases carry that)."""
    if isinstance(spec, dict):
        spec = pause_from_json(spec)
    if not spec:
        return None
    counter = itertools.count()
    if isinstance(spec, RandomPause):
        p = float(spec.probability)
        if not 0 <= p < 1:
            raise ValueError(f"pause probability must be in [0, 1), not {p}")

        def make() -> Iterator[bool]:
            rng = random.Random(f"{spec.seed}-{next(counter)}")
            while True:
                yield rng.random() < p
        return make
    if isinstance(spec, PeriodicPause):
        run, idle = int(spec.run), int(spec.idle)
        if run < 1 or idle < 0:
            raise ValueError(f"periodic pauses need run >= 1 and idle >= 0, not {run}/{idle}")

        def make() -> Iterator[bool]:
            phase = next(counter) * 3  # channels out of step with each other
            pattern = [False] * run + [True] * idle
            return itertools.islice(itertools.cycle(pattern), phase % len(pattern), None)
        return make
    raise ValueError(f"a pause is RandomPause or PeriodicPause, not {spec!r}")


def apply_pauses(tb: EngineTB, spec: Pause | dict | None) -> None:
    """Idle (sources) and backpressure (sinks) on every channel: host memory's five, the BAR's register
    port and its window port (both directions). None removes them."""
    make = pause_factory(spec)
    tb.host.set_pause(make)
    for master in (tb.csr, tb.win):
        for ch in (master.write_if.aw_channel, master.write_if.w_channel, master.write_if.b_channel,
                   master.read_if.ar_channel, master.read_if.r_channel):
            ch.set_pause_generator(make() if make else None)
            if not make:
                ch.pause = False  # removing a generator leaves the channel as its last value left it


async def play_scenarios(driver: SimDriver, job: ScenariosJob) -> dict:
    """Each scenario from a clean engine (reset, memory cleared); {name: Outcome as JSON}."""
    outcomes = {}
    for scenario in job.scenarios:
        driver.tb.memory.clear()
        await driver.reset()
        outcomes[scenario.name] = (await player.run_async(player.play_scenario(scenario), SimPort(driver))).to_json()
    return {"outcomes": outcomes}


async def reset_in_flight(driver: SimDriver, job: ResetInFlightJob) -> dict:
    """Plays `scenario`'s steps (set-up and posts that fit the windows), lets the engine run `reset_after`
    cycles, resets it (CONTROL.RESET, polled until done), watches memory `settle` more cycles, then plays
    `then` on the engine as the reset left it (regions and queues programmed again, no second reset).

    Returns the memory writes seen after the reset finished (there must be none), the buffers, completion
    words and counters as the reset left them, and the outcome of `then`."""
    tb = driver.tb
    tb.memory.clear()
    await driver.reset()
    writes: list[tuple[int, int, int]] = []  # (cycle, bus address, bytes)
    write = tb.memory.write

    def recording(addr: int, data: bytes) -> None:
        writes.append((tb.now_cycles(), addr, len(data)))
        write(addr, data)

    tb.memory.write = recording
    try:
        port = SimPort(driver)
        first = await player.run_async(player.scenario_steps(job.scenario), port)
        await tb.cycles(job.reset_after)
        at_reset = await driver.counters()
        writes_at_reset = len(writes)
        await driver.reset()
        reset_done = tb.now_cycles()
        after = await driver.counters()
        queues = [await driver.queue_state(q) for q in range(driver.geometry.num_queues)]
        errlog = await driver.error_log()
        await tb.cycles(job.settle)
        buffers = {name: port.read(handle, 0, size).hex() for name, (handle, size) in first.buffers.items()}
        late = [w for w in writes if w[0] > reset_done]
        then = (await player.run_async(player.play_scenario(job.then), port)).to_json()
    finally:
        tb.memory.write = write
    return {
        "completed_at_reset": at_reset.descriptors, "writes_at_reset": writes_at_reset,
        "late_writes": late, "buffers": buffers,
        "counters_after": [after.descriptors, after.bytes],
        "queues_after": [{"enabled": q.enabled, "halted": q.halted, "busy": q.busy,
                          "completion_word": q.completion_word} for q in queues],
        "errlog_after": len(errlog), "then": then,
    }


DRIVER_JOBS = {ScenariosJob: play_scenarios, ResetInFlightJob: reset_in_flight}


async def run_batch(driver: SimDriver, jobs: tuple[ScenariosJob | ResetInFlightJob, ...]) -> list[dict]:
    """The jobs one after the other on one testbench, each under its own pauses."""
    log = logging.getLogger("cocotb.arkdma.batch")
    results = []
    for k, job in enumerate(jobs):
        if type(job) not in DRIVER_JOBS:
            raise ValueError(f"a batch runs scenario and reset jobs, not {type(job).__name__}")
        t0, c0 = time.monotonic(), driver.tb.now_cycles()
        apply_pauses(driver.tb, job.pause)
        try:
            results.append(await DRIVER_JOBS[type(job)](driver, job))
        finally:
            apply_pauses(driver.tb, None)
        log.info("batch job %d/%d (%s%s): %d cycles in %.1f s", k + 1, len(jobs), kind_of(job),
                    ", paused" if job.pause else "", driver.tb.now_cycles() - c0, time.monotonic() - t0)
    return results
