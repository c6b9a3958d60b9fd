"""The cocotb test module every engine simulation runs: it reads a job (sim/job_types.py, as JSON) and writes
its result (JSON).

The job file is named by ARKDMA_SIM_JOB, the result file by ARKDMA_SIM_RESULT; both are written and read
by sim/jobs.py (run_job), which starts the simulator.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import cocotb

from driver import player
from sim import stress_jobs
from sim.driver_model import SimDriver
from sim.job_types import (BatchJob, BenchAcceptJob, BenchSizeJob, ScenariosJob, Timing, WorkloadJob,
                           job_from_json)
from sim.sim_port import SimPort
from sim.tb import EngineTB


async def start(dut, timing: Timing) -> SimDriver:
    tb = EngineTB(dut, timing)
    await tb.reset()
    driver = SimDriver(tb)
    await driver.open()
    return driver


async def play_scenarios(dut, job: ScenariosJob) -> dict:
    driver = await start(dut, job.timing)
    stress_jobs.apply_pauses(driver.tb, job.pause)
    return await stress_jobs.play_scenarios(driver, job)


async def batch(dut, job: BatchJob) -> dict:
    """Several jobs on one testbench in one simulator run, each under its own pauses (sim/stress_jobs.py)."""
    driver = await start(dut, job.timing)
    return {"results": await stress_jobs.run_batch(driver, job.jobs)}


async def workload(dut, job: WorkloadJob) -> dict:
    t0 = time.monotonic()
    driver = await start(dut, job.timing)
    rows = await player.run_async(player.workload(job.spec), SimPort(driver))
    return {"rows": [asdict(r) for r in rows], "cycles": driver.tb.now_cycles(), "wall_seconds": time.monotonic() - t0}


async def bench_size(dut, job: BenchSizeJob) -> dict:
    """One size of `arkdma sim bench` (sim/bench.py): one descriptor alone, then a stream."""
    from driver import register_program as rp
    from sim import bench_job

    driver = await start(dut, job.timing)
    doorbell = rp.ring(bench_job.QUEUE, 0)[0].addr
    setup = bench_job.Setup(driver, job.size * job.count, seed=job.size)
    await setup.open()
    single = await bench_job.single(driver, setup, job.size, doorbell)
    streamed = await bench_job.stream(driver, setup, job.size, job.count, job.notify_every)
    return {"single": single, "stream": streamed, "cycles": driver.tb.now_cycles()}


async def bench_accept(dut, job: BenchAcceptJob) -> dict:
    """The doorbell accept rate of `arkdma sim bench`."""
    from driver import register_program as rp
    from sim import bench_job

    driver = await start(dut, job.timing)
    doorbell = rp.ring(bench_job.QUEUE, 0)[0].addr
    setup = bench_job.Setup(driver, 64 * job.count, seed=1)
    await setup.open()
    return {"accept": await bench_job.accept_rate(driver, setup, job.count, doorbell)}


HANDLERS = {ScenariosJob: play_scenarios, BatchJob: batch, WorkloadJob: workload, BenchSizeJob: bench_size,
            BenchAcceptJob: bench_accept}


@cocotb.test()
async def run_job(dut):
    job = job_from_json(json.loads(Path(os.environ["ARKDMA_SIM_JOB"]).read_text()))
    result = await HANDLERS[type(job)](dut, job)
    Path(os.environ["ARKDMA_SIM_RESULT"]).write_text(json.dumps(result))
