"""The campaign (sim/fuzz/campaign.py) finds a planted engine bug, shrinks it to a minimal case and writes a
reproducer that replays the failure."""

from __future__ import annotations

import dataclasses
import random

import pytest

pytest.importorskip("hypothesis")

from sim.fuzz.campaign import Campaign, load_reproducer  # noqa: E402
from sim.fuzz.oracle import judge, reference  # noqa: E402


def broken_engine(case):
    """The reference engine, except that a copy of 4096 bytes or more loses its last byte."""
    out = reference(case)
    buffers = dict(out.buffers)
    offsets = {s["id"]: s["offset"] for s in case.scenario.steps if s["op"] == "region"}
    for q, spec in case.queues.items():
        for d in spec["descriptors"]:
            if d["dst_region"] == 3 * q + 1 and d["length"] >= 4096 and d["flags"] < 8:
                b = bytearray(buffers[f"dst{q}"])
                b[offsets[3 * q + 1] + d["dst_offset"] + d["length"] - 1] ^= 0xFF
                buffers[f"dst{q}"] = bytes(b)
    return dataclasses.replace(out, buffers=buffers)


def test_campaign_shrinks_a_planted_bug_to_one_descriptor(tmp_path):
    campaign = Campaign("broken", broken_engine, tmp_path, max_descriptors=8)
    tally = campaign.run(1, rng=random.Random(5))
    assert tally.findings, f"the planted bug went unnoticed in {tally.cases} cases"
    finding = tally.findings[0]
    assert finding.shrunk and finding.file.exists()
    case, record = load_reproducer(finding.file)
    assert record["engine"] == "broken" and record["problems"] == finding.problems
    assert case.descriptors == 1 and len(case.queues) == 1
    assert [d["length"] for q in case.queues.values() for d in q["descriptors"]] == [4096]
    assert judge(case, broken_engine(case)) and judge(case, reference(case)) == []


def test_batched_campaign_shrinks_by_reductions(tmp_path):
    """The RTL's path (cases played in batches, sim/fuzz/shrink.py) on the planted bug, without a simulator."""
    batches = []

    def run_batch(cases):
        batches.append(len(cases))
        return [broken_engine(c) for c in cases]

    campaign = Campaign("broken-batched", None, tmp_path, run_batch=run_batch, batch=30, max_descriptors=8)
    tally = campaign.run(1, rng=random.Random(7))
    assert tally.findings, f"the planted bug went unnoticed in {tally.cases} cases"
    case, _ = load_reproducer(tally.findings[0].file)
    lengths = [d["length"] for q in case.queues.values() for d in q["descriptors"]]
    assert len(case.queues) == 1 and len(lengths) == 1 and lengths[0] >= 4096
    assert case.control == {"kind": "none"} and case.pause is None
    assert len(batches) > 1  # the reductions were played as batches after the round's



def test_a_failure_found_at_the_time_bound_is_still_shrunk(tmp_path):
    """Shrinking runs past the campaign's time bound: were its examples skipped there, Hypothesis would see
    the failure vanish and raise Flaky instead of writing a reproducer (what a slow CI machine met)."""
    clock = {"spent": False}

    def engine(case):
        out = broken_engine(case)
        clock["spent"] = clock["spent"] or bool(judge(case, out))  # the bound passes with the first failure
        return out

    campaign = Campaign("broken-late", engine, tmp_path, max_descriptors=8,
                        clock=lambda: float("inf") if clock["spent"] else 0.0)
    tally = campaign.run(1, rng=random.Random(5))
    assert clock["spent"] and tally.findings, "the planted bug went unnoticed"
    case, _ = load_reproducer(tally.findings[0].file)
    assert case.descriptors == 1
