"""Runs generated cases on the RTL engine: all of them in one simulator run of one model build."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from driver.scenario import Outcome
from sim.fuzz.cases import GEOMETRY, Case

DEFAULT_BUDGET_CYCLES = 400_000  # a wait longer than this is a stall (the longest generated case needs ~30k)


class Stall:
    """A case the engine did not finish: what the driver waited for and the queues' registers then."""

    def __init__(self, what: str, queues: list[dict]):
        self.what, self.queues = what, queues

    def __str__(self) -> str:
        stuck = [q for q in self.queues if q.get("busy") or q.get("enabled") and not q.get("halted")]
        named = ", ".join(f"queue {q['queue']} (enabled={q['enabled']}, busy={q['busy']}, "
                          f"completion word {q['completion_word']:#x})" for q in stuck) or "no queue busy"
        return f"stall: {self.what}; {named}"


def run_cases_rtl(cases: list[Case], data_width: int = 512, budget_cycles: int = DEFAULT_BUDGET_CYCLES,
                  console=None) -> list[Outcome | Stall | None]:
    """Outcome (or Stall) per case; None for cases the run never reached (after a reset that hung)."""
    from rtl.params import EngineParams
    from sim.build import BUILD_ROOT, SimulationError, build, run

    params = EngineParams(data_width=data_width, **GEOMETRY)
    model = build(params, console=console)
    runs = BUILD_ROOT / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="fuzz-", dir=runs))
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps({"cases": [c.to_json() for c in cases], "budget_cycles": budget_cycles}))
    failure = None
    try:
        run(model, "sim.fuzz.session", run_dir,
            env={"ARKDMA_SIM_JOB": str(job_file), "ARKDMA_SIM_RESULT": str(result_file)})
    except SimulationError as exc:
        failure = exc  # the results written so far still count; the case after them gets the error
    raw = json.loads(result_file.read_text())["results"] if result_file.exists() else []
    out: list[Outcome | Stall | None] = []
    for r in raw:
        out.append(Stall(r["stall"], r["queues"]) if "stall" in r else Outcome.from_json(r))
    if failure is not None and len(out) < len(cases):
        out.append(Stall(f"the simulator failed: {failure}", []))
    return out + [None] * (len(cases) - len(out))
