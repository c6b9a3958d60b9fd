"""States: tensors the kernel keeps and updates in place across iterations (a KV cache appended at a position the
GPU holds and moves). The model API and its refusals, the dependencies an in-place write adds (after what earlier
ops read or wrote there; before the next iteration's readers), the plan run tile by tile for several iterations in
random orders against the float64 reference over as many iterations, and the kernel compiled."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ark_runtime.graph import Op
from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerError, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.plan_check import check
from ark_runtime.reference import BadIndex, evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec


def decode_like(capacity: int = 8, d: int = 16, dtype: str = "fp32", read_first: bool = False) -> Model:
    """Each iteration: a new row from x and the step, appended to the cache at the position; the cache summed; the
    position counted on. With `read_first` the sum reads the cache before the append (the last iteration's)."""
    m = Model("decode-like")
    x = m.input("x", (1, d), dtype)
    cache = m.state("cache", (capacity, d), dtype)
    pos = m.state("pos", (1,), "int32")
    early = m.reduce("sum", m.unary("neg", cache)) if read_first else None
    new = m.unary("exp", m.mul(x, x))
    written = m.write(cache, new, pos)
    total = m.reduce("sum", written)
    m.count(pos)
    m.output(total, *(() if early is None else (early,)))
    return m


def _inputs(m: Model, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {t.name: (np.zeros(t.shape, np.int32) if t.dtype == "int32" else rng.standard_normal(t.shape) * 0.3)
            for t in m.tensors if t.producer is None}


def test_the_reference_appends_a_row_an_iteration():
    m = decode_like()
    inputs = _inputs(m)
    for n in (1, 3, 8):
        values = evaluate(m, inputs, iterations=n)
        cache = values[m.tensors[[t.name for t in m.tensors].index("cache")].id]
        row = np.exp(inputs["x"] ** 2)[0]
        assert np.allclose(cache[:n], row) and np.allclose(cache[n:], inputs["cache"][n:])
        assert values[m.tensors[[t.name for t in m.tensors].index("pos")].id][0] == n
    with pytest.raises(BadIndex, match="row 8 puts 1 rows outside the state's 8"):
        evaluate(m, inputs, iterations=9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 12), st.integers(0, 5), st.booleans(), st.integers(1, 4))
def test_the_plan_run_tile_by_tile_over_iterations_is_the_reference(sms, seed, read_first, iterations):
    m = decode_like(read_first=read_first)
    lw = lower(m, DeviceSpec(num_sms=sms))
    assert check(lw.plan) == []
    inputs = _inputs(m, seed)
    want = evaluate(m, inputs, iterations=iterations)
    got = run_plan(lw.plan, lw.model, inputs, seed=seed, iterations=iterations)
    for src, dst in zip(m.outputs, lw.model.outputs):
        assert np.allclose(got[dst], want[src], rtol=1e-12, atol=1e-12), m.tensors[src].name
    cache_in = next(t.id for t in lw.model.tensors if t.name == "cache")
    assert np.allclose(got[cache_in], want[next(t.id for t in m.tensors if t.name == "cache")])


def test_a_write_after_a_read_of_the_same_rows_follows_it_and_the_next_read_follows_the_write():
    m = decode_like(read_first=True)
    lw = lower(m, DeviceSpec(num_sms=4))
    tiles, deps = lw.plan.tiles, lw.plan.deps
    kinds = [lw.model.ops[t["op"]].kind for t in tiles]
    write = kinds.index("write")
    reader = next(i for i, t in enumerate(tiles) if lw.model.ops[t["op"]].kind == "fused" or
                  (lw.model.ops[t["op"]].kind == "unary" and lw.model.ops[t["op"]].inputs[0] == 1))
    assert reader in deps[write], "the write waits for the earlier read of the cache in the iteration"


def test_static_rows_write_their_rows_only():
    m = Model("static")
    cache = m.state("cache", (6, 4))
    m.output(m.reduce("sum", m.write(cache, m.unary("neg", m.input("v", (2, 4))), row=3)))
    lw = lower(m, DeviceSpec(num_sms=2))
    write = next(t for t in lw.plan.tiles if lw.model.ops[t["op"]].kind == "write")
    assert write["writes"][1:3] == [3, 5]
    inputs = {"v": np.ones((2, 4)), "cache": np.zeros((6, 4))}
    assert np.allclose(run_plan(lw.plan, lw.model, inputs, iterations=1)[lw.model.outputs[0]],
                       evaluate(m, inputs)[m.outputs[0]])


@pytest.mark.parametrize(("make", "message"), [
    (lambda m: m.write(m.input("plain", (4, 4)), m.input("v", (1, 4))), "plain is not a state"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (1, 3))), "does not fit rows of s"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (5, 4))), "does not fit rows of s"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (1, 4), "fp16")), "does not fit rows of s"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), row=3), r"row=3 must be an int in 0..2"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), row=-1), r"row=-1"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), m.input("r", (1,))), "must be an int32"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), m.input("r", (3,), "int32")),
     "of one element, or of one per value row"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), m.input("r", (2,), "int32")), "takes stride"),
    (lambda m: m.op("write", m.state("s", (4, 4)), m.input("v", (2, 4)), m.input("r", (2,), "int32"), stride=3),
     "value rows x stride within the state's 4"),
    (lambda m: m.count(m.state("s", (1,))), "must be an int32 state"),
    (lambda m: m.write(m.state("s", (4, 4)), m.input("v", (2, 4)), row=1, stride=2), "goes with a row tensor"),
    (lambda m: m.count(m.input("p", (1,), "int32")), "p is not a state"),
    (lambda m: m.count(m.state("p", (1,), "int32"), by=2.5), "by=2.5"),
])
def test_hostile_state_ops_are_refused_saying_what_fits(make, message):
    with pytest.raises(ModelError, match=message):
        make(Model("bad"))


