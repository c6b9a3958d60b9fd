"""Parsers of the open flow's reports: nextpnr-ecp5's JSON report (--report) and yosys' `stat -json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fpga.errors import ReportError

# Segment types of a nextpnr critical path that are cell delays; "routing" is the other kind.
_LOGIC_SEGMENTS = {"clk-to-q", "logic", "setup"}


@dataclass(frozen=True)
class Resource:
    used: int
    available: int


@dataclass(frozen=True)
class ClockTiming:
    fmax_mhz: float
    target_mhz: float

    @property
    def met(self) -> bool:
        return self.fmax_mhz >= self.target_mhz


@dataclass(frozen=True)
class CriticalPath:
    """The slowest register-to-register path of one clock, as nextpnr timed it after routing."""

    clock: str
    start: str  # cell.port
    end: str
    delay_ns: float
    logic_ns: float
    routing_ns: float
    cells_crossed: int  # LUT, mux and carry cells the path goes through
    sources: tuple[str, ...]  # design source lines the path's nets come from, in path order


@dataclass(frozen=True)
class PnrReport:
    clocks: dict[str, ClockTiming]
    utilization: dict[str, Resource]  # by nextpnr bel type: TRELLIS_COMB, TRELLIS_FF, DP16KD, ...
    critical_paths: tuple[CriticalPath, ...]

    def used(self, bel: str) -> int:
        return self.utilization[bel].used if bel in self.utilization else 0

    def available(self, bel: str) -> int:
        return self.utilization[bel].available if bel in self.utilization else 0


def _load(source: str | Path | dict, what: str) -> dict:
    if isinstance(source, dict):
        return source
    text = Path(source).read_text() if isinstance(source, Path) else source
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{what} is not JSON ({exc}); was the tool interrupted? re-run the estimate") from exc


def short_source(src: str, roots: tuple[Path, ...] = ()) -> str:
    """A source location without this machine's folders: from the installed package on, or relative to a root."""
    _, sep, rest = src.rpartition("site-packages/")
    if sep:
        return rest
    for root in roots:
        prefix = str(root).rstrip("/") + "/"
        if src.startswith(prefix):
            return src[len(prefix):]
    return src


def _critical_path(entry: dict, roots: tuple[Path, ...]) -> CriticalPath:
    segments = entry["path"]
    if not segments:
        raise ReportError("nextpnr reported an empty critical path")
    logic = sum(s["delay"] for s in segments if s["type"] in _LOGIC_SEGMENTS)
    routing = sum(s["delay"] for s in segments if s["type"] == "routing")
    sources: list[str] = []
    for s in segments:
        for src in s.get("sources", ()):
            # /share/... are yosys' own techmap files inside the YoWASP image, not the design
            if not src.startswith("/share/"):
                short = short_source(src, roots)
                if short not in sources:
                    sources.append(short)
    first, last = segments[0]["from"], segments[-1]["to"]
    return CriticalPath(
        clock=entry["from"].removeprefix("posedge ").removeprefix("negedge "),
        start=f"{first['cell']}.{first['port']}",
        end=f"{last['cell']}.{last['port']}",
        delay_ns=round(logic + routing, 3),
        logic_ns=round(logic, 3),
        routing_ns=round(routing, 3),
        cells_crossed=len({s["to"]["cell"] for s in segments if s["type"] == "logic"}),
        sources=tuple(sources),
    )


def parse_nextpnr_report(source: str | Path | dict, roots: tuple[Path, ...] = ()) -> PnrReport:
    """Reads nextpnr's --report JSON; `roots` are folders to strip from source locations."""
    data = _load(source, "nextpnr's report")
    try:
        clocks = {name: ClockTiming(float(t["achieved"]), float(t["constraint"]))
                  for name, t in data["fmax"].items()}
        util = {bel: Resource(int(u["used"]), int(u["available"])) for bel, u in data["utilization"].items()}
        paths = tuple(_critical_path(p, roots) for p in data.get("critical_paths", ())
                      if p["from"] == p["to"] and p["from"].startswith(("posedge ", "negedge ")))
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"nextpnr's report lacks an expected field ({exc!r}); this parser was written "
                          "against nextpnr 0.11's report format") from exc
    return PnrReport(clocks, util, paths)


def parse_yosys_stat(source: str | Path | dict) -> dict[str, int]:
    """Cell counts by type of the whole synthesized design, from `stat -json` (yosys' own $-cells left out)."""
    data = _load(source, "yosys' stat")
    try:
        cells = data["design"]["num_cells_by_type"]
    except (KeyError, TypeError) as exc:
        raise ReportError(f"yosys' stat lacks design.num_cells_by_type ({exc!r}); this parser was written "
                          "against yosys 0.70's `stat -json`") from exc
    return {k: int(v) for k, v in sorted(cells.items()) if not k.startswith("$")}
