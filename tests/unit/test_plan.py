"""The model API and the plan without a GPU: named and random models plan with every invariant holding, the
tiles of an op cover its output exactly once, the JSON round-trips, and the checker finds planted breakage
(a missing wait, a tile run twice or never, a signal lost, an order swapped, a cycle of waits)."""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from ark_runtime.fusion import fuse  # noqa: E402
from ark_runtime.model import Model, ModelError  # noqa: E402
from ark_runtime.models import NAMED, chain, named  # noqa: E402
from ark_runtime.plan import Plan, PlanError, build_plan  # noqa: E402
from ark_runtime.plan_check import check  # noqa: E402
from ark_runtime.scheduler import DeviceSpec  # noqa: E402
from ark_runtime.ops.matmul import block_order, skinny, skinny_cols  # noqa: E402
from ark_runtime.tiling import switched_off, tile_model  # noqa: E402
from tests.unit.model_strategies import models  # noqa: E402


@pytest.fixture(scope="module")
def plans():
    return {name: build_plan(named(name), DeviceSpec(num_sms=132)) for name in NAMED}


def test_named_models_plan_and_round_trip(plans):
    for name, plan in plans.items():
        assert check(plan) == [], name
        again = Plan.from_json(json.loads(plan.dumps()))
        assert again.as_json() == json.loads(plan.dumps()), name


def test_a_chain_stays_on_its_sms_and_waits_for_nothing(plans):
    plan = plans["chain64"]
    assert plan.stats()["waits"] == 0 and plan.counters == []
    sm = plan.estimate["sm"]
    per_op = len(plan.tiles) // 64
    assert all(sm[t["id"]] == sm[t["index"]] for t in plan.tiles), "tile i of every op runs where tile i of the first does"
    assert per_op >= 100  # spread over the SMs


def test_tiles_that_start_as_soon_anywhere_go_where_the_iteration_starts_latest():
    """mlp-b1's split-K sum (2 tiles) starts as soon on every SM, after the down projection: it goes to SMs that run
    no tile of the first op (128 tiles on 132 SMs leave 4), so the next iteration's first tiles do not wait behind it
    (on an H100 mlp-b1 took 90.4-90.6 us against 92.1-92.2 with the sum on SMs 0 and 1). mlp-b8's sum (16 tiles,
    nothing reads them: they end the iteration) waits up to SINK_SLACK of the schedule to stay there too (94.5-96.0
    against 97.1-99.6, where 12 of them held back the first op on SMs 0-11 by 9.5 us, the sum being slow beside the
    other SMs' weight streams); mlp-b64's (128 tiles, more than SINKS_PER_SM for each spare SM) is left where it
    starts first."""
    from ark_runtime.scheduler import SINKS_PER_SM
    from ark_runtime.split_k import split_k

    spec = DeviceSpec(num_sms=132)
    for name, sums in (("mlp-b1", 2), ("mlp-b8", 16), ("mlp-b64", 128)):
        model = split_k(fuse(named(name)), spec)
        plan = build_plan(model, spec)
        sm = plan.estimate["sm"]
        first_op = {sm[t["id"]] for t in plan.tiles if t["op"] == 0}
        spare = set(range(132)) - first_op
        placed = [sm[t["id"]] for t in plan.tiles if model.ops[t["op"]].kind == "split_sum"]
        assert len(placed) == sums and len(spare) == 4
        if sums <= SINKS_PER_SM * len(spare):
            assert set(placed) <= spare, (name, sorted(placed))
        else:
            assert len(set(placed) - spare) > 100
        assert build_plan(model, spec).estimate["sm"] == sm  # the same plan every time


def test_tiles_cover_each_output_exactly_once():
    m = named("block-s128")
    for sms in (1, 7, 132):
        tiles = tile_model(m, sms)
        for op in m.ops:
            out = m.tensors[op.output]
            seen = [[0] * out.cols for _ in range(out.rows)]
            for t in (t for t in tiles if t.op == op.id):
                w = t.writes
                for r in range(w.r0, w.r1):
                    for c in range(w.c0, w.c1):
                        seen[r][c] += 1
            assert all(v == 1 for row in seen for v in row), (op.kind, sms)