def test_a_forged_alias_is_refused():
    m = decode_like()
    import dataclasses

    i = next(t.id for t in m.tensors if t.alias is not None)
    m.tensors[i] = dataclasses.replace(m.tensors[i], alias=0)  # x, not a state
    with pytest.raises(LowerError, match="writes in place into tensor 0, which is not a state"):
        lower(m, DeviceSpec(num_sms=2))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles(dtype, arch):
    from driver.gpu import compile

    lw = lower(decode_like(dtype=dtype, read_first=True), DeviceSpec(num_sms=132))
    assert "ark::write_rows<" in lw.source.text and "+= 1;" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_fusion_and_split_k_keep_the_states():
    m = decode_like(read_first=True)
    runs = lower(m, DeviceSpec(num_sms=132)).model
    names = {t.name for t in runs.tensors}
    assert [runs.tensors[s].name for s in runs.states] == ["cache", "pos"] and "cache" in names
    assert all(runs.tensors[t.alias].name in ("cache", "pos") for t in runs.tensors if t.alias is not None)
    assert any(o.kind == "write" for o in runs.ops) and isinstance(runs.ops[0], Op)


def decode_step(capacity: int = 16, heads: int = 4, kv_heads: int = 2, d: int = 8, dtype: str = "fp32") -> Model:
    """One token a step: its q, k, v from x; k and v appended to their caches at the position; the position counted;
    attention of the token over the cache's keys so far (the length the count gives)."""
    m = Model("decode-step")
    x = m.input("x", (1, heads * d), dtype)
    wq, wk, wv = (m.input(n, (heads * d, dd), dtype) for n, dd in (("wq", heads * d), ("wk", kv_heads * d),
                                                                   ("wv", kv_heads * d)))
    ck, cv = m.state("cache_k", (capacity, kv_heads * d), dtype), m.state("cache_v", (capacity, kv_heads * d), dtype)
    pos = m.state("pos", (1,), "int32")
    q, k, v = m.matmul(x, wq), m.matmul(x, wk), m.matmul(x, wv)
    ck2, cv2 = m.write(ck, k, pos), m.write(cv, v, pos)
    length = m.count(pos)
    m.output(m.op("attention", q, ck2, cv2, length, heads=heads, kv_heads=kv_heads, causal=True))
    return m


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 10), st.integers(1, 6), st.integers(0, 3))
def test_a_decode_step_over_a_growing_cache_is_the_reference_at_every_length(sms, steps, seed):
    m = decode_step()
    lw = lower(m, DeviceSpec(num_sms=sms))
    inputs = _inputs(m, seed)
    want = evaluate(m, inputs, iterations=steps)
    got = run_plan(lw.plan, lw.model, inputs, seed=seed, iterations=steps)
    assert np.allclose(got[lw.model.outputs[0]], want[m.outputs[0]], rtol=1e-12, atol=1e-12)


