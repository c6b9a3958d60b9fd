"""Which engines exist, which can run here (and why not), and how to open one.

Each engine registers a provider. The runtime and `arkdma demo` pick the best available
one in PREFERENCE order; `engine=` forces one. Providers import their heavy parts
(CuPy, the native library, Amaranth, cocotb) only when probed or opened, so a GPU machine
without the hardware tools still runs the runtime.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from driver.backend import Backend
from driver.errors import EngineUnavailable

PREFERENCE = ("card", "software-cuda", "rtl", "software-host", "reference")


class EngineProvider(ABC):
    name: str
    summary: str

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the engine can run here, else one line saying why not and what to do."""

    @abstractmethod
    def open(self, **params) -> Backend:
        """A ready Backend; raises EngineUnavailable with the reason when it cannot run here."""

    def runs_in_process(self) -> bool:
        """False for engines that run a workload elsewhere (a simulator) instead of handing out a Backend."""
        return True

    def run_scenarios(self, scenarios, **params) -> dict:
        """Play conformance scenarios (driver.scenario.Scenario), each on a fresh engine with the
        scenario's geometry; returns {scenario name: Outcome}. Engines that run elsewhere (a
        simulator) override this to play the whole batch in one run."""
        from driver.scenario import play

        outcomes = {}
        for sc in scenarios:
            with self.open(num_queues=sc.num_queues, slots=sc.slots, num_regions=sc.num_regions, **params) as be:
                outcomes[sc.name] = play(be, sc)
        return outcomes

    def run_workload(self, spec, **params):
        """Run `arkdma demo`'s workload (a WorkloadSpec) on this engine; returns a WorkloadResult."""
        from ark_runtime.workload import run_on_backend

        with self.open(**params) as backend:
            return run_on_backend(backend, spec)


class ReferenceProvider(EngineProvider):
    name = "reference"
    summary = "the ABI executed in Python (the executable spec)"

    def unavailable_reason(self) -> str | None:
        return None

    def open(self, **params) -> Backend:
        from driver.reference_engine import ReferenceEngine

        return ReferenceEngine(**params)


_PROVIDERS: dict[str, Callable[[], EngineProvider]] = {"reference": ReferenceProvider}


def register(name: str, factory: Callable[[], EngineProvider]) -> None:
    _PROVIDERS[name] = factory


def _load_builtin_providers() -> None:
    """Providers that live beside their engines register themselves on import; missing parts are fine."""
    import importlib

    for module in ("host.provider", "sim.provider", "driver.card_provider"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise


@dataclass(frozen=True)
class EngineStatus:
    name: str
    summary: str
    available: bool
    reason: str  # why not, when not available


def provider(name: str) -> EngineProvider:
    _load_builtin_providers()
    if name not in _PROVIDERS:
        raise EngineUnavailable(f"unknown engine {name!r}; known engines: {', '.join(known())}")
    return _PROVIDERS[name]()


def known() -> list[str]:
    _load_builtin_providers()
    return sorted(_PROVIDERS, key=lambda n: PREFERENCE.index(n) if n in PREFERENCE else len(PREFERENCE))


def status() -> list[EngineStatus]:
    out = []
    for name in known():
        p = provider(name)
        reason = p.unavailable_reason()
        out.append(EngineStatus(name, p.summary, reason is None, reason or ""))
    return out


def best(in_process: bool = False) -> str:
    """The most capable engine that can run here."""
    for st in status():
        if st.available and (not in_process or provider(st.name).runs_in_process()):
            return st.name
    raise EngineUnavailable("no engine can run here (the reference engine should always be able to)")


def open_engine(name: str | None = None, **params) -> Backend:
    """Open `name`, or the best in-process engine when None."""
    p = provider(name or best(in_process=True))
    reason = p.unavailable_reason()
    if reason:
        raise EngineUnavailable(f"engine {p.name} cannot run here: {reason}")
    return p.open(**params)