@pytest.mark.parametrize("rows, n, sms", [(1, 33, 4), (3, 1000, 132), (8, 4100, 132), (13, 4096, 7), (16, 16384, 132)])
def test_a_skinny_matmul_tile_owns_whole_columns_for_every_row(rows, n, sms):
    m = Model("skinny")
    m.output(m.matmul(m.input("x", (rows, 256), "bf16"), m.input("w", (256, n), "bf16")))
    tiles = tile_model(m, sms, wgmma=False)  # (where the wgmma tile runs, only up to 4 rows stream their weights)
    w = skinny_cols(n, sms)
    assert w >= 32 and [(t.writes.r0, t.writes.r1) for t in tiles] == [(0, rows)] * len(tiles)
    assert [(t.writes.c0, t.writes.c1) for t in tiles] == [(c, min(c + w, n)) for c in range(0, n, w)]
    assert all(t.reads[1].as_json()[1:] == [0, 256, t.writes.c0, t.writes.c1] for t in tiles)
    assert check(build_plan(m, DeviceSpec(num_sms=sms, wgmma=False))) == []


def test_skinny_matmul_tiles_fill_the_sms():
    assert skinny(16) and not skinny(17)
    assert skinny_cols(16384, 132) == 128  # 128 tiles: one wave
    assert skinny_cols(4096, 132) == 32  # 128 tiles, not 32 of 128 columns
    assert skinny_cols(1000, 132) == 32  # too few columns for the SMs: the narrowest, 32 tiles
    assert skinny_cols(4096, 1) == 128  # one SM: the fewest tiles
    assert skinny_cols(384, 4) == 32  # 12 tiles in 3 full waves, where 3 of 128 or 6 of 64 leave SMs idle
    model = fuse(named("mlp-b8"))
    plan = build_plan(model, DeviceSpec(num_sms=132, wgmma=False))  # (with wgmma, 8 rows take the wgmma tile)
    for op in (op.id for op in model.ops if op.kind == "matmul"):
        tiles = [t for t in plan.tiles if t["op"] == op]
        assert len(tiles) == 128 and all(t["writes"][1:3] == [0, 8] for t in tiles)
        assert len({plan.estimate["sm"][t["id"]] for t in tiles}) == 128, "one tile per SM"


# --- random models ------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.integers(1, 12))
def test_random_models_plan_with_every_invariant(model, sms):
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    assert check(plan, interleavings=5) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.integers(2, 6), st.data())
def test_a_missing_wait_is_found(model, sms, data):
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    waits = [(s, i) for s, stream in enumerate(plan.streams) for i, ins in enumerate(stream)
             if ins["op"] == "wait" and ins["delta"] == 1]
    if not waits:
        return
    s, i = data.draw(st.sampled_from(waits))
    broken = copy.deepcopy(plan)
    del broken.streams[s][i]
    assert any("without waiting" in p for p in check(broken)), "a read-after-write left unordered went unseen"


def _small_plan(sms: int = 3) -> Plan:
    m = Model("small")
    x = m.input("x", (64, 64), "fp32")
    w = m.input("w", (64, 64), "fp32")
    m.output(m.softmax(m.matmul(m.gelu(x), w)))
    return build_plan(m, DeviceSpec(num_sms=sms))


def test_planted_breakage_is_named():
    plan = _small_plan()
    run = next(ins for s in plan.streams for ins in s if ins["op"] == "run")
    twice = copy.deepcopy(plan)
    twice.streams[-1].append(dict(run))
    assert any("runs twice" in p for p in check(twice))
    never = copy.deepcopy(plan)
    for s in never.streams:
        s[:] = [ins for ins in s if ins != run]
    assert any("runs on no SM" in p for p in check(never))
    lost = copy.deepcopy(plan)
    for s in lost.streams:
        for i, ins in enumerate(s):
            if ins["op"] == "signal":
                del s[i]
                break
        else:
            continue
        break
    assert any("is signalled by" in p for p in check(lost))
    swapped = copy.deepcopy(plan)
    stream = max(swapped.streams, key=lambda s: sum(ins["op"] == "run" for ins in s))
    runs = [i for i, ins in enumerate(stream) if ins["op"] == "run"]
    stream[runs[0]], stream[runs[-1]] = stream[runs[-1]], stream[runs[0]]
    assert check(swapped), "a stream run out of order went unseen"


