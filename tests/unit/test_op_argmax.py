"""The argmax op (ops/argmax.py, argmax.cuh): NumPy's rule (lowest index among equals, -0 equal to +0, the first NaN
wins), the integer keys the kernel compares by (they order every fp16 and bf16 value, and fp32 values of every kind,
as the values), the refusals, plans that run tile by tile to the reference (a tile that reads too little is caught,
NaN rule and all), greedy decoding into an embedding, and the kernel compiled for sm_90 and sm_90a for every team
size. tests/gpu/test_op_argmax.py runs it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.plan import choose_variants
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec

NAN_KEY = 0x7FFFFFFF


def _keys(bits: np.ndarray, width: int, inf: int) -> np.ndarray:
    """argmax.cuh's argmax_key, on the bits of `width`-bit floats whose infinity has magnitude bits `inf`."""
    bits = bits.astype(np.int64)
    sign, mag = bits >> (width - 1), bits & ((1 << (width - 1)) - 1)
    return np.where(mag > inf, NAN_KEY, np.where(sign == 1, -mag, mag))


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
def test_the_keys_order_the_values_as_the_values_order(name):
    if name == "fp16":
        bits = np.arange(1 << 16, dtype=np.uint16)
        values, keys = bits.view(np.float16).astype(np.float64), _keys(bits, 16, 0x7C00)
    elif name == "bf16":
        bits = np.arange(1 << 16, dtype=np.uint32)
        with np.errstate(invalid="ignore"):
            values = (bits << 16).view(np.float32).astype(np.float64)
        keys = _keys(bits, 16, 0x7F80)
    else:
        rng = np.random.default_rng(0)
        bits = np.concatenate([rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32),
                               np.array([0, 1 << 31, 1, (1 << 31) + 1, 0x7F800000, 0xFF800000, 0x7F7FFFFF], np.uint32)])
        with np.errstate(invalid="ignore"):
            values = bits.view(np.float32).astype(np.float64)
        keys = _keys(bits, 32, 0x7F800000)
    nan = np.isnan(values)
    assert (keys[nan] == NAN_KEY).all() and (keys[~nan] < NAN_KEY).all() and (keys > -(1 << 31)).all()
    v, k = values[~nan], keys[~nan]
    order = np.argsort(v, kind="stable")
    assert (np.diff(k[order]) >= 0).all()  # never down as the values go up
    same_key = np.diff(k[order]) == 0
    assert (np.diff(v[order])[same_key] == 0).all() and (np.diff(v[order])[~same_key] > 0).all()  # equal iff equal


def _argmax(x):
    m = Model("a")
    y = m.argmax(m.input("x", np.shape(x)))
    m.output(y)
    return evaluate(m, {"x": np.asarray(x, float)})[y.id]


def test_the_reference_is_numpys_rule():
    nan, inf = np.nan, np.inf
    rows = [[1, 3, 3, 2], [-0.0, 0.0, -1, -2], [0.0, -0.0, -1, -2], [1, nan, 5, nan], [-inf, -inf, -inf, -inf],
            [2, 2, 2, 2], [-5, -4, -4, -9], [inf, 1, inf, nan]]
    assert _argmax(rows)[:, 0].tolist() == [1, 0, 0, 1, 0, 0, 1, 3]
    assert _argmax(rows).tolist() == np.argmax(np.array(rows), axis=-1, keepdims=True).tolist()


def test_the_output_is_int32_with_the_last_axis_kept():
    m = Model("a")
    y = m.argmax(m.input("logits", (2, 7, 32000), "bf16"))
    assert (y.shape, y.dtype) == ((2, 7, 1), "int32")


def test_bad_calls_are_refused_naming_the_op():
    m = Model("bad")
    ids = m.input("ids", (4, 8), "int32")
    with pytest.raises(ModelError, match=r"argmax: ids is int32; the op takes fp32, fp16, bf16"):
        m.argmax(ids)
    x = m.input("x", (4, 8))
    with pytest.raises(ModelError, match=r"argmax takes no argument axis"):
        m.op("argmax", x, axis=0)
    with pytest.raises(ModelError, match=r"argmax takes 1 tensor\(s\), not 2"):
        m.op("argmax", x, x)
    assert m.ops == []


def _inputs(shape, seed, kind):
    rng = np.random.default_rng(seed)
    if kind == "ties":  # few distinct values: many equal maxima
        return rng.integers(-2, 3, shape).astype(float)
    x = rng.standard_normal(shape)
    if kind == "nan":
        x[rng.random(shape) < 0.05] = np.nan
    if kind == "zeros":
        x = np.where(rng.random(shape) < 0.5, -0.0, 0.0) - (rng.random(shape) < 0.3)
    return x


def _plan_matches(m, sms, ins, seed=0):
    lw = lower(m, DeviceSpec(num_sms=sms), cache=False)
    want = evaluate(m, ins)
    got = run_plan(lw.plan, lw.model, ins, seed=seed)
    for src, dst in zip(m.outputs, lw.model.outputs):
        np.testing.assert_array_equal(got[dst], want[src])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 6), max_size=2), st.integers(1, 700), st.integers(1, 12),
       st.sampled_from(["fp32", "fp16", "bf16"]), st.sampled_from(["normal", "ties", "nan", "zeros"]),
       st.integers(0, 3))
def test_random_argmaxes_run_tile_by_tile_to_the_reference(lead, cols, sms, dtype, kind, seed):
    m = Model("a")
    m.output(m.argmax(m.input("x", (*lead, cols), dtype)))
    _plan_matches(m, sms, {"x": _inputs((*lead, cols), seed, kind)}, seed)


