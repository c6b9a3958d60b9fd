"""The cocotb test module of generated cases on the RTL engine: many cases in one simulator run, each
from a clean engine under its own memory latencies and channel pauses, every wait bounded.

The job file (ARKDMA_SIM_JOB) is {"cases": [Case as JSON], "budget_cycles": N}; the result file
(ARKDMA_SIM_RESULT) gets, after every case, {"results": [...]}, each an Outcome as JSON or
{"stall": "what waited", "queues": [...]}. After a stall the engine is reset; if that reset does not
finish, the remaining cases are not run (the result says so)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb

from driver.errors import EngineTimeout
from sim.driver_model import POLL_GAP, SimDriver
from sim.fuzz.cases import Case
from driver import player
from sim.sim_port import SimPort
from sim.stress_jobs import apply_pauses
from sim.job_types import Timing
from sim.tb import EngineTB

SETTLE_CYCLES = 4000  # liveness bound: the completion words reach memory this soon after the engine is idle


def set_latency(tb: EngineTB, timing: dict) -> None:
    """Memory latencies for the next case (the delayed channels of sim/host_memory.py take them at once)."""
    t = Timing(**timing)
    tb.host.read.ar_channel.delay_ns = max(0, t.cycles(t.read_latency_ns) - 2) * tb.period_ns
    tb.host.write.b_channel.delay_ns = max(0, t.cycles(t.write_latency_ns) - 2) * tb.period_ns


async def _states(driver: SimDriver) -> list[dict]:
    out = []
    for q in range(driver.geometry.num_queues):
        s = await driver.queue_state(q)
        out.append({"queue": q, "enabled": s.enabled, "halted": s.halted, "busy": s.busy, "error": s.error.name,
                    "completion_word": s.completion_word})
    return out


async def play_case(driver: SimDriver, case: Case) -> dict:
    port = SimPort(driver)
    try:
        state = await player.run_async(player.scenario_steps(case.scenario), port)
        await driver.wait_idle()
    except EngineTimeout as exc:
        return {"stall": str(exc), "queues": await _states(driver)}
    # Liveness within a bound: each queue's word in memory catches up with its register.
    for _ in range(SETTLE_CYCLES // POLL_GAP):
        behind = False
        for q, (handle, offset) in state.completion.items():
            word = int.from_bytes(port.read(handle, offset, 8), "little")
            if word != (await driver.queue_state(q)).completion_word:
                behind = True
        if not behind:
            break
        await driver.tb.cycles(POLL_GAP)
    return (await player.run_async(player.outcome(state), port)).to_json()


@cocotb.test()
async def run_cases(dut):
    job = json.loads(Path(os.environ["ARKDMA_SIM_JOB"]).read_text())
    result_file = Path(os.environ["ARKDMA_SIM_RESULT"])
    tb = EngineTB(dut, Timing())
    await tb.reset()
    driver = SimDriver(tb, budget_cycles=int(job["budget_cycles"]))
    await driver.open()
    results: list[dict] = []
    for raw in job["cases"]:
        case = Case.from_json(raw)
        set_latency(tb, case.timing)
        apply_pauses(tb, case.pause)
        try:
            tb.memory.clear()
            await driver.reset()
        except EngineTimeout as exc:
            results.append({"stall": f"the global reset before the case did not finish: {exc}", "queues": []})
            break
        try:
            results.append(await play_case(driver, case))
        finally:
            apply_pauses(tb, None)
        result_file.write_text(json.dumps({"results": results}))
    result_file.write_text(json.dumps({"results": results}))