def test_the_decode_steps_attention_is_over_the_keys_written_so_far():
    from ark_runtime.ops.attention import reference_attention

    m = decode_step()
    inputs = _inputs(m, 1)
    values = evaluate(m, inputs, iterations=3)
    ck = next(t.id for t in m.tensors if t.name == "cache_k")
    cv = next(t.id for t in m.tensors if t.name == "cache_v")
    q = inputs["x"] @ inputs["wq"]
    want = reference_attention(q, values[ck][:3], values[cv][:3], heads=4, causal=True, kv_heads=2)
    assert np.allclose(values[m.outputs[0]], want)


def test_a_length_outside_its_queries_and_keys_is_refused_in_the_reference():
    m = decode_step(capacity=2)
    with pytest.raises(BadIndex, match="row 2 puts 1 rows outside the state's 2"):
        evaluate(m, _inputs(m), iterations=3)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_decode_step_compiles(dtype):
    from driver.gpu import compile

    lw = lower(decode_step(dtype=dtype, d=64), DeviceSpec(num_sms=132))
    assert "const int keys = " in lw.source.text
    assert compile.cubin(lw.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_bad_index_faults_of_a_write_and_of_attention_say_what_was_outside():
    from ark_runtime.kernel.codes import Fault
    from ark_runtime.runtime.faults import FaultRecord, fault_message

    lw = lower(decode_step(), DeviceSpec(num_sms=4))
    tile_of = {lw.model.ops[t["op"]].kind: t["id"] for t in lw.plan.tiles}

    def message(kind: str, detail: int) -> str:
        record = FaultRecord(code=Fault.BAD_INDEX, sm=0, tile=tile_of[kind], counter=-1, expected=0, observed=0,
                             detail=detail)
        return fault_message(record, lw.model, lw.plan)

    assert "the write's row 16 puts its rows outside the state" in message("write", 17)
    assert "the write's row is below 0" in message("write", 1)
    assert "its length, 17, is not between its queries and its keys" in message("attention", 18)

    lw = lower(batched_decode_step(capacity=6), DeviceSpec(num_sms=4))  # one row per sequence, in blocks of 6
    tile_of = {lw.model.ops[t["op"]].kind: t["id"] for t in lw.plan.tiles}
    assert "a sequence's row 6 is outside its block of 6 rows (its cache is full)" in message("write", 7)
    assert "a sequence's row is below 0" in message("write", 1)


def counting_ring(n: int = 8) -> Model:
    """Each iteration: a step counted on the GPU, written into the next row of a ring in pinned host memory, whose
    host-placed count then moves: what Runtime.stream reads as it fills."""
    m = Model("ring")
    step = m.count(m.state("step", (1,), "int32"))
    ring, hpos = m.state("ring", (n, 1), "int32", "host"), m.state("hpos", (1,), "int32", "host")
    written = m.write(ring, step, hpos)
    m.output(m.count(hpos), written)
    return m


def test_a_ring_on_the_host_fills_a_row_an_iteration_in_the_reference():
    m = counting_ring()
    values = evaluate(m, {"step": np.zeros(1, np.int32), "ring": np.zeros((8, 1), np.int32),
                          "hpos": np.zeros(1, np.int32)}, iterations=5)
    ring = next(t.id for t in m.tensors if t.name == "ring")
    assert values[ring][:, 0].tolist() == [1, 2, 3, 4, 5, 0, 0, 0]
    lw = lower(m, DeviceSpec(num_sms=3))
    assert "__threadfence_system();" in lw.source.text  # the row is in host memory before the count that says so
    write = next(t for t in lw.plan.tiles if lw.model.ops[t["op"]].kind == "write")
    count = [t for t in lw.plan.tiles if lw.model.ops[t["op"]].kind == "count"][-1]
    assert write["id"] in lw.plan.deps[count["id"]]  # the host's count moves after the row is written


def batched_decode_step(batch: int = 3, capacity: int = 6, heads: int = 4, kv_heads: int = 2, d: int = 8,
                        dtype: str = "fp32") -> Model:
    """A token a step for each of `batch` sequences, each at its own position (states the host may set apart): k
    and v appended to each sequence's block of the caches, every position counted, each sequence's query over its
    own keys so far."""
    m = Model("batched-decode")
    x = m.input("x", (batch, 1, heads * d), dtype)
    wq, wk, wv = (m.input(n, (heads * d, dd), dtype) for n, dd in (("wq", heads * d), ("wk", kv_heads * d),
                                                                   ("wv", kv_heads * d)))
    ck = m.state("cache_k", (batch, capacity, kv_heads * d), dtype)
    cv = m.state("cache_v", (batch, capacity, kv_heads * d), dtype)
    pos = m.state("pos", (batch,), "int32")
    q, k, v = m.matmul(x, wq), m.matmul(x, wk), m.matmul(x, wv)
    ck2, cv2 = m.write(ck, k, pos, stride=capacity), m.write(cv, v, pos, stride=capacity)
    length = m.count(pos)
    m.output(m.op("attention", q, ck2, cv2, length, heads=heads, kv_heads=kv_heads, causal=True))
    return m


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 9), st.integers(1, 3), st.lists(st.integers(0, 2), min_size=3, max_size=3), st.integers(0, 3))
def test_a_batch_of_sequences_at_their_own_positions_is_each_sequence_alone(sms, steps, starts, seed):
    """The batched step after `steps` iterations is, sequence by sequence, the one-sequence step run from that
    sequence's own start; and the plan tile by tile in a random order is the reference."""
    m = batched_decode_step()
    inputs = {**_inputs(m, seed), "pos": np.array(starts, np.int32)}
    rng = np.random.default_rng(seed + 10)
    inputs["cache_k"] = rng.standard_normal((3, 6, 16)) * 0.3
    inputs["cache_v"] = rng.standard_normal((3, 6, 16)) * 0.3
    want = evaluate(m, inputs, iterations=steps)
    lw = lower(m, DeviceSpec(num_sms=sms))
    got = run_plan(lw.plan, lw.model, inputs, seed=seed, iterations=steps)
    assert np.allclose(got[lw.model.outputs[0]], want[m.outputs[0]], rtol=1e-12, atol=1e-12)
    one = batched_decode_step(batch=1)
    for b, start in enumerate(starts):
        alone = {**inputs, "x": inputs["x"][b:b + 1], "pos": np.array([start], np.int32),
                 "cache_k": inputs["cache_k"][b:b + 1], "cache_v": inputs["cache_v"][b:b + 1]}
        assert np.allclose(evaluate(one, alone, iterations=steps)[one.outputs[0]][0], want[m.outputs[0]][b])


