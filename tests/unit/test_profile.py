"""Runtime.profile()'s arithmetic without a GPU: tile stamps of a planned model turned into time per op and
per SM, and refused when no iteration was timed."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.plan import build_plan
from ark_runtime.profile import Profile, build_profile
from ark_runtime.scheduler import DeviceSpec
from arkdma_cli.bench import profile_table


def _planned(name: str, sms: int = 8):
    m = fuse(models.named(name))
    return m, build_plan(m, DeviceSpec(num_sms=sms))


def _stamps_in_stream_order(plan, tile_us: float = 2.0, gap_us: float = 0.5) -> np.ndarray:
    """Each SM runs its tiles back to back, `gap_us` apart, from t = 1 ms."""
    stamps = np.zeros((len(plan.tiles), 2), np.uint64)
    for stream in plan.streams:
        t = 1_000_000.0
        for item in stream:
            if item["op"] == "run":
                stamps[item["tile"]] = (int(t), int(t + tile_us * 1e3))
                t += (tile_us + gap_us) * 1e3
    return stamps


def test_every_tile_is_counted_once_per_op_and_per_sm():
    m, plan = _planned("block-s128")
    prof = build_profile(m, plan, _stamps_in_stream_order(plan))
    assert sum(o.tiles for o in prof.ops) == len(plan.tiles)
    assert sum(s.tiles for s in prof.sms) == len(plan.tiles)
    for o in prof.ops:
        assert o.mean_tile_us == pytest.approx(2.0) and o.max_tile_us == pytest.approx(2.0)
        assert o.busy_us == pytest.approx(2.0 * o.tiles)
    longest = max(sum(1 for i in s if i["op"] == "run") for s in plan.streams)
    assert prof.iteration_us == pytest.approx(longest * 2.5 - 0.5)
    for s in prof.sms:
        assert s.busy_us + s.idle_us == pytest.approx(prof.iteration_us) or s.tiles == 0


def test_a_slow_tile_shows_in_its_op_and_its_sm():
    m, plan = _planned("mlp-b8")
    stamps = _stamps_in_stream_order(plan)
    slow = len(plan.tiles) - 1
    stamps[slow, 1] += 100_000  # 100 us more
    prof = build_profile(m, plan, stamps)
    op = next(o for o in prof.ops if o.op == plan.tiles[slow]["op"])
    assert op.max_tile_us == pytest.approx(102.0)
    assert max(s.busy_us for s in prof.sms) >= 100.0
    assert prof.iteration_us >= 100.0


def test_json_round_trip_and_table():
    m, plan = _planned("chain64")
    prof = build_profile(m, plan, _stamps_in_stream_order(plan))
    again = Profile.from_json(prof.as_json())
    assert again == prof
    text = profile_table(prof.as_json())
    assert "fused neg+63" in text and "iteration" in text


def test_an_iteration_not_yet_timed_is_refused():
    m, plan = _planned("chain64")
    stamps = _stamps_in_stream_order(plan)
    stamps[3] = 0
    with pytest.raises(ValueError, match="run the model at least once"):
        build_profile(m, plan, stamps)


def test_a_world_ranks_profile_counts_only_the_tiles_it_runs():
    """A World's rank has the World's tiles but its own SMs' streams; the other ranks' tiles are never stamped in its
    array, and its profile is of its own tiles and ops."""
    import dataclasses

    from ark_runtime.model import Model
    from ark_runtime.world import World
    from ark_runtime.world_plan import lower_world

    models = []
    for r in range(2):
        m = Model("w", rank=r, world=2)
        x = m.unary("neg", m.input("x", (64, 256)))
        m.send(x, 1 - r)
        m.output(m.unary("neg", m.recv((64, 256), "fp32", 1 - r)))
        models.append(m)
    lw = lower_world(World(models), DeviceSpec(num_sms=4))
    per = lw.plan.world["sms_per_rank"]
    for rank in range(2):
        plan = dataclasses.replace(lw.plan, streams=lw.plan.streams[rank * per:(rank + 1) * per])
        stamps = _stamps_in_stream_order(plan)  # only this rank's tiles: the others' stay 0
        runs = {i["tile"] for s in plan.streams for i in s if i["op"] == "run"}
        assert 0 < len(runs) < len(plan.tiles)
        prof = build_profile(lw.joined.model, plan, stamps)
        assert sum(o.tiles for o in prof.ops) == len(runs) == sum(s.tiles for s in prof.sms)
        assert {o.op for o in prof.ops} == {op for op, r in enumerate(lw.plan.world["op_rank"]) if r == rank}
        assert len(prof.sms) == per
        stamps[next(iter(runs))] = 0
        with pytest.raises(ValueError, match="run the model at least once"):
            build_profile(lw.joined.model, plan, stamps)
    idle = dataclasses.replace(lw.plan, streams=[[] for _ in range(per)])
    with pytest.raises(ValueError, match="run no tiles"):
        build_profile(lw.joined.model, idle, np.zeros((len(lw.plan.tiles), 2), np.uint64))
