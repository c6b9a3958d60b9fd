"""The loop kernel on a GPU: every op against the float64 reference at shapes that are not tile multiples, in
each dtype; random models; many iterations of one launch; copies from inside the kernel on each path; faults and
timeouts that become exceptions with the GPU usable afterwards; memory bound without copies. Skips without a GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from ark_runtime.model import Model
from ark_runtime.reference import evaluate
from tests.unit.model_strategies import models

pytestmark = pytest.mark.gpu
TOL = {"fp32": 2e-4, "fp16": 2e-2, "bf16": 6e-2}  # relative to the output's scale


def _inputs(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal values; a matmul's weights scaled by 1/sqrt(fan-in) as a model's are (unscaled, a
    transformer block's attention scores reach hundreds and bf16 rounding flips which key wins)."""
    rng = np.random.default_rng(seed)
    weights = {o.inputs[1] for o in model.ops if o.kind == "matmul"}
    out = {}
    for t in model.tensors:
        if t.producer is not None:
            continue
        if t.dtype == "int32":
            vocab = next((o.attr("vocab") for o in model.ops if o.kind == "embedding" and t.id in o.inputs), 16)
            out[t.name] = rng.integers(0, vocab, t.shape, dtype=np.int32)
        else:
            out[t.name] = rng.uniform(0.5, 1.5, t.shape) if t.name.startswith("pos") else rng.standard_normal(t.shape)
            if t.id in weights:
                out[t.name] /= math.sqrt(t.rows)
    return out


