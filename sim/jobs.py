"""Runs simulation jobs: builds the model for the parameters, starts the simulator on sim/session.py, returns the result."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rtl.params import EngineParams
from sim.build import BUILD_ROOT, SimulationError, build, run


def run_job(params: EngineParams, job: dict, *, waves: bool = False, console=None, keep: Path | None = None) -> dict:
    """One simulator run of `job` (see sim/session.py) on a model built with `params`. The run's folder
    (log, results, waves) is `keep`, or a fresh one under sim_build/runs/."""
    model = build(params, waves=waves, console=console)
    runs = BUILD_ROOT / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = keep or Path(tempfile.mkdtemp(prefix=f"{job['kind']}-", dir=runs))
    run_dir.mkdir(parents=True, exist_ok=True)
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps(job))
    result_file.unlink(missing_ok=True)
    status = console.status(f"simulating ({job['kind']})") if console else _Null()
    with status:
        run(model, "sim.session", run_dir, env={"ARKDMA_SIM_JOB": str(job_file), "ARKDMA_SIM_RESULT": str(result_file)})
    if not result_file.exists():
        raise SimulationError(f"the simulation finished without a result; see {run_dir / 'sim.log'}")
    return json.loads(result_file.read_text())


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
