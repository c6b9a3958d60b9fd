"""RtlProvider: the hardware engine under Verilator, as an engine the conformance suite and `arkdma demo` can use."""

from __future__ import annotations

from driver.abi import Capability
from driver.errors import EngineUnavailable
from driver.provider import EngineProvider

# What the engine reports in CAPS (rtl/register_file.py); kept here so listing engines needs no Amaranth.
RTL_CAPS = (Capability.NOTIFY | Capability.FENCE | Capability.IMM | Capability.ERROR_LOG | Capability.BUS_ERRORS
            | Capability.PERF_COUNTERS)
DEFAULT_DATA_WIDTH = 512
# The demo's workload is cut to this on the simulated engine (cocotb runs some thousand cycles a second).
DEMO_BYTES_PER_SIZE = 512 << 10
DEMO_MAX_DESCRIPTORS = 256


class RtlProvider(EngineProvider):
    name = "rtl"
    summary = "the Amaranth DMA engine under Verilator (cocotb bus models, simulated clock)"
    max_workload_bytes = 64 << 20
    workload_pace = "simulated cycle by cycle: tens of MiB take minutes"

    def unavailable_reason(self) -> str | None:
        from sim.toolchain import missing

        return missing()

    def runs_in_process(self) -> bool:
        return False

    def open(self, **params):
        raise EngineUnavailable(
            "the rtl engine runs inside a Verilator simulation, not in this process: use run_scenarios() or "
            "run_workload() (as the conformance suite and `arkdma demo` do), or `arkdma sim bench`"
        )

    def capabilities(self) -> Capability:
        return RTL_CAPS

    def run_scenarios(self, scenarios, data_width: int = DEFAULT_DATA_WIDTH, console=None, **params) -> dict:
        """All scenarios of one geometry in one simulator run (a reset between them); {name: Outcome}."""
        from driver.scenario import Outcome, by_geometry
        from rtl.params import EngineParams
        from sim.job_types import ScenariosJob
        from sim.jobs import run_job

        groups = by_geometry(scenarios)
        outcomes = {}
        for (nq, slots, regions), batch in groups.items():
            p = EngineParams(data_width=data_width, num_queues=nq, slots=slots, num_regions=regions, **params)
            result = run_job(p, ScenariosJob(tuple(batch)), console=console)
            outcomes.update({name: Outcome.from_json(o) for name, o in result["outcomes"].items()})
        return outcomes

    def run_workload(self, spec, data_width: int = DEFAULT_DATA_WIDTH, console=None, **params):
        """`arkdma demo`'s workload in the simulator, every byte checked; times are simulated clock."""
        from dataclasses import replace

        from driver.workload import WorkloadResult, WorkloadRow
        from rtl.params import EngineParams
        from sim.job_types import Timing, WorkloadJob
        from sim.jobs import run_job

        p = EngineParams(data_width=data_width, **params)
        timing = Timing()
        asked = spec
        spec = replace(spec, bytes_per_size=min(spec.bytes_per_size, DEMO_BYTES_PER_SIZE),
                       max_descriptors=min(spec.max_descriptors, DEMO_MAX_DESCRIPTORS))
        result = run_job(p, WorkloadJob(spec, timing), console=console)
        out = WorkloadResult(self.name, [WorkloadRow(**row) for row in result["rows"]])
        if spec != asked:
            out.notes.append(
                f"workload shrunk for the simulated engine: at most {spec.bytes_per_size:,} bytes and "
                f"{spec.max_descriptors:,} descriptors per size (asked {asked.bytes_per_size:,} and "
                f"{asked.max_descriptors:,}); `arkdma sim bench` streams 4 MiB per size with a full window")
        out.notes.append(
            f"simulated {p.data_width}-bit engine at {timing.clock_mhz:g} MHz, memory read latency "
            f"{timing.read_latency_ns:g} ns, write response {timing.write_latency_ns:g} ns; "
            f"{result['cycles']:,} cycles in {result['wall_seconds']:.1f} s of simulation"
        )
        return out
