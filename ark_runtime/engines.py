"""Which engines exist, which can run here (and why not), and how to open one.

The runtime and `arkdma demo` pick the best available engine in PREFERENCE order;
`engine=` forces one. Each provider is named by "module:Class" and imported only when
asked for, so a machine without an engine's parts (CuPy, the native library, Amaranth,
cocotb) still lists it, with the reason it cannot run.
"""

from __future__ import annotations

import functools
from importlib import metadata
from dataclasses import dataclass

from driver.backend import Backend
from driver.errors import EngineUnavailable
from driver.provider import EngineProvider

# Best first, by name. Where each lives is registered by its package as an "arkdma.engines" entry point
# (pyproject.toml), so this module names no part of the hardware side; a provider is imported only when
# asked for, so a machine without an engine's parts (CuPy, the native library, Amaranth, cocotb) still
# lists it, with the reason it cannot run.
PREFERENCE = ("card", "software-cuda", "rtl", "software-host", "reference")
ENTRY_POINT_GROUP = "arkdma.engines"


def _from_checkout() -> dict[str, metadata.EntryPoint]:
    """The entry points as the checkout's pyproject.toml declares them, for a source tree run without
    installing (e.g. a native library built in place)."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        table = tomllib.loads(pyproject.read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return {}
    return {name: metadata.EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in table.items()}


@functools.cache
def _registered() -> dict[str, metadata.EntryPoint]:
    found = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)} or _from_checkout()
    if not found:
        raise EngineUnavailable(
            f"no engine is registered (no {ENTRY_POINT_GROUP!r} entry points): arkdma is not installed; "
            "run ./dev or pip install -e . in the checkout"
        )
    return found


def _ranked() -> list[str]:
    """Registered engines, best first (ones not in PREFERENCE after, by name)."""
    names = _registered()
    return [n for n in PREFERENCE if n in names] + sorted(set(names) - set(PREFERENCE))


class _Missing(EngineProvider):
    def __init__(self, name: str, reason: str):
        self.name, self.summary, self._reason = name, "", reason

    def unavailable_reason(self) -> str | None:
        return self._reason

    def open(self, **params) -> Backend:
        raise EngineUnavailable(f"engine {self.name} cannot run here: {self._reason}")


@dataclass(frozen=True)
class EngineStatus:
    name: str
    summary: str
    available: bool
    reason: str  # why not, when not available


def known() -> list[str]:
    return _ranked()


def provider(name: str) -> EngineProvider:
    registered = _registered()
    if name not in registered:
        raise EngineUnavailable(f"unknown engine {name!r}; known engines: {', '.join(_ranked())}")
    entry = registered[name]
    try:
        return entry.load()()
    except ModuleNotFoundError as exc:
        if exc.name and entry.module.startswith(exc.name):
            return _Missing(name, f"this build of arkdma has no {entry.module} module")
        raise


def status() -> list[EngineStatus]:
    out = []
    for name in _ranked():
        p = provider(name)
        reason = p.unavailable_reason()
        out.append(EngineStatus(name, p.summary, reason is None, reason or ""))
    return out


@dataclass(frozen=True)
class Choice:
    """The engine picked and why: each better engine passed over, with its reason."""

    name: str
    passed_over: tuple[tuple[str, str], ...]

    def explain(self) -> str:
        why = "; ".join(f"{n}: {r}" for n, r in self.passed_over)
        return f"engine '{self.name}'" + (f" (better ones cannot run here: {why})" if why else " (the best there is)")


def choose(in_process: bool = False) -> Choice:
    """The most capable engine that can run here (only ones a Backend can be opened for, when asked),
    with the reasons every better engine was passed over. The CLI and open_engine() both use this."""
    passed: list[tuple[str, str]] = []
    for name in _ranked():
        p = provider(name)
        reason = p.unavailable_reason()
        if reason is None and in_process and not p.runs_in_process():
            reason = "runs only through the simulator (arkdma demo / the conformance suite), not as an open Backend"
        if reason is None:
            return Choice(name, tuple(passed))
        passed.append((name, reason))
    raise EngineUnavailable("no engine can run here (the reference engine always should)")


def best(in_process: bool = False) -> str:
    """The name of choose()'s engine."""
    return choose(in_process).name


def open_engine(name: str | None = None, **params) -> Backend:
    """Open `name`, or the best in-process engine when None (choose(in_process=True) says why)."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise EngineUnavailable(f"engine name {name!r} is empty or not a string; known engines: {', '.join(_ranked())}")
    p = provider(name or best(in_process=True))
    reason = p.unavailable_reason()
    if reason:
        raise EngineUnavailable(f"engine {p.name} cannot run here: {reason}")
    return p.open(**params)
