"""The `card-sim` engine: the engine behind the UltraScale+ PCIe front end (rtl/pcie_completer.py,
rtl/pcie_requester.py), driven through cocotbext-pcie's endpoint and root complex (sim/card.py): register
programs and windows through BAR0, the engine's DMA across the link into host memory. The card is built with
sim/card.py's SIM_READS_OUTSTANDING reads in flight (16, not the shipped 128: a build of about a minute and a
half instead of eight), unless run_scenarios is given reads_outstanding.

Write errors are not reported: PCIe writes are posted, so a write to host memory that is not there is
dropped by the root complex and the engine is never told. The engine therefore reports no BUS_ERRORS
capability here, and scenarios that need one are skipped."""

from __future__ import annotations

from driver.abi import Capability
from driver.errors import EngineUnavailable
from driver.provider import EngineProvider
from sim.provider import RTL_CAPS

CARD_CAPS = RTL_CAPS & ~Capability.BUS_ERRORS


class CardSimProvider(EngineProvider):
    name = "card-sim"
    summary = "the engine behind its PCIe front end, through an UltraScale+ PCIe model and root complex"
    max_workload_bytes = 1 << 20
    workload_pace = "simulated cycle by cycle through a PCIe model"

    def unavailable_reason(self) -> str | None:
        from sim.toolchain import missing

        reason = missing()
        if reason:
            return reason
        from importlib.util import find_spec

        try:
            found = find_spec("cocotbext.pcie") is not None
        except ModuleNotFoundError:  # no cocotbext at all
            found = False
        return None if found else "cocotbext-pcie is missing: pip install 'arkdma[hw]' (or run ./dev)"

    def runs_in_process(self) -> bool:
        return False

    def open(self, **params):
        raise EngineUnavailable("card-sim runs inside a Verilator simulation: use run_scenarios() (the "
                                "conformance suite does)")

    def capabilities(self) -> Capability:
        return CARD_CAPS

    def run_scenarios(self, scenarios, console=None, **params) -> dict:
        """Each geometry's scenarios in one simulator run of the card (sim/card_session.py)."""
        import json
        import tempfile
        from pathlib import Path

        from driver.scenario import Outcome, by_geometry
        from sim.build import BUILD_ROOT, SimulationError, build, run
        from sim.card import CARD, SIM_READS_OUTSTANDING, bar0_bytes, card_params
        from sim.job_types import ScenariosJob, job_to_json

        groups = by_geometry(scenarios)
        outcomes = {}
        for (nq, slots, regions), batch in groups.items():
            p = card_params(num_queues=nq, slots=slots, num_regions=regions,
                            **{"reads_outstanding": SIM_READS_OUTSTANDING, **params})
            model = build(p, console=console, top=CARD)
            (BUILD_ROOT / "runs").mkdir(parents=True, exist_ok=True)
            run_dir = Path(tempfile.mkdtemp(prefix="card-", dir=BUILD_ROOT / "runs"))
            job, result = run_dir / "job.json", run_dir / "result.json"
            job.write_text(json.dumps(job_to_json(ScenariosJob(tuple(batch)))))
            run(model, "sim.card_session", run_dir, testcase="scenarios",
                env={"ARKDMA_SIM_JOB": str(job), "ARKDMA_SIM_RESULT": str(result),
                     "ARKDMA_CARD_BAR0": str(bar0_bytes(p))})
            if not result.exists():
                raise SimulationError(f"the card simulation finished without a result; see {run_dir / 'sim.log'}")
            outcomes.update({n: Outcome.from_json(o) for n, o in json.loads(result.read_text())["outcomes"].items()})
        return outcomes