def test_a_sequence_past_its_block_is_refused_in_the_reference():
    m = batched_decode_step(capacity=3)
    inputs = {**_inputs(m), "pos": np.array([0, 2, 1], np.int32)}
    evaluate(m, inputs, iterations=1)
    with pytest.raises(BadIndex, match="row 3 of value row 1 is outside its block of 3 rows"):
        evaluate(m, inputs, iterations=2)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_batched_decode_step_compiles(dtype):
    from driver.gpu import compile

    lw = lower(batched_decode_step(d=64, dtype=dtype), DeviceSpec(num_sms=132))
    text = lw.source.text
    assert "ark::write_each_row<" in text and " + r0 / 1);" in text and "i < 3; i += blockDim.x" in text
    assert compile.cubin(text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_each_sequence_writes_its_own_row_of_its_own_block():
    m = Model("each")
    cache = m.state("cache", (2, 5, 4))
    rows = m.state("rows", (2,), "int32")
    v = m.input("v", (2, 4))
    m.output(m.reduce("sum", m.op("write", cache, m.unary("neg", v), rows, stride=5)))
    inputs = {"cache": np.zeros((2, 5, 4)), "rows": np.array([3, 1], np.int32), "v": np.arange(8.0).reshape(2, 4)}
    values = evaluate(m, inputs)
    got = values[next(t.id for t in m.tensors if t.name == "cache")]
    assert np.allclose(got[0, 3], -inputs["v"][0]) and np.allclose(got[1, 1], -inputs["v"][1])
    assert np.count_nonzero(got) == 7  # -0.0 is zero: the rest untouched
    lw = lower(m, DeviceSpec(num_sms=4))
    assert np.allclose(run_plan(lw.plan, lw.model, inputs, iterations=1)[lw.model.outputs[0]],
                       values[m.outputs[0]])
    with pytest.raises(BadIndex, match="row 5 of value row 1 is outside its block of 5 rows"):
        evaluate(m, {**inputs, "rows": np.array([0, 5], np.int32)})
