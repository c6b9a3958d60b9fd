"""The base class of engine providers: probe whether an engine can run here, open it, play work on it.

Providers live beside their engines (driver/, host/, sim/) and import their heavy parts
(CuPy, the native library, Amaranth, cocotb) only inside methods, so listing engines is
cheap and a GPU machine without the hardware tools still runs the runtime. The registry
that orders them is ark_runtime/engines.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from driver.backend import Backend


class EngineProvider(ABC):
    name: str
    summary: str

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the engine can run here, else one line saying why not and what to do."""

    @abstractmethod
    def open(self, **params) -> Backend:
        """A ready Backend; raises EngineUnavailable with the reason when it cannot run here."""

    def capabilities(self):
        """The engine's Capability bits (engines that run elsewhere override this)."""
        with self.open() as backend:
            return backend.geometry.caps

    def cannot_play(self, scenario) -> str | None:
        """Why this engine cannot play `scenario` (e.g. its memory is too small), or None."""
        return None

    def runs_in_process(self) -> bool:
        """False for engines that run work elsewhere (under a simulator) instead of handing out a Backend."""
        return True

    def run_scenarios(self, scenarios, **params) -> dict:
        """Play conformance scenarios (driver.scenario.Scenario), each on a fresh engine with the
        scenario's geometry; returns {scenario name: Outcome}. Engines that run elsewhere (a
        simulator) override this to play the whole batch in one run."""
        from driver import player

        outcomes = {}
        for sc in scenarios:
            with self.open(num_queues=sc.num_queues, slots=sc.slots, num_regions=sc.num_regions, **params) as be:
                outcomes[sc.name] = player.run(player.play_scenario(sc), player.BackendPort(be))
        return outcomes

    # Where the demo's copies read and write ("host", or "device" for GPU memory).
    workload_placements: tuple[str, str] = ("host", "host")
    # The most bytes `arkdma demo` should move on this engine in one run (None: no limit), and how fast it
    # goes, for the message that refuses more.
    max_workload_bytes: int | None = None
    workload_pace = "real hardware speed"

    def run_workload(self, spec, **params):
        """Run `arkdma demo`'s workload (driver.workload.WorkloadSpec) with the player; a WorkloadResult."""
        from driver.player import run_on_backend

        src, dst = self.workload_placements
        with self.open(**params) as backend:
            return run_on_backend(backend, spec, src_placement=src, dst_placement=dst)


class ReferenceProvider(EngineProvider):
    name = "reference"
    summary = "the ABI executed in Python (the executable spec)"
    max_workload_bytes = 1 << 30
    workload_pace = "bytes copied in Python, held twice in memory"

    def unavailable_reason(self) -> str | None:
        return None

    def open(self, **params) -> Backend:
        from driver.reference_engine import ReferenceEngine

        return ReferenceEngine(**params)
