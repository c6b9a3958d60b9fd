"""The one lowering pipeline: what it refuses (graphs edited by hand, bad options), what it keeps (the plan and
source of a model as written, every op's variant in the plan), and its cache by content."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from ark_runtime import lower_cache, models
from ark_runtime.graph import Op
from ark_runtime.lower import LowerError, LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.scheduler import DeviceSpec
from tests.unit.model_strategies import models as random_models

SMALL = DeviceSpec(num_sms=8)


def _chain() -> Model:
    m = Model("chain")
    x = m.input("x", (4, 16))
    m.output(m.unary("neg", m.unary("exp", x)))
    return m


def test_a_model_with_no_outputs_is_refused_naming_what_to_do():
    m = Model("none")
    m.unary("neg", m.input("x", (2, 8)))
    with pytest.raises(LowerError, match=r"no outputs: mark what it returns with m.output"):
        lower(m, SMALL)


def test_an_input_cannot_be_an_output():
    m = Model("io")
    x = m.input("x", (2, 8))
    with pytest.raises(ModelError, match="x is an input"):
        m.output(x)


def test_an_input_named_like_an_automatic_name_leaves_every_name_unique():
    m = Model("names")
    x = m.input("neg0", (2, 8))
    y = m.unary("neg", x)
    assert y.name != "neg0" and len({t.name for t in m.tensors}) == len(m.tensors)
    m.output(y)
    assert lower(m, SMALL).plan.tiles


def test_two_tensors_of_one_name_forged_into_the_graph_are_refused():
    m = _chain()
    t = m.tensors[1]
    m.tensors[1] = dataclasses.replace(t, name="x")
    with pytest.raises(LowerError, match="both named 'x'"):
        lower(m, SMALL)


def test_a_forged_self_dependency_is_a_cycle():
    m = _chain()
    op = m.ops[1]
    m.ops[1] = Op(op.id, op.kind, op.fn, (op.output,), op.output, op.attrs)
    with pytest.raises(LowerError, match="cycle: op 1 .* reads its own output"):
        lower(m, SMALL)


def test_a_forged_forward_read_is_a_cycle_not_a_key_error():
    m = _chain()
    op = m.ops[0]
    m.ops[0] = Op(op.id, op.kind, op.fn, (m.ops[1].output,), op.output, op.attrs)
    with pytest.raises(LowerError, match="cycle: op 0 .* which op 1 writes after it"):
        lower(m, SMALL)


@pytest.mark.parametrize("forge, message", [
    (lambda m: m.ops.append(Op(5, "unary", "neg", (0,), 1)), "has id 5"),
    (lambda m: m.ops.__setitem__(0, Op(0, "warp", "warp", (0,), 1)), "kind 'warp' is not one of"),
    (lambda m: m.ops.__setitem__(0, Op(0, "unary", "exp", (9,), 1)), "reads tensor 9, which does not exist"),
    (lambda m: m.outputs.append(0), "output x .* is an input"),
    (lambda m: m.outputs.append(99), "output 99 is not a tensor"),
])
def test_hand_edited_graphs_are_refused_with_what_is_wrong(forge, message):
    m = _chain()
    forge(m)
    with pytest.raises(LowerError, match=message):
        lower(m, SMALL)


def test_bad_options_are_refused():
    for bad in ({"fuse_chains": 1}, {"split_k": "yes"}, {"placement": "nearest"},
                {"copy_paths": (("x", "teleport"),)}):
        with pytest.raises(LowerError):
            LowerOptions(**bad)
    with pytest.raises(LowerError, match="LowerOptions"):
        lower(_chain(), SMALL, {"fuse_chains": False})
    with pytest.raises(LowerError, match="takes a Model"):
        lower("chain", SMALL)


def test_copy_paths_naming_no_copy_are_refused():
    with pytest.raises(LowerError, match="names nothing8, which no copy op"):
        lower(models.copy_out(8192), SMALL, LowerOptions(copy_paths=(("nothing8", "sm"),)))


def test_every_op_has_its_variant_in_the_plan_json():
    lw = lower(models.named("block-s128"), DeviceSpec(num_sms=132))
    data = lw.plan.as_json()
    assert len(data["variants"]) == len(lw.model.ops)
    matmuls = [v for v, op in zip(data["variants"], lw.model.ops) if op.kind == "matmul"]
    assert matmuls and all(v["template"] in ("matmul_sm90", "matmul_wmma", "gemv", "gemv_mma") and v["block"]
                           for v in matmuls)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_models())
def test_random_models_lower_the_same_from_the_cache(tmp_path_factory, model):
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(lower_cache.ENV, str(folder))
        first = lower(model, SMALL)
        again = lower(model, SMALL)
    assert list(folder.glob("*.pkl"))
    assert again.plan.as_json() == first.plan.as_json() and again.source == first.source


def test_a_cached_plan_unpickles_its_tiles_and_streams_only_when_read(tmp_path, monkeypatch):
    """A Runtime started from the cache reads the plan's sizes only: the tiles, deps, counters, streams and estimate
    stay one blob until something reads one of them, then all of them come back as they were."""
    import pickle

    monkeypatch.setenv(lower_cache.ENV, str(tmp_path))
    m = models.named("block-s128")
    first = lower(m, DeviceSpec(num_sms=132))
    again = lower(m, DeviceSpec(num_sms=132))
    assert "_blob" in again.plan.__dict__ and "tiles" not in again.plan.__dict__
    assert again.plan.num_tiles == len(first.plan.tiles) and again.plan.num_sms == 132
    twice = pickle.loads(pickle.dumps(again.plan))  # an unread plan pickles as it came
    assert "_blob" in twice.__dict__ and "_blob" in again.plan.__dict__
    assert again.plan.streams == first.plan.streams  # one read brings every field back
    assert "_blob" not in again.plan.__dict__ and "_sizes" not in again.plan.__dict__
    assert again.plan.as_json() == first.plan.as_json() == twice.as_json()
    assert again.plan.num_tiles == len(again.plan.tiles) and again.plan == first.plan
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        again.plan.nothing  # noqa: B018


def test_a_switch_or_another_device_misses_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(lower_cache.ENV, str(tmp_path))
    m = models.named("mlp-b64")
    split = lower(m, DeviceSpec(num_sms=132))
    monkeypatch.setenv("ARK_SPLIT_K", "0")
    whole = lower(m, DeviceSpec(num_sms=132))
    assert len(split.model.ops) != len(whole.model.ops)
    assert len(lower(m, DeviceSpec(num_sms=64)).plan.streams) == 64
    assert len(list(tmp_path.glob("*.pkl"))) == 3


def test_a_corrupt_cache_file_is_lowered_again(tmp_path, monkeypatch):
    monkeypatch.setenv(lower_cache.ENV, str(tmp_path))
    m = _chain()
    first = lower(m, SMALL)
    for f in tmp_path.glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    assert lower(m, SMALL).source == first.source


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(lower_cache.ENV, str(blocker / "below"))
    assert lower(_chain(), SMALL).plan.tiles


def test_the_program_arrays_come_with_the_plan():
    from ark_runtime.kernel.program import build_program

    lw = lower(models.named("block-s128"), DeviceSpec(num_sms=132))
    again = build_program(lw.plan, lw.source.op_cases)
    assert (lw.program.ins == again.ins).all() and (lw.program.stream_start == again.stream_start).all()
    assert (lw.program.members == again.members).all() and lw.program.num_counters == again.num_counters


def test_a_tuners_knobs_set_the_variant_and_bad_ones_are_refused():
    from ark_runtime.ops import spec

    m = models.matmul(2048)
    device = DeviceSpec(num_sms=132)
    plain = lower(m, device, LowerOptions(split_k=False))
    op = plain.model.ops[0]
    knobs = spec("matmul").knobs(plain.model, op, device)
    assert set(knobs) == {"block", "loader"} and (128, 256) in knobs["block"]
    name = plain.model.tensors[op.output].name
    for block in knobs["block"]:
        for loader in knobs["loader"]:
            lw = lower(m, device, LowerOptions(split_k=False, knobs=((name, (("block", block), ("loader", loader))),)))
            v = lw.plan.variants[0]
            assert tuple(v["block"]) == block and v["loader"] == loader
            assert len(lw.plan.tiles) == -(-2048 // block[0]) * -(-2048 // block[1])
    with pytest.raises(LowerError, match=r"knob block=\(96, 96\) is not one of its choices"):
        lower(m, device, LowerOptions(split_k=False, knobs=((name, (("block", (96, 96)),)),)))
    with pytest.raises(LowerError, match="knob stages=3 is not one of its choices"):
        lower(m, device, LowerOptions(split_k=False, knobs=((name, (("stages", 3),)),)))
    with pytest.raises(LowerError, match="knobs name nothing, which no op"):
        lower(m, device, LowerOptions(knobs=(("nothing", (("block", (64, 64)),)),)))


def test_specs_without_knobs_refuse_them():
    from ark_runtime.model import ModelError
    from ark_runtime.ops import spec

    m = Model("u")
    x = m.unary("neg", m.input("x", (4, 8)))
    with pytest.raises(ModelError, match="unary .* has no knobs to set, not block"):
        spec("unary").tuned(m, m.ops[0], SMALL, {"block": (1, 1)})
    assert spec("unary").knobs(m, m.ops[0], SMALL) == {} and x


@pytest.mark.parametrize(("rows", "dtype", "want"), [(8, "bf16", {"tile", "width"}), (64, "fp32", {"block"})])
def test_skinny_and_wmma_matmuls_offer_their_knobs(rows, dtype, want):
    from ark_runtime.ops import spec

    m = models.mlp(rows, hidden=256, inner=512, dtype=dtype)
    device = DeviceSpec(num_sms=132, wgmma=dtype != "fp32")
    runs = lower(m, device, LowerOptions(split_k=False)).model
    knobs = spec("matmul").knobs(runs, runs.ops[0], device)
    assert set(knobs) == want
    name = runs.tensors[runs.ops[0].output].name
    choice = {k: v[-1] for k, v in knobs.items()}
    lw = lower(m, device, LowerOptions(split_k=False, knobs=((name, tuple(choice.items())),)))
    v = lw.plan.variants[0]
    if "tile" in choice:
        assert v["template"] == choice["tile"] and v["block"][1] == choice["width"]
    else:
        assert tuple(v["block"]) == choice["block"]


def _every_knob_setting(m: Model, device: DeviceSpec):
    from itertools import product

    from ark_runtime.ops import spec

    runs = lower(m, device, LowerOptions(split_k=False)).model
    op = runs.ops[0]
    knobs = spec("matmul").knobs(runs, op, device)
    name = runs.tensors[op.output].name
    for values in product(*knobs.values()):
        yield name, tuple(zip(knobs, values))


@pytest.mark.parametrize(("model", "wgmma"), [
    (lambda: models.matmul(1024), True),  # the wgmma tile's blocks and loaders
    (lambda: models.mlp(64, hidden=256, inner=512, dtype="fp32"), False),  # matmul.cuh's blocks
    (lambda: models.mlp(8, hidden=256, inner=512), True),  # the skinny tiles and widths
], ids=["wgmma", "wmma", "skinny"])
def test_every_knob_setting_compiles(model, wgmma):
    from driver.gpu import compile
    from ark_runtime.kernel.codegen import INCLUDE_DIR

    device = DeviceSpec(num_sms=132, wgmma=wgmma)
    m = model()
    for name, knobs in _every_knob_setting(m, device):
        lw = lower(m, device, LowerOptions(split_k=False, knobs=((name, knobs),)))
        assert compile.cubin(lw.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF", knobs
