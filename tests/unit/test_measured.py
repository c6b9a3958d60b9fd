"""The measured tables the kernel choices come from (ark_runtime/ops/tables/): every figure is the one its result
file holds, every row names a class and a candidate the table declares, and `decide` picks the candidate nearest the
best on the cases measured, by the asked device's rows where they cover the candidates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ark_runtime.ops import measured

ROOT = Path(__file__).resolve().parents[2]
TABLES = sorted(measured.TABLES.glob("*.json"))


def _at(data, path: str):
    """`rows[model=mlp-b8].arkdma_us`, `rows[id=...cp.async].us` or `thr4-b1.us` inside a loaded JSON document: a
    selection's value runs to its closing bracket (dots and all)."""
    while path:
        m = re.match(r"(\w+)\[(\w+)=([^\]]+)\]\.?", path)
        if m:
            key, field, value = m.groups()
            data = next(r for r in data[key] if str(r[field]) == value)
        else:
            m = re.match(r"([^.]+)\.?", path)
            data = data[m.group(1)]
        path = path[m.end():]
    return data


def test_a_selection_may_hold_dots():
    doc = {"rows": [{"id": "a-loader=cp.async", "us": 3.5}], "thr4-b1": {"us": 2.0}}
    assert _at(doc, "rows[id=a-loader=cp.async].us") == 3.5 and _at(doc, "thr4-b1.us") == 2.0


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_every_figure_is_the_one_its_result_file_holds(path):
    table = json.loads(path.read_text())
    assert table["decision"] == path.stem and table["default"] and table["rows"]
    for row in table["rows"]:
        assert row["class"] in table["classes"], row
        source = ROOT / row["source"]
        assert source.is_file(), f"{row['source']} is not in the tree"
        if "at" in row:
            assert _at(json.loads(source.read_text()), row["at"]) == row["us"], row
        else:
            assert row["text"] in source.read_text() and f"{row['us']:,}" in row["text"], row


def test_the_loader_and_skinny_decisions_are_the_measured_ones():
    assert measured.decide("matmul_sm90.loader", "waves") == "tma"
    assert measured.decide("matmul_sm90.loader", "one wave") == "cp.async"
    pick = ("gemv", "gemv_mma")
    assert measured.decide("skinny.tile", "1-4 rows", candidates=pick) == "gemv"
    assert measured.decide("skinny.tile", "5-16 rows", candidates=pick) == "gemv_mma"
    # the H200's own rows measure no gemv_mma: every device's rows decide
    assert measured.decide("skinny.tile", "5-16 rows", "H200", pick) == "gemv_mma"
    assert measured.decide("matmul_sm90.epilogue", "256 columns") == "staged"
    assert measured.decide("matmul_sm90.epilogue", "64-128 columns") == "unrolled"


def test_a_device_with_rows_for_every_candidate_decides_alone(tmp_path, monkeypatch):
    table = {"decision": "t", "question": "?", "classes": {"c": ""}, "default": "a", "rows": [
        {"device": "X", "class": "c", "case": "k", "candidate": "a", "us": 1.0},
        {"device": "X", "class": "c", "case": "k", "candidate": "b", "us": 2.0},
        {"device": "Y", "class": "c", "case": "k", "candidate": "a", "us": 3.0},
        {"device": "Y", "class": "c", "case": "k", "candidate": "b", "us": 1.5},
    ]}
    (tmp_path / "t.json").write_text(json.dumps(table))
    monkeypatch.setattr(measured, "TABLES", tmp_path)
    measured.table.cache_clear()
    try:
        assert measured.decide("t", "c", "X") == "a" and measured.decide("t", "c", "Y") == "b"
        assert measured.decide("t", "c", "Z") == "a"  # no rows of its own: every device's (a: 1.0 and 2.0 of best)
    finally:
        measured.table.cache_clear()


def test_unknown_decisions_and_classes_are_refused_naming_the_known_ones():
    with pytest.raises(measured.MeasuredError, match="no measured table 'warp.size' .*matmul_sm90.loader"):
        measured.decide("warp.size", "x")
    with pytest.raises(measured.MeasuredError, match="shape class 'huge' is not one of one wave, waves"):
        measured.decide("matmul_sm90.loader", "huge")


@pytest.mark.parametrize(("reported", "family"), [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"),
                                                  ("NVIDIA A100-SXM4-80GB", "A100"), ("something else", "something else")])
def test_the_device_a_table_names_is_the_gpus_model(reported, family):
    from ark_runtime.scheduler import device_family

    assert device_family(reported) == family