def test_a_cycle_of_waits_is_a_deadlock_naming_the_stuck_sms():
    m = Model("pair")
    x = m.input("x", (1, 8), "fp32")
    m.output(m.neg(x) if hasattr(m, "neg") else m.unary("neg", x))
    plan = build_plan(m, DeviceSpec(num_sms=2))
    plan.tiles.append(dict(plan.tiles[0], id=1, index=1))
    plan.deps.append([])
    plan.counters = [{"id": 0, "kind": "tile", "of": 0, "members": []},
                     {"id": 1, "kind": "tile", "of": 1, "members": []}]
    plan.streams = [[{"op": "wait", "counter": 1, "delta": 1}, {"op": "run", "tile": 0}, {"op": "signal", "counter": 0}],
                    [{"op": "wait", "counter": 0, "delta": 1}, {"op": "run", "tile": 1}, {"op": "signal", "counter": 1}]]
    problems = check(plan)
    assert problems and problems[0].startswith("deadlock with 2 SM(s) stuck") and "SM 0" in problems[0]


def test_a_write_after_read_left_unordered_is_found():
    from ark_runtime.models import copy_out

    plan = build_plan(copy_out(1 << 16), DeviceSpec(num_sms=8))  # tiles on 8 SMs, one copy reads them all
    zeros = [(s, i) for s, stream in enumerate(plan.streams) for i, ins in enumerate(stream)
             if ins["op"] == "wait" and ins["delta"] == 0]
    assert zeros, "the small plan has readers on other SMs"
    for s, i in zeros:
        broken = copy.deepcopy(plan)
        covered = any(ins["op"] == "wait" and ins["counter"] == broken.streams[s][i]["counter"] and ins["delta"] == 1
                      for ins in broken.streams[s])
        del broken.streams[s][i]
        if not covered:
            assert any("previous iteration" in p for p in check(broken))
            return
    pytest.fail("no write-after-read wait stood alone")


# --- hostile input ------------------------------------------------------------------------------------
def test_model_refuses_bad_shapes_types_and_names():
    m = Model("bad")
    a = m.input("a", (4, 8), "bf16")
    with pytest.raises(ModelError, match="inner dimensions differ"):
        m.matmul(a, m.input("b", (4, 8), "bf16"))
    with pytest.raises(ModelError, match="do not broadcast"):
        m.add(a, m.input("c", (3, 8), "bf16"))
    with pytest.raises(ModelError, match="is bf16 but"):
        m.add(a, m.input("d", (4, 8), "fp32"))
    with pytest.raises(ModelError, match="dtype 'fp8'"):
        m.input("e", (4,), "fp8")
    with pytest.raises(ModelError, match="positive ints"):
        m.input("f", (4, 0))
    with pytest.raises(ModelError, match="already taken"):
        m.input("a", (1,))
    with pytest.raises(ModelError, match="identifier"):
        m.input("1x", (1,))
    with pytest.raises(ModelError, match="heads=3"):
        m.attention(a, a, a, heads=3)
    with pytest.raises(ModelError, match="eps"):
        m.rmsnorm(a, m.input("g", (8,), "bf16"), eps=-1)
    with pytest.raises(ModelError, match="not a tensor of model"):
        m.gelu(Model("other").input("z", (4, 8), "bf16"))
    with pytest.raises(ModelError, match="unary op 'tanhh'"):
        m.unary("tanhh", a)
    with pytest.raises(ModelError, match="ids must be int32"):
        m.embedding(m.input("table", (10, 8), "bf16"), a)


def test_plans_refuse_empty_models_bad_devices_and_foreign_json():
    with pytest.raises(PlanError, match="no ops"):
        build_plan(Model("empty"))
    with pytest.raises(ValueError, match="num_sms"):
        DeviceSpec(num_sms=0)
    with pytest.raises(PlanError, match="version"):
        Plan.from_json({"version": 99})
    with pytest.raises(PlanError, match="lacks"):
        Plan.from_json({"version": 2, "model": {}})
    with pytest.raises(ModelError, match="no model named"):
        named("gpt5")
    assert chain(4, 2, 8).ops and len(chain(4, 2, 8).ops) == 4


@pytest.mark.parametrize("shape", [(2**31,), (3, 2**31), (2**16, 2**15, 4), (2**40, 2**40)])
def test_a_tensor_whose_rows_or_columns_reach_2_to_the_31_is_refused(shape):
    """The kernels index a tensor's rows and columns (its 2-D view) with 32-bit ints: past them an index would wrap
    and a tile would write outside its tensor. Refused when the tensor is made, not planned (a plan of (2**40,
    2**40) would not finish)."""
    with pytest.raises(ModelError, match=r"below 2\*\*31: reshape it"):
        Model("big").input("x", shape)
    assert Model("edge").input("x", (2, 2**31 - 1)).cols == 2**31 - 1  # the largest allowed