def test_a_tile_reading_too_little_is_caught(monkeypatch):
    """A row cut short shows the tile NaN past its end, which wins: the plan's result differs from the reference."""
    from ark_runtime.ops import argmax
    from ark_runtime.tiling import Region

    real = argmax.Argmax.tiles

    def short_reads(self, tm, op, v):
        real(self, tm, op, v)
        tm.tiles[:] = [t.__class__(t.id, t.op, t.index, t.writes, (Region(r.tensor, r.r0, r.r1, r.c0, r.c1 - 1),),
                                   t.bytes, t.flops) for t in tm.tiles for r in t.reads]

    monkeypatch.setattr(argmax.Argmax, "tiles", short_reads)
    m = Model("a")
    m.output(m.argmax(m.input("x", (40, 64))))
    with pytest.raises(AssertionError, match="not equal"):
        _plan_matches(m, 4, {"x": _inputs((40, 64), 0, "normal")})


def test_greedy_decoding_feeds_the_embedding():
    m = Model("greedy")
    table, h = m.input("table", (50, 32)), m.input("h", (6, 32))
    ids = m.argmax(m.matmul(h, m.transpose(table)))  # [6, 1]
    nxt = m.embedding(table, ids)  # [6, 1, 32]
    m.output(nxt, m.cast(ids, "fp32"))
    rng = np.random.default_rng(0)
    ins = {"table": rng.standard_normal((50, 32)), "h": rng.standard_normal((6, 32))}
    want = evaluate(m, ins)
    best = np.argmax(ins["h"] @ ins["table"].T, axis=-1)
    np.testing.assert_array_equal(want[nxt.id][:, 0], ins["table"][best])
    _plan_matches(m, 8, ins)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_for_every_dtype_and_team(arch):
    from driver.gpu import compile

    m = Model("argmaxes")
    outs = []
    for dtype in ("fp32", "fp16", "bf16"):
        for shape in ((37, 7), (300, 200), (5, 4100), (1, 128000), (64, 1000), (3, 512)):
            outs.append(m.argmax(m.input(f"x_{dtype}_{'x'.join(map(str, shape))}", shape, dtype)))
    m.output(*outs)
    teams = {v["team"] for v in choose_variants(m, DeviceSpec(num_sms=132))}
    assert teams == {32, 64, 128, 256}, teams
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    assert lw.source.text.count("ark::argmax_rows<") >= 12
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


# --- argmax.cuh itself, run on the host (tests/unit/cuda_host/argmax_on_host.cpp) -------------------------------------
CTYPES = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}


def _bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """x's elements as the dtype's bits (bf16: fp32's upper half, so every bf16 value and NaN is reachable)."""
    if dtype == "fp32":
        return x.astype(np.float32).view(np.uint32)
    if dtype == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).view(np.uint16).astype(np.uint32)
    return x.astype(np.float32).view(np.uint32) >> 16


def _values(bits: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaNs stay NaN (np.argmax takes the first, whatever its payload)
        if dtype == "fp32":
            return bits.astype(np.uint32).view(np.float32).astype(np.float64)
        if dtype == "fp16":
            return bits.astype(np.uint16).view(np.float16).astype(np.float64)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _host_argmax(exe, bits: np.ndarray, offset: int) -> np.ndarray:
    import subprocess

    rows, cols = bits.shape
    text = f"{rows} {cols} {offset}\n" + " ".join(map(str, bits.ravel().tolist()))
    done = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return np.array(done.stdout.split(), np.int64)


def _raw_bits(shape, dtype: str, rng) -> np.ndarray:
    """Any bit patterns of the dtype: subnormals, infinities, NaNs of every payload, both zeros."""
    width = 32 if dtype == "fp32" else 16
    return rng.integers(0, 1 << width, shape, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize(("dtype", "team"), [("fp32", 256), ("fp32", 32), ("fp16", 256), ("fp16", 64),
                                             ("bf16", 256), ("bf16", 128), ("bf16", 32)])
@pytest.mark.parametrize("offset", [0, 1])  # 1: rows off 16 bytes, read element by element
def test_argmax_cuh_on_the_host_is_numpys_at_every_width(tmp_path_factory, dtype, team, offset):
    """Widths that are whole 16-byte pieces (read a piece at a time, several loads in flight) and widths that are not
    (element by element), a decode step's 128,256 columns among them; values with ties, NaNs, both zeros and any
    bits."""
    from tests.unit.cuda_host.build import build_on_host

    exe = build_on_host("argmax_on_host.cpp", {"HOST_DTYPE": CTYPES[dtype], "HOST_NT": str(team)}, tmp_path_factory)
    rng = np.random.default_rng(team + offset)
    kinds = ("normal", "ties", "nan", "zeros", "bits")
    for j, cols in enumerate((1, 3, 8, 9, 16, 24, 33, 64, 1000, 4097)):
        for kind in (kinds[j % 5], kinds[(j + 2) % 5]):  # each kind at whole-piece widths and others
            rows = 5 if cols < 4097 else 3
            bits = _raw_bits((rows, cols), dtype, rng) if kind == "bits" else _bits(
                _inputs((rows, cols), int(rng.integers(1 << 30)), kind), dtype)
            got = _host_argmax(exe, bits, offset)
            np.testing.assert_array_equal(got, np.argmax(_values(bits, dtype), axis=-1), f"{cols} {kind}")
    bits = _bits(_inputs((1, 128256), 7, "ties"), dtype)  # a vocabulary's row: the lowest of many equal maxima
    np.testing.assert_array_equal(_host_argmax(exe, bits, offset), np.argmax(_values(bits, dtype), axis=-1))
