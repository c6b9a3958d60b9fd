"""Runs simulation jobs: builds the model for the parameters, starts the simulator on sim/session.py, returns the result."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from rtl.params import EngineParams
from sim.job_types import Job, job_to_json, kind_of
from sim.build import BUILD_ROOT, MAX_RUNS, SimulationError, build, prune, run


WAVES_ENV = "ARKDMA_WAVES"  # set to 1: every simulation records a VCD (a separate model build with tracing)


def waves_requested() -> bool:
    return os.environ.get(WAVES_ENV, "") not in ("", "0")


def run_job(params: EngineParams, job: Job, *, waves: bool = False, console=None, keep: Path | None = None) -> dict:
    """One simulator run of `job` (sim/job_types.py; sim/session.py plays it) on a model built with `params`. The run's folder
    (log, results, waves) is `keep`, or a fresh one under build/sim/runs/ (the newest MAX_RUNS are kept).
    With `waves` (or ARKDMA_WAVES=1) the run records dump.vcd there and the result names it under "vcd"."""
    waves = waves or waves_requested()
    model = build(params, waves=waves, console=console)
    runs = BUILD_ROOT / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if keep is None:
        prune(keep_runs=MAX_RUNS - 1, keep_models=1 << 30)
    run_dir = keep or Path(tempfile.mkdtemp(prefix=f"{kind_of(job)}-", dir=runs))
    run_dir.mkdir(parents=True, exist_ok=True)
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps(job_to_json(job)))
    result_file.unlink(missing_ok=True)
    status = console.status(f"simulating ({kind_of(job)})") if console else _Null()
    with status:
        run(model, "sim.session", run_dir, env={"ARKDMA_SIM_JOB": str(job_file), "ARKDMA_SIM_RESULT": str(result_file)})
    if not result_file.exists():
        raise SimulationError(f"the simulation finished without a result; see {run_dir / 'sim.log'}")
    result = json.loads(result_file.read_text())
    if waves:
        vcd = run_dir / "dump.vcd"
        if not vcd.exists():
            raise SimulationError(f"the run was traced but wrote no {vcd.name}; see {run_dir / 'sim.log'}")
        result["vcd"] = str(vcd)
        if console:
            console.print(f"waveform: {vcd}")
    return result


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