def _rounded(model: Model, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs as the GPU holds them (rounded to each tensor's dtype), in float64 for the reference."""
    from ark_runtime.host_values import from_bits, to_bits

    by_name = {t.name: t for t in model.tensors}
    return {k: from_bits(by_name[k], to_bits(by_name[k], v)).astype(np.float64) for k, v in values.items()}


def _run_and_compare(model: Model, rt, inputs: dict[str, np.ndarray], iterations: int = 1) -> None:
    """Binds `inputs` on the running `rt`, runs `iterations` and checks every output against float64."""
    want = evaluate(model, _rounded(model, inputs))
    for k, v in inputs.items():
        rt.set(k, v)
    rt.run(iterations)
    rt.wait()
    for tid in model.outputs:
        t = model.tensors[tid]
        got = rt.get(t.name).astype(np.float64)
        ref = want[tid]
        scale = max(1.0, float(np.abs(ref).max()))
        diff = np.abs(got - ref) / scale
        err = float(diff.max())
        if err > TOL[t.dtype]:
            bad = np.argwhere(diff > TOL[t.dtype])
            worst = tuple(int(i) for i in np.unravel_index(int(diff.argmax()), diff.shape))
            pytest.fail(f"{model.name}: {t.name}{list(t.shape)} ({t.dtype}) off by {err:.3g} of its scale "
                        f"{scale:.3g} at {worst} (got {got[worst]:.5g}, want {ref[worst]:.5g}); {len(bad)} of "
                        f"{diff.size} elements off, first {bad[:4].tolist()}, last {bad[-2:].tolist()}")


def _check(model: Model, iterations: int = 1, seed: int = 0, inputs: dict[str, np.ndarray] | None = None, **kw):
    from ark_runtime.runtime import Runtime

    inputs = _inputs(model, seed) if inputs is None else inputs
    with Runtime(model, **kw) as rt:
        _run_and_compare(model, rt, inputs, iterations)
        return rt


def _one_op(kind: str, dtype: str) -> Model:
    m = Model(f"{kind}-{dtype}")
    rows, cols = 37, 200  # neither a multiple of any tile
    x = m.input("x", (rows, cols), dtype)
    if kind == "unary":
        y = x
        for fn in ("gelu", "silu", "relu", "neg", "exp", "identity"):
            y = m.unary(fn, y)
        y = m.add(y, m.unary("rsqrt", m.unary("sqrt", m.unary("exp", x))))
    elif kind == "binary":
        row = m.input("row", (1, cols), dtype)
        col = m.input("col", (rows, 1), dtype)
        y = m.binary("max", m.binary("div", m.binary("sub", m.mul(x, row), col), m.unary("exp", row)), x)
    elif kind == "reduce":
        y = m.add(m.add(m.reduce("sum", x), m.reduce("max", x)), m.reduce("mean", x))
    elif kind == "softmax":
        y = m.softmax(x)
    elif kind == "layernorm":
        y = m.layernorm(x, m.input("w", (cols,), dtype), m.input("b", (cols,), dtype))
    elif kind == "rmsnorm":
        y = m.rmsnorm(x, m.input("w", (cols,), dtype))
    elif kind == "matmul":
        y = m.matmul(x, m.input("w", (cols, 136), dtype))
    elif kind == "matmul_odd":  # K and N not multiples of 8: the element-wise loads (21 rows: not skinny)
        x2 = m.input("x2", (3, 7, 45), dtype)
        y = m.matmul(x2, m.input("w", (45, 77), dtype))
    elif kind == "attention":
        q = m.input("q", (2, 70, 128), dtype)
        y = m.add(m.attention(q, m.input("k", (2, 70, 128), dtype), m.input("v", (2, 70, 128), dtype), heads=2),
                  m.attention(q, q, q, heads=4, causal=False))
    elif kind == "rope":
        y = m.rope(m.input("h", (2, 37, 64), dtype), m.input("cos", (37, 32), dtype), m.input("sin", (37, 32), dtype))
    elif kind == "embedding":
        y = m.embedding(m.input("table", (50, 96), dtype), m.input("ids", (3, 13), "int32"))
    else:
        raise ValueError(kind)
    m.output(y)
    return m


KINDS = ("unary", "binary", "reduce", "softmax", "layernorm", "rmsnorm", "matmul", "matmul_odd", "attention", "rope",
         "embedding")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_op_matches_the_reference(gpu, kind, dtype):
    _check(_one_op(kind, dtype))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_elementwise_tiles_of_every_shape_match_the_reference(gpu, dtype):
    """map_tile's four paths (elementwise.cuh): at most one element per thread or ILP of them, in tiles of whole rows
    (no division by the width) or of part of a row. (3, 8292) cuts each row into 8192 columns and a 100-column rest,
    (1, 200) is one small tile of a whole row, (64, 64) tiles of 32 whole rows; a broadcast row and column read
    through the same index maps."""
    from ark_runtime.tiling import tile_model

    m = Model(f"map-paths-{dtype}")
    wide, row = m.input("wide", (3, 8292), dtype), m.input("row", (1, 8292), dtype)
    small, square, col = m.input("small", (1, 200), dtype), m.input("square", (64, 64), dtype), m.input(
        "col", (64, 1), dtype)
    m.output(m.add(m.unary("neg", wide), row), m.unary("exp", small), m.mul(square, col))
    shapes = set()
    tiles = tile_model(m, 132)
    for op in m.ops:
        out = m.tensors[op.output]
        for t in (t for t in tiles if t.op == op.id):
            w = t.writes
            shapes.add(((w.r1 - w.r0) * (w.c1 - w.c0) <= 256, w.c1 - w.c0 == out.cols))
    assert shapes == {(True, True), (True, False), (False, True), (False, False)}
    _check(m, fuse_chains=False)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("rows", [1, 3, 5, 8, 13, 16])
def test_skinny_matmuls_match_the_reference(gpu, rows, dtype):
    """Matmuls of few rows stream their weights: K over one slice or many, N not a multiple of the tile's columns, K
    or N not multiples of 8 (element-wise copies); three iterations reuse each SM's slices. bf16/fp16 ones of more
    than 4 rows with K and N multiples of 8 multiply on tensor cores (gemv_mma.cuh) in tiles of 32 columns (N 1000),
    64 (N 8192) and 128 (N 16384), the rest on the FMA units (gemv.cuh)."""
    from ark_runtime.ops.matmul import skinny_mma

    m = Model(f"skinny{rows}-{dtype}")
    ys = []
    for k in (1000, 4096, 37):
        x = m.input(f"x{k}", (rows, k), dtype)
        ys += [m.matmul(x, m.input(f"w{k}_{n}", (k, n), dtype)) for n in (33, 1000, 4100)]
    x = m.input("xw", (rows, 1000), dtype)
    ys += [m.matmul(x, m.input(f"ww{n}", (1000, n), dtype)) for n in (8192, 16384)]
    m.output(*ys)
    rt = _check(m, iterations=3)
    shapes = [(rows, y.shape[1], m.tensors[m.ops[y.producer].inputs[0]].cols) for y in ys]
    mma = sum(skinny_mma(r, n, k, dtype) for r, n, k in shapes)
    text = rt.source.text
    text = text[text.index("run_tile("):]  # the tiles' bodies (preload_tile repeats the weight-streaming ones)
    assert (text.count("ark::gemv_tile<"), text.count("ark::gemv_mma_tile<")) == (len(ys) - mma, mma)


ATTENTION_SEQS = (1, 17, 100, 128, 300)  # none a multiple of 64; 100 also at batch 2


def _attention_model(dtype: str, d: int, heads: int = 2) -> Model:
    """Causal and full attention at each of ATTENTION_SEQS, q, k and v distinct."""
    m = Model(f"attention-{dtype}-d{d}")
    ys = []
    for s in ATTENTION_SEQS:
        shape = (2, s, heads * d) if s == 100 else (s, heads * d)
        q, k, v = (m.input(f"{n}{s}", shape, dtype) for n in "qkv")
        ys += [m.attention(q, k, v, heads=heads), m.attention(q, k, v, heads=heads, causal=False)]
    m.output(*ys)
    return m


def _query_blocks(model: Model, sms: int) -> set[int]:
    from ark_runtime.ops.attention import attention_block

    blocks = set()
    for op in model.ops:
        q = model.tensors[op.inputs[0]]
        s, heads = q.shape[-2], op.attr("heads")
        blocks.add(attention_block(s, q.shape[-1] // heads, heads * (q.rows // s), sms))
    return blocks


@pytest.mark.parametrize("dtype,sms", [  # the tiles' query blocks: 16 on the GPU's SMs, 32 on 16, 64 on 4
    ("bf16", None), ("bf16", 16), ("bf16", 4), ("fp16", None), ("fp16", 16), ("fp16", 4),
    ("fp32", None),  # the scalar tile does not depend on the query block
])
@pytest.mark.parametrize("d", [32, 64, 80, 128])
def test_attention_at_lengths_that_are_not_block_multiples(gpu, dtype, d, sms):
    """attention.cuh's tensor-core tile (bf16, fp16; fp32 the scalar tile) at sequence lengths 1 to 300, causal and
    not, at every query block: a block's last rows, the stages' last keys and the causal diagonal all masked."""
    m = _attention_model(dtype, d)
    if sms is not None:
        assert _query_blocks(m, sms) >= {16 if sms == 16 else 64, 32 if sms == 16 else 64}
    _check(m, **({} if sms is None else {"sms": sms}))


@pytest.mark.parametrize("d", [20, 160, 256])  # element-wise loads; two passes over the keys (128 + 32, 128 + 128)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_attention_at_odd_and_wide_head_dims(gpu, dtype, d):
    _check(_attention_model(dtype, d))


ROW_COUNTS = (1, 3, 130, 2000)  # one row a tile (a team up to the CTA) ... 16 a tile (a warp per row)


def _row_model(dtype: str, cols: int, scale: float = 0.0) -> Model:
    m = Model(f"rows-{dtype}-{cols}")
    ys = []
    for rows in ROW_COUNTS:
        if rows * cols > 1 << 21:
            continue
        x = m.input(f"x{rows}", (rows, cols), dtype)
        w, b = m.input(f"w{rows}", (cols,), dtype), m.input(f"b{rows}", (cols,), dtype)
        ys += [m.layernorm(x, w, b), m.rmsnorm(x, w), m.softmax(x)] + [m.reduce(fn, x) for fn in ("sum", "max", "mean")]
    m.output(*ys)
    return m


@pytest.mark.parametrize("cols", [1, 7, 1000, 1024, 4096, 5000])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_row_ops_at_every_width(gpu, dtype, cols):
    """rows.cuh: element-wise loads (odd widths), 16-byte pieces held in registers, rows read in slabs (fp32 at
    5000), teams of a warp to the whole CTA; layernorm, RMSNorm, softmax and the three reductions."""
    _check(_row_model(dtype, cols))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_layernorm_of_rows_far_from_zero(gpu, dtype):
    """Mean 100, deviation 1: a variance from the sum of squares would lose it to cancellation in fp32."""
    m = _row_model(dtype, 1000)
    inputs = _inputs(m)
    for k in inputs:
        if k.startswith("x"):
            inputs[k] = inputs[k] + 100.0
    _check(m, inputs=inputs)


@pytest.mark.parametrize("name", ["chain64", "block-s128", "mlp-b1", "mlp-b8", "mlp-b64"])
def test_named_models_match_the_reference(gpu, name):
    from ark_runtime import models

    m = models.named(name)
    if name == "mlp-b8":  # the same graph at a size the float64 reference computes quickly
        m = models.mlp(8, hidden=512, inner=2048)
    elif name == "mlp-b1":  # the down projection split in K on gemv.cuh (K 4096 in 4 parts of 128 columns)
        m = models.mlp(1, hidden=512, inner=4096)
    elif name == "block-s128":
        m = models.transformer_block(128, hidden=256, heads=4)
    _check(m)


def test_a_padded_down_projection_in_wide_split_parts(gpu):
    """mlp-b8's shape of down projection (8 rows, K 4096 here): on 132 SMs its K in 4 parts of 128-column tiles on
    tensor cores (gemv_mma.cuh, A's 8 rows as the mma's N), each tile's fp32 sums added by the split_sum."""
    from ark_runtime import models
    from ark_runtime.ops.matmul import SKINNY_PART_COLS

    rt = _check(models.mlp(8, hidden=4096, inner=4096))
    split = next(o for o in rt.model.ops if o.kind == "matmul" and o.attr("k_splits"))
    widths = {t["writes"][4] - t["writes"][3] for t in rt.plan.tiles if t["op"] == split.id}
    if rt.plan.num_sms == 132:
        assert split.attr("k_splits") == 4 and widths == {SKINNY_PART_COLS}
        assert "ark::gemv_mma_tile<__nv_bfloat16, 8, 128," in rt.source.text


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_activation_chains_at_every_place_a_thread_holds(gpu, dtype):
    """A fused chain computes GELU's and SiLU's reciprocal on the SFU for some of the elements a thread holds and
    with rcp_fma (numeric.cuh) for the rest. Tiles of 2,048 elements and more fill every place; the inputs span the
    exponent's range and run past rcp_fma's clamp (1 + 2^y is inf for GELU from x of about 10 on, for SiLU below
    -88.7), shuffled so every kind lands on every place; each element against float64, relative to its own size
    (floor 1)."""
    from ark_runtime.runtime import Runtime

    m = Model(f"activations-{dtype}")
    x = m.input("x", (320, 1024), dtype)
    y = m.unary("silu", m.unary("gelu", x))
    y = m.unary("silu", m.unary("neg", m.unary("gelu", m.unary("neg", y))))
    m.output(y)
    n = 320 * 1024
    edges = np.array([0.0, 1e-3, -1e-3, 0.5, -0.5, 5.0, -5.0, 30.0, -30.0, 88.0, -88.0, 200.0, -200.0, 1e4, -1e4])
    values = np.concatenate([np.linspace(-40.0, 40.0, n - 64 * len(edges)), np.tile(edges, 64)])
    values = np.random.default_rng(3).permutation(values).reshape(320, 1024)
    want = evaluate(m, _rounded(m, {"x": values}))[m.outputs[0]]
    with Runtime(m) as rt:
        assert [o.kind for o in rt.model.ops] == ["fused"]
        sizes = [(w[2] - w[1]) * (w[4] - w[3]) for w in (t["writes"] for t in rt.plan.tiles)]
        assert min(sizes) >= 2048, f"tiles of {min(sizes)} elements do not fill every place"
        rt.set("x", values)
        rt.run(1)
        rt.wait()
        got = rt.get(y.name).astype(np.float64)
    tol = 1e-5 if dtype == "fp32" else 3e-2  # bf16: the reference rounds every op, the fused chain once
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    worst = np.unravel_index(int(err.argmax()), err.shape)
    assert err.max() <= tol, (f"off by {err.max():.3g} at {worst}: x {values[worst]:.6g}, got {got[worst]:.8g}, "
                              f"want {want[worst]:.8g}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models())
def test_random_models_match_the_reference(gpu, model):
    _check(model)


def test_many_iterations_of_one_launch(gpu):
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    m = models.transformer_block(64, hidden=128, heads=2, dtype="fp32")
    inputs = _inputs(m)
    want = evaluate(m, inputs)[m.outputs[0]]
    with Runtime(m) as rt:
        for k, v in inputs.items():
            rt.set(k, v)
        for i in range(1, 4):
            rt.run(7)
            rt.wait()
            assert rt.iterations_done == 7 * i
            np.testing.assert_allclose(rt.get(m.tensors[m.outputs[0]].name), want, rtol=2e-3, atol=2e-3)


def test_independent_sms_run_far_ahead_and_done_still_counts_every_iteration(gpu):
    """chain: every SM runs its own rows and waits for no other, so fast CTAs run ahead of slow ones, past the
    RING slots that count arrivals; `done` must still reach every iteration asked for, and no further."""
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    m = models.chain(8, rows=64, cols=1024)
    with Runtime(m) as rt:
        assert not any(i["op"] == "wait" for s in rt.plan.streams for i in s)
        rt.set("x", np.ones((64, 1024)))
        for total in (1, 300, 301, 1000):
            rt.run(total - rt.iterations_done)
            rt.wait(timeout=30)
            assert rt.iterations_done == total
        stamps = rt.iteration_ns()  # the GPU clock at each of the last RING iterations' end
        assert len(stamps) == 64 and (np.diff(stamps) >= 0).all() and stamps[-1] > stamps[0]


def test_one_resident_kernel_at_a_time(gpu):
    from ark_runtime.runtime import LoopError, Runtime

    m = _one_op("unary", "fp32")
    with Runtime(m):
        with pytest.raises(LoopError, match="still resident"):
            Runtime(m)
    _check(m)  # once stopped, the next one starts


@pytest.mark.parametrize("path", ["sm", "engine"])
@pytest.mark.parametrize("nbytes", [8192, 1 << 20])
def test_copy_to_pinned_host_from_the_kernel(gpu, path, nbytes):
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    m = models.copy_out(nbytes)
    x = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
    if path == "engine":
        from host.provider import CudaProvider

        if CudaProvider().unavailable_reason():
            pytest.skip(f"software-cuda cannot run here: {CudaProvider().unavailable_reason()}")
    with Runtime(m, copy_path=path) as rt:
        rt.set("x", x)
        rt.run(3)
        rt.wait()
        out = m.tensors[m.outputs[0]]
        assert out.placement == "host"
        np.testing.assert_array_equal(rt.get(out.name), x)
        (r,) = rt.report()
        assert r.bytes == nbytes and r.time_us > 0
        assert r.path == ("sm" if path == "sm" else "engine:software-cuda")
        assert r.uses_sms == (path == "sm")


def test_bound_arrays_are_used_without_a_copy(gpu):
    import cupy

    from ark_runtime.runtime import Runtime

    m = Model("bound")
    x = m.input("x", (64, 96), "fp32")
    m.output(m.unary("neg", x))
    xs = cupy.arange(64 * 96, dtype=cupy.float32).reshape(64, 96)
    ys = cupy.zeros((64, 96), cupy.float32)
    # While the loop kernel is resident the test launches no kernel and allocates nothing (see the runtime's
    # docstring): it changes xs with a copy on a stream of its own and reads both arrays back with copies.
    mine = cupy.cuda.Stream(non_blocking=True)
    with mine, Runtime(m, bind={"x": xs, "neg0": ys}) as rt:
        assert rt.address("x") == xs.data.ptr
        rt.run()
        rt.wait()
        np.testing.assert_array_equal(ys.get(), -xs.get())
        xs.set(np.full((64, 96), 3.0, np.float32), stream=mine)  # in place; run() orders the kernel after it
        rt.run()
        rt.wait()
        np.testing.assert_array_equal(ys.get(), np.full((64, 96), -3.0, np.float32))


def test_torch_tensors_bind_through_dlpack(gpu):
    torch = pytest.importorskip("torch")
    from ark_runtime.runtime import Runtime

    m = Model("torch")
    a = m.input("a", (33, 64), "bf16")
    w = m.input("w", (64, 48), "bf16")
    m.output(m.matmul(a, w))
    ta = torch.randn(33, 64, device="cuda", dtype=torch.bfloat16)
    tw = torch.randn(64, 48, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(33, 48, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with Runtime(m, bind={"a": ta, "w": tw, "matmul0": out}) as rt:
        rt.run()
        rt.wait()
    ref = ta.float() @ tw.float()
    assert float((out.float() - ref).abs().max()) <= 0.05 * float(ref.abs().max())


def _preload_model() -> Model:
    """Weight-streaming matmuls behind an op on every SM: of 8 rows (gemv_mma.cuh) and 1 (gemv.cuh) with B an input
    (their tiles issue their first slices before their waits), and of 8 rows with B an op's output (they must not)."""
    m = Model("preload")
    h = m.unary("gelu", m.input("x", (8, 4096), "bf16"))
    y = m.matmul(h, m.input("w", (4096, 4096), "bf16"))
    z = m.matmul(h, m.unary("neg", m.input("v", (4096, 1024), "bf16")))
    one = m.matmul(m.unary("silu", m.input("x1", (1, 4096), "bf16")), m.input("w1", (4096, 2048), "bf16"))
    m.output(y, z, one)
    return m


def test_weights_load_before_the_waits_and_the_results_follow_new_inputs(gpu):
    """Runs of two iterations with new x, w and v between them: a tile that loaded its first weight slices before
    its waits still multiplies this run's weights and activations."""
    from ark_runtime.runtime import Runtime

    m = _preload_model()
    with Runtime(m) as rt:
        text = rt.source.text
        early = text[text.index("preload_tile("):text.index("run_tile(")]
        # the runtime may cut K into parts (split_k): the bodies are told apart by their ops' weights
        assert early.count("ark::gemv_mma_tile<") == 1 and "w[4096, 4096]" in early
        assert early.count("ark::gemv_tile<") == 1 and "w1[4096, 2048]" in early and "neg" not in early
        waits = rt._arrays["ins"].get()[:, 0] == 2
        assert waits.any(), "no tile waits: nothing is loaded ahead"
        for seed in (0, 1, 2):
            _run_and_compare(m, rt, _inputs(m, seed), iterations=2)


def test_a_fault_while_preloaded_tiles_wait_stops_them_and_the_gpu_stays_usable(gpu):
    """The matmul's tiles wait on a gather that faults: they have issued their weight copies and leave without a
    tile to take them; the fault names the gather, and the next runtime on the GPU runs."""
    from ark_runtime.runtime import LoopFault, Runtime

    m = Model("preload-fault")
    h = m.embedding(m.input("table", (64, 4096), "bf16"), m.input("ids", (8,), "int32"))
    m.output(m.matmul(h, m.input("w", (4096, 4096), "bf16")))
    rt = Runtime(m)
    text = rt.source.text
    assert text[text.index("preload_tile("):text.index("run_tile(")].count("ark::gemv_mma_tile<") == 1
    ids = np.arange(8, dtype=np.int32)
    ids[5] = 64
    rt.set("ids", ids)
    rt.run()
    with pytest.raises(LoopFault, match=r"BAD_INDEX .*op 0 embedding.*row 5"):
        rt.wait()
    rt.stop()
    _check(_preload_model(), iterations=2)


def test_bad_index_is_a_fault_naming_the_op_and_the_gpu_stays_usable(gpu):
    from ark_runtime.runtime import LoopError, LoopFault, Runtime

    m = Model("gather")
    table, ids = m.input("table", (10, 32), "fp32"), m.input("ids", (40,), "int32")
    m.output(m.embedding(table, ids))
    rt = Runtime(m)
    bad = np.arange(40, dtype=np.int32) % 10
    bad[17] = 10
    rt.set("ids", bad)
    rt.run()
    with pytest.raises(LoopFault, match=r"BAD_INDEX .*op 0 embedding.*row 17"):
        rt.wait()
    with pytest.raises(LoopError, match="stopped after a fault"):
        rt.run()
    rt.stop()
    _check(_one_op("embedding", "fp32"))  # a new runtime runs


def test_a_wait_that_is_never_satisfied_times_out_on_the_gpu(gpu):
    from ark_runtime.runtime import LoopFault, Runtime

    m = Model("waits")
    x = m.input("x", (512, 1024), "fp32")
    m.output(m.softmax(m.matmul(x, m.input("w", (1024, 1024), "fp32"))))
    rt = Runtime(m, budget_s=0.2)
    ins = rt._arrays["ins"].get()
    waits = np.nonzero(ins[:, 0] == 2)[0]
    assert len(waits), "the plan has no cross-SM wait to plant a fault in"
    ins[waits[0], 2] = 1000  # wait for iteration 1000's write: never comes
    rt._arrays["ins"].set(ins)
    rt.run()
    with pytest.raises(LoopFault, match=r"TIMEOUT .*waited .* ms for"):
        rt.wait(timeout=30)
    rt.stop()


def test_the_host_side_timeout_stops_the_kernel(gpu):
    from ark_runtime.runtime import LoopError, LoopTimeout, Runtime

    m = Model("slow")
    x = m.input("x", (512, 1024), "fp32")
    m.output(m.softmax(m.matmul(x, m.input("w", (1024, 1024), "fp32"))))
    rt = Runtime(m, budget_s=60)
    ins = rt._arrays["ins"].get()
    ins[np.nonzero(ins[:, 0] == 2)[0][0], 2] = 1000
    rt._arrays["ins"].set(ins)
    rt.run()
    with pytest.raises(LoopTimeout, match="0 of 1 iterations done"):
        rt.wait(timeout=0.5)
    assert rt.state == "stopped after a timeout"
    with pytest.raises(LoopError):
        rt.run()
    rt.stop()


def test_a_tensor_fused_away_is_named_when_asked_for(gpu):
    import cupy

    from ark_runtime.runtime import LoopError, Runtime

    m = Model("fz")
    x = m.input("x", (4, 8), "fp32")
    a = m.unary("exp", x)
    m.output(m.unary("neg", a))
    with pytest.raises(LoopError, match="keeps in registers only"):
        Runtime(m, bind={a.name: cupy.zeros((4, 8), cupy.float32)})
    with Runtime(m) as rt:
        assert [o.kind for o in rt.model.ops] == ["fused"]
        with pytest.raises(LoopError, match="computed in registers"):
            rt.get(a.name)


def test_hostile_calls_get_clear_errors(gpu):
    from ark_runtime.model import ModelError
    from ark_runtime.runtime import LoopError, Runtime

    m = Model("h")
    x = m.input("x", (4, 8), "fp32")
    m.output(m.unary("neg", x))
    with pytest.raises(LoopError, match="sms="):
        Runtime(m, sms=100000)
    import cupy

    with pytest.raises(LoopError, match="holds 4 bytes"):
        Runtime(m, bind={"x": cupy.zeros(1, cupy.float32)})
    with pytest.raises(LoopError, match="is float16"):
        Runtime(m, bind={"x": cupy.zeros((4, 8), cupy.float16)})
    for offset in (1, 2, 3):  # a contiguous view 4, 8 or 12 bytes into an allocation
        with pytest.raises(LoopError, match="not on a 16-byte boundary"):
            Runtime(m, bind={"x": cupy.zeros(40, cupy.float32)[offset:offset + 32].reshape(4, 8)})
    with Runtime(m) as rt:
        with pytest.raises(ModelError, match="is \\(4, 8\\)"):
            rt.set("x", np.zeros((8, 4)))
        with pytest.raises(LoopError, match="no tensor"):
            rt.get("nope")
        for bad in (0, -1, 1.5, True):
            with pytest.raises(LoopError, match="iterations"):
                rt.run(bad)
        rt.run(1)
        for bad in (0, -1.0, math.nan, math.inf, "5", True):  # none stops the kernel or waits for ever
            with pytest.raises(LoopError, match="timeout must be"):
                rt.wait(timeout=bad)
        rt.wait()
        assert rt.state == "running" and rt.iterations_done == 1
        assert math.isfinite(rt.get("x").sum())
    torch = pytest.importorskip("torch")
    with pytest.raises(LoopError, match="not on a 16-byte boundary"):
        Runtime(m, bind={"x": torch.zeros(40, device="cuda")[1:33].view(4, 8)})


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize(("m", "k", "n"), [(100, 2048, 136), (17, 4096, 64), (300, 2048, 200)])
def test_matmuls_split_along_k(gpu, dtype, m, k, n):
    """Matmuls with too few tiles for the SMs run as parts along K and a sum (split_k.py): each against float64,
    and the same bits every run (the parts are added in order)."""
    model = Model(f"split{m}x{k}x{n}-{dtype}")
    model.output(model.matmul(model.input("a", (m, k), dtype), model.input("w", (k, n), dtype)))
    rt = _check(model, iterations=3)
    if rt.plan.device.get("wgmma"):  # a Hopper GPU: the wgmma tile runs, so these split
        assert any(o.kind == "split_sum" for o in rt.model.ops)
    inputs = _inputs(model)
    outs = []
    for split in (True, True, False):
        from ark_runtime.runtime import Runtime

        with Runtime(model, split_k=split) as r:
            for name, v in inputs.items():
                r.set(name, v)
            r.run(2)
            r.wait()
            outs.append(r.get(model.tensors[model.outputs[0]].name))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], outs[2], rtol=TOL[dtype], atol=TOL[dtype] * float(np.abs(outs[2]).max()))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("rows", [5, 37, 200])
def test_elementwise_chains_fused_into_matmul_stores(gpu, dtype, rows):
    """A bias row, SiLU and a residual add in the matmul's epilogue (fusion.py), on each matmul tile: the skinny
    one (5 rows), the wgmma one (bf16/fp16) and the WMMA one (fp32); against float64."""
    m = Model(f"epi{rows}-{dtype}")
    x, w = m.input("x", (rows, 64), dtype), m.input("w", (64, 136), dtype)
    bias, res = m.input("bias", (136,), dtype), m.input("res", (rows, 136), dtype)
    m.output(m.add(m.unary("silu", m.add(m.matmul(x, w), bias)), res))
    rt = _check(m, iterations=2)
    assert [o.kind for o in rt.model.ops] == ["matmul"] and rt.model.ops[0].attr("epilogue")


def test_a_kernel_on_another_stream_runs_beside_the_loop_kernel(gpu):
    """While a kernel with any local memory is resident no other kernel starts (measured on an H100,
    bench/results/h100/experiments/graph_ahead/); the loop kernel has none (test_loop_local_memory.py), so a kernel
    already loaded runs on another stream while it is resident."""
    import time

    import cupy

    from ark_runtime.runtime import Runtime

    m = Model("beside")
    m.output(m.unary("neg", m.input("x", (64, 64), "fp32")))
    add_one = cupy.ElementwiseKernel("float32 a", "float32 b", "b = a + 1", "ark_test_add_one")
    a, b = cupy.zeros(1024, cupy.float32), cupy.zeros(1024, cupy.float32)
    add_one(a, b)  # loaded, and launched once, before the loop kernel is resident
    a.fill(1.0)
    cupy.cuda.Device().synchronize()
    other = cupy.cuda.Stream(non_blocking=True)
    with Runtime(m) as rt:
        with other:
            add_one(a, b)
        t0 = time.monotonic()
        while not other.done and time.monotonic() - t0 < 5.0:
            time.sleep(1e-3)
        assert other.done, "a kernel on another stream did not run while the loop kernel was resident"
        rt.run(2)
        rt.wait()
    assert float(b[0]) == 2.0
