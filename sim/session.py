"""The cocotb test module every engine simulation runs: it reads a job (JSON) and writes its result (JSON).

Jobs: {"kind": "scenarios", "scenarios": [...]}, {"kind": "workload", "spec": {...}}, {"kind": "bench", ...},
{"kind": "batch", "jobs": [...]} (see sim/stress_jobs.py).
The job file is named by ARKDMA_SIM_JOB, the result file by ARKDMA_SIM_RESULT; both are written and read
by sim/provider.py and sim/bench.py, which start the simulator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb

from sim import stress_jobs
from sim.driver_model import SimDriver
from sim.tb import EngineTB, Timing


async def start(dut, timing: Timing) -> SimDriver:
    tb = EngineTB(dut, timing)
    await tb.reset()
    driver = SimDriver(tb)
    await driver.open()
    return driver


async def play_scenarios(dut, job: dict) -> dict:
    driver = await start(dut, Timing(**job.get("timing", {})))
    return await stress_jobs.play_scenarios(driver, job["scenarios"])


async def batch(dut, job: dict) -> dict:
    """Several jobs on one testbench in one simulator run, each under its own pauses (sim/stress_jobs.py)."""
    driver = await start(dut, Timing(**job.get("timing", {})))
    return {"results": await stress_jobs.run_batch(driver, job["jobs"])}


async def workload(dut, job: dict) -> dict:
    import time
    from dataclasses import asdict

    from driver import player
    from driver.workload import WorkloadSpec
    from sim.sim_port import SimPort

    t0 = time.monotonic()
    driver = await start(dut, Timing(**job.get("timing", {})))
    spec = WorkloadSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in job["spec"].items()})
    rows = await player.run_async(player.workload(spec), SimPort(driver))
    return {"rows": [asdict(r) for r in rows], "cycles": driver.tb.now_cycles(), "wall_seconds": time.monotonic() - t0}


async def bench(dut, job: dict) -> dict:
    """One step of `arkdma sim bench` (sim/bench.py): {"step": "size", "size", "count", "notify_every"}
    measures one descriptor alone, then a stream; {"step": "accept", "count"} the accept rate."""
    from driver import register_program as rp
    from sim import bench_job

    driver = await start(dut, Timing(**job.get("timing", {})))
    doorbell = rp.ring(bench_job.QUEUE, 0)[0].addr
    if job["step"] == "accept":
        setup = bench_job.Setup(driver, 64 * job["count"], seed=1)
        await setup.open()
        return {"accept": await bench_job.accept_rate(driver, setup, job["count"], doorbell)}
    size, count = job["size"], job["count"]
    setup = bench_job.Setup(driver, size * count, seed=size)
    await setup.open()
    single = await bench_job.single(driver, setup, size, doorbell)
    streamed = await bench_job.stream(driver, setup, size, count, job["notify_every"])
    return {"single": single, "stream": streamed, "cycles": driver.tb.now_cycles()}


JOBS = {"scenarios": play_scenarios, "workload": workload, "bench": bench, "batch": batch}


@cocotb.test()
async def run_job(dut):
    job = json.loads(Path(os.environ["ARKDMA_SIM_JOB"]).read_text())
    result = await JOBS[job["kind"]](dut, job)
    Path(os.environ["ARKDMA_SIM_RESULT"]).write_text(json.dumps(result))
