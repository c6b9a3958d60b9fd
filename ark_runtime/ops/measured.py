"""Kernel choices that rest on measurement, decided from the tables the measurements made (ark_runtime/ops/tables/
<decision>.json), not from rules in comments. A table lists, per device and shape class, each candidate's time on
the cases measured and where the figure comes from (a result file under bench/results/ and the field or text that
holds it; tests/unit/test_measured.py reads every one back).

`decide(decision, shape_class, device, candidates)`: of the candidates asked about (all the table's unless given),
the one whose times are nearest the best on each case measured: the mean, over the cases it was measured on, of its
time over the case's best time by any candidate. The rows are the device's own where they measure every candidate
asked about, else every device's. A class no row measures takes the table's default.
"""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

TABLES = Path(__file__).resolve().parent / "tables"


class MeasuredError(ValueError):
    """A decision or shape class no table has."""


@functools.cache
def table(decision: str) -> dict:
    path = TABLES / f"{decision}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TABLES.glob("*.json")))
        raise MeasuredError(f"no measured table {decision!r} (tables: {known})")
    return json.loads(path.read_text())


def decide(decision: str, shape_class: str, device: str | None = None,
           candidates: tuple[str, ...] | None = None) -> str:
    t = table(decision)
    if shape_class not in t["classes"]:
        raise MeasuredError(f"{decision}: shape class {shape_class!r} is not one of {', '.join(t['classes'])}")
    rows = [r for r in t["rows"] if r["class"] == shape_class]  # every candidate's: each case's best sets the scale
    wanted = set(candidates) if candidates else {r["candidate"] for r in rows}
    own = [r for r in rows if r["device"] == device]
    if own and {r["candidate"] for r in own} >= wanted:
        rows = own
    cases: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in rows:
        cases.setdefault((r["device"], r["case"]), {}).setdefault(r["candidate"], []).append(r["us"])
    ratios: dict[str, list[float]] = {}
    for times in cases.values():
        medians = {c: statistics.median(v) for c, v in times.items()}
        best = min(medians.values())
        for c, us in medians.items():
            ratios.setdefault(c, []).append(us / best)
    ratios = {c: v for c, v in ratios.items() if c in wanted}
    if not ratios:
        return t["default"]
    return min(sorted(ratios), key=lambda c: (statistics.fmean(ratios[c]), c != t["default"]))
