"""The sample op on a GPU against its float64 reference (ops/sample.py's sample_rows), in every dtype, at widths read
in 16-byte pieces and element by element, up to Llama-3's vocabulary: every draw equal to the reference's but where
the reference's draw lies within float rounding of a boundary between cumulative sums (boundary_margin), and those
few counted; greedy settings (top_k=1, temperature 0) equal to argmax exactly; a row of NaN or -inf gives its argmax;
a step state counted each iteration draws afresh, reproducibly."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from ark_runtime.ops.sample import boundary_margin, sample_rows
from tests.gpu.test_loop_runtime import _rounded

pytestmark = pytest.mark.gpu

SHAPES = ((64, 1000), (6, 128256), (40, 33), (16, 3), (12, 4097))  # 33, 3 and 4097 go element by element
CONFIGS = (dict(temperature=1.0), dict(temperature=0.7, top_k=50, top_p=0.9), dict(temperature=1.5, top_p=0.8),
           dict(top_k=1000), dict(temperature=0.5, top_k=7), dict(temperature=2.0, top_k=3, top_p=0.5),
           dict(top_p=1e-6))
NEAR = 1e-5  # a draw the GPU makes otherwise must lie this near a boundary (relative to the kept mass)


def _logits(shape, rng) -> np.ndarray:
    rows, cols = shape
    x = rng.standard_normal(shape) * rng.choice([0.5, 2.0, 4.0], (rows, 1))
    ties = rng.random(rows) < 0.25  # few distinct values: ties at every threshold
    x[ties] = rng.integers(-3, 4, (int(ties.sum()), cols))
    x[rng.random(shape) < 0.02] = -np.inf
    if rows > 8:
        x[1] = -np.inf  # the argmax: column 0
        x[2, cols // 2] = np.nan  # the argmax: the NaN
        x[3, -1] = np.inf
    return x


def _run(model: Model, inputs: dict, iterations: int = 1) -> dict:
    from ark_runtime.runtime import Runtime

    with Runtime(model) as rt:
        for k, v in inputs.items():
            rt.set(k, v)
        rt.run(iterations)
        rt.wait(timeout=120)
        return {tid: rt.get(model.tensors[tid].name).astype(np.int64) for tid in model.outputs}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_draws_are_the_references_but_near_boundaries(gpu, dtype):
    rng = np.random.default_rng(0)
    m = Model(f"sample-{dtype}")
    inputs, calls = {}, []
    for i, shape in enumerate(SHAPES):
        x = m.input(f"x{i}", shape, dtype)
        steps = m.input(f"steps{i}", (shape[0],), "int32")
        one = m.input(f"step{i}", (1,), "int32")
        inputs[x.name] = _logits(shape, rng)
        inputs[steps.name] = rng.integers(0, 1 << 20, shape[0])
        inputs[one.name] = np.array([rng.integers(0, 1 << 20)])
        for j, cfg in enumerate(CONFIGS):
            if cfg.get("top_k", 0) > shape[1]:  # top_k above the row's width is refused: keep them all instead
                cfg = {**cfg, "top_k": shape[1]}
            step = steps if j % 2 == 0 else one
            seed = int(rng.integers(0, 1 << 63)) * 2 + 1
            y = m.sample(x, step, seed=seed, **cfg)
            m.output(y)
            calls.append((y.id, x.name, step.name, seed, cfg))
    got = _run(m, inputs)
    held = _rounded(m, inputs)
    draws = near = 0
    for tid, xname, sname, seed, cfg in calls:
        steps = held[sname].astype(np.int64)
        want = sample_rows(held[xname], steps, seed, **cfg)
        margin = boundary_margin(held[xname], steps, seed, **cfg)
        g = got[tid][:, 0]
        differ = np.flatnonzero(g != want)
        assert (margin[differ] < NEAR).all(), (
            f"{xname} {cfg}: rows {differ.tolist()} drew {g[differ].tolist()}, the reference "
            f"{want[differ].tolist()}, margins {margin[differ].tolist()}")
        draws += g.size
        near += differ.size
    print(f"{dtype}: {near} of {draws} draws differ from the reference, each within {NEAR:g} of a boundary")
    assert near <= max(2, draws // 200)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_greedy_settings_are_the_argmax_exactly(gpu, dtype):
    rng = np.random.default_rng(1)
    m = Model(f"greedy-{dtype}")
    inputs, outs = {}, []
    for i, shape in enumerate(((7, 128256), (33, 1001), (5, 8))):
        x, step = m.input(f"x{i}", shape, dtype), m.input(f"s{i}", (1,), "int32")
        inputs[x.name], inputs[step.name] = _logits(shape, rng), np.array([5])
        for cfg in (dict(top_k=1, temperature=0.8, top_p=0.5), dict(temperature=0.0), dict(top_p=1e-9)):
            y = m.sample(x, step, seed=3, **cfg)
            m.output(y)
            outs.append((y.id, x.name))
    got = _run(m, inputs)
    held = _rounded(m, inputs)
    for tid, xname in outs:
        np.testing.assert_array_equal(got[tid][:, 0], np.argmax(held[xname], axis=-1), err_msg=xname)


def test_a_counted_step_draws_afresh_each_iteration_and_the_same_on_a_second_run(gpu):
    rng = np.random.default_rng(2)
    m = Model("steps")
    x = m.input("x", (4, 32000), "bf16")
    pos = m.state("pos", (4,), "int32")
    y = m.sample(x, pos, seed=11, temperature=1.0)
    m.output(y)
    m.count(pos)
    flat = np.zeros((4, 32000))  # uniform: every column as likely
    flat[:, ::7] = rng.standard_normal((4, 32000 // 7 + 1)) * 0.01
    firsts = []
    for iterations in (1, 3, 3):
        got = _run(m, {"x": flat, "pos": np.array([0, 10, 20, 30])}, iterations)[y.id][:, 0]
        held, steps = _rounded(m, {"x": flat})["x"], np.array([0, 10, 20, 30]) + iterations - 1
        differ = got != sample_rows(held, steps, 11)
        assert (boundary_margin(held, steps, 11)[differ] < NEAR).all(), (got, sample_rows(held, steps, 11))
        firsts.append(got.tolist())
    assert firsts[1] == firsts[2] and firsts[0] != firsts[1]