@pytest.mark.parametrize("make", [
    lambda m: m.gelu(m.input("x", (2**20, 16384), "bf16")),  # rows x column chunks: 2**21 tiles
    lambda m: m.matmul(m.input("a", (2**20, 64), "bf16"), m.input("b", (64, 2**20), "bf16")),  # blocks: 2**25
])
def test_a_plan_past_max_tiles_is_refused_naming_the_op_before_its_tiles_are_made(make):
    m = Model("huge")
    m.output(make(m))
    with pytest.raises(PlanError, match=r"op 0 \(.*past the 1,048,576 a plan may have"):
        build_plan(m, DeviceSpec(num_sms=132))


def test_the_tile_limit_counts_the_tiles_of_every_op_before(monkeypatch):
    import ark_runtime.tiling as tiling

    monkeypatch.setattr(tiling, "MAX_TILES", 100)
    m = Model("two")
    x = m.input("x", (64, 4096))
    m.output(m.unary("exp", m.unary("exp", x)))  # 64 row tiles each: the second op passes the limit tile by tile
    with pytest.raises(PlanError, match=r"op 1 \(unary -> .*101 tiles.*\(64 before it\)"):
        build_plan(m, DeviceSpec(num_sms=64))
    monkeypatch.setattr(tiling, "MAX_TILES", 128)
    assert len(build_plan(m, DeviceSpec(num_sms=64)).tiles) == 128


def test_round_robin_placement_puts_every_edge_of_a_chain_across_sms():
    from ark_runtime.models import dependent_tasks

    plan = build_plan(dependent_tasks(40), DeviceSpec(num_sms=2), placement="round-robin")
    sm = plan.estimate["sm"]
    assert len(plan.tiles) == 40 and all(sm[t] == t % 2 for t in range(40))
    waits = [i for s in plan.streams for i in s if i["op"] == "wait"]
    assert sum(1 for w in waits if w["delta"] == 1) == 39  # one per edge
    assert plan.estimate["placement"] == "round-robin"
    with pytest.raises(PlanError, match="placement 'nearest' is not one of cost, round-robin"):
        build_plan(dependent_tasks(4), DeviceSpec(num_sms=2), placement="nearest")


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 3000), n=st.integers(1, 3000), bm=st.sampled_from([64, 128]),
       bn=st.sampled_from([64, 128, 256]), sms=st.integers(1, 200))
def test_a_matmul_deals_each_block_once_in_bands(m, n, bm, bn, sms):
    """block_order: every block of the output once, whole and inside it; within a band of rows, column by column."""
    order = block_order(m, n, bm, bn, sms)
    want = {(r, min(r + bm, m), c, min(c + bn, n)) for r in range(0, m, bm) for c in range(0, n, bn)}
    assert len(order) == len(want) and set(order) == want
    rows, cols = -(-m // bm), -(-n // bn)
    g = max(1, min(rows, round((sms * bn / bm) ** 0.5)))
    i = 0
    for first in range(0, rows, g):  # a band: its rows, column by column
        height = min(g, rows - first)
        for c in range(cols):
            for r in range(first, first + height):
                assert (order[i][0] // bm, order[i][2] // bn) == (r, c)
                i += 1


def test_a_wave_of_8192_cubed_reads_16_block_rows_not_all_of_b():
    order = block_order(8192, 8192, 128, 256, 132)
    wave = order[:132]
    assert len({r for r, *_ in wave}) == 16 and len({c for *_, c, _ in wave}) == 9


def test_causal_attention_tiles_come_longest_first():
    """The schedule deals tiles out in order: block-s512's causal attention lists its tiles by keys read, most first,
    across every head (the query block ending last reads the most keys)."""
    model = fuse(named("block-s512"))
    op = next(o for o in model.ops if o.kind == "attention")
    tiles = [t for t in tile_model(model, 132) if t.op == op.id]
    keys = [t.reads[1].r1 - t.reads[1].r0 for t in tiles]
    assert keys == sorted(keys, reverse=True) and keys[0] > keys[-1]
    assert len({t.writes.c0 for t in tiles[:16]}) == 16  # the longest blocks of all 16 heads come first


@pytest.mark.parametrize("value,off", [(None, False), ("1", False), ("on", False), ("", False), ("0", True),
                                       ("off", True), (" No ", True), ("FALSE", True)])
def test_an_environment_switch_is_off_only_when_it_says_so(value, off, monkeypatch):
    if value is None:
        monkeypatch.delenv("ARK_TEST_SWITCH", raising=False)
    else:
        monkeypatch.setenv("ARK_TEST_SWITCH", value)
    assert switched_off("ARK_TEST_SWITCH") is off
