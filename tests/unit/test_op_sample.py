"""The sample op (ops/sample.py, sample.cuh, philox.cuh): Philox against Random123's known answers, in NumPy and as
philox.cuh compiled for the host; the reference's draws against an independent sort-based implementation of the
intended distribution (chi-square over many draws, and never a column outside the kept set); the greedy settings
(top_k=1, temperature 0, a tiny top_p) equal to argmax; reproducible draws that change with the step; plans run tile
by tile to the reference; the kernel compiled for sm_90 and sm_90a with no stack; sample.cuh itself run on the host
(tests/unit/cuda_host) drawing what the reference draws but where rounding decides; every hostile argument refused.
tests/gpu/test_op_sample.py runs it on a GPU."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import lower
from ark_runtime.model import Model, ModelError
from ark_runtime.ops.sample import boundary_margin, check_args, sample_rows, scale
from ark_runtime.philox import philox4x32, sample_uniform
from ark_runtime.plan import choose_variants
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from tests.unit.cuda_host.build import build_on_host

NEAR = 1e-5  # a draw made otherwise than the reference's lies this near a boundary, relative to the kept mass

# Random123's kat_vectors: philox4x32 rounds, counter (4 words), key (2 words) -> the 4 words out
KAT = [(7, "00000000 00000000 00000000 00000000", "00000000 00000000", "5f6fb709 0d893f64 4f121f81 4f730a48"),
       (7, "ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "5207ddc2 45165e59 4d8ee751 8c52f662"),
       (7, "243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "4dfccaba 190a87f0 c47362ba b6b5242a"),
       (10, "00000000 00000000 00000000 00000000", "00000000 00000000", "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
       (10, "ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "408f276d 41c83b0e a20bc7c6 6d5451fd"),
       (10, "243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "d16cfe09 94fdcceb 5001e420 24126ea1")]


def _words(text: str) -> list[int]:
    return [int(w, 16) for w in text.split()]


# --- Philox --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rounds", "counter", "key", "want"), KAT)
def test_numpy_philox_gives_random123s_known_answers(rounds, counter, key, want):
    assert philox4x32(_words(counter), _words(key), rounds).tolist() == _words(want)


def test_numpy_philox_broadcasts_counters_against_one_key():
    counters = np.array([_words(c) for _, c, _, _ in KAT[3:]])
    got = philox4x32(counters, _words(KAT[3][2]))
    assert got.shape == (3, 4) and got[0].tolist() == _words(KAT[3][3])
    assert got[1].tolist() == philox4x32(_words(KAT[4][1]), _words(KAT[3][2])).tolist()


def test_the_uniform_numbers_are_multiples_of_2_to_the_minus_24_in_0_1_and_look_uniform():
    u = sample_uniform(12345, np.arange(100_000) % 977, np.arange(100_000) // 977)
    assert ((u >= 0) & (u < 1)).all() and (u * 2 ** 24 == np.floor(u * 2 ** 24)).all()
    counts = np.bincount((u * 50).astype(int), minlength=50)
    assert _chi2(counts, np.full(50, len(u) / 50)) < _chi2_bound(49)
    assert sample_uniform(1, 5, 3) != sample_uniform(2, 5, 3) != sample_uniform(1, 6, 3) != sample_uniform(1, 5, 4)
    assert sample_uniform(1 << 63, -1, 0) == sample_uniform(1 << 63, 0xFFFFFFFF, 0)  # a step as its uint32


# --- the host build of sample.cuh / philox.cuh -----------------------------------------------------------------------
def _host(dtype: str, cols: int, each: bool, tmp_path_factory) -> Path:
    """sample_on_host.cpp built for one (dtype, cols, step per row) with the system's C++ compiler."""
    ctype = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}[dtype]
    return build_on_host("sample_on_host.cpp", {"HOST_DTYPE": ctype, "HOST_COLS": str(cols),
                                                "HOST_STEP_EACH": str(each).lower()}, tmp_path_factory)


def _host_run(exe: Path, args: list, stdin: str) -> list[str]:
    done = subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:-1]


def test_philox_cuh_on_the_host_gives_the_known_answers_and_numpys_uniform_numbers(tmp_path_factory):
    exe = _host("fp32", 8, False, tmp_path_factory)
    for rounds in (7, 10):
        cases = [k for k in KAT if k[0] == rounds]
        got = _host_run(exe, ["philox", rounds], "".join(f"{c} {k}\n" for _, c, k, _ in cases))
        assert [_words(line) for line in got] == [_words(want) for *_, want in cases]
    rng = np.random.default_rng(0)
    seeds = [0, 1, (1 << 64) - 1, 1 << 32, *(int(v) * 2 + 1 for v in rng.integers(0, 1 << 63, 60))]
    triples = [(s, int(rng.integers(0, 1 << 32)), int(rng.integers(0, 1 << 20))) for s in seeds for _ in range(5)]
    got = _host_run(exe, ["uniform"], "".join(f"{s} {t} {r}\n" for s, t, r in triples))
    want = [int(sample_uniform(s, t, r) * 2 ** 24) for s, t, r in triples]
    assert list(map(int, got)) == want


def _bits(dtype: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x as the dtype's bits and as the values they hold (float64)."""
    from ark_runtime.host_values import from_bits, to_bits

    t = Model("b").input("x", x.shape, dtype)
    raw = to_bits(t, x)
    return raw.view(np.uint16 if raw.itemsize == 2 else np.uint32), from_bits(t, raw).astype(np.float64)


def _float_bits(v: float) -> int:
    return int(np.array([v], np.float32).view(np.uint32)[0])


def _host_sample(exe: Path, raw: np.ndarray, steps: np.ndarray, seed: int, temperature: float, top_k: int,
                 top_p: float) -> np.ndarray:
    rows = raw.shape[0]
    s, s_lo = scale(temperature)
    args = ["sample", rows, rows // 2, _float_bits(s), _float_bits(s_lo), top_k, _float_bits(top_p), seed]
    text = " ".join(map(str, steps.tolist())) + "\n" + " ".join(map(str, raw.ravel().tolist())) + "\n"
    return np.array(list(map(int, _host_run(exe, args, text))))


def _logits(shape, rng, kind: str) -> np.ndarray:
    rows, cols = shape
    if kind == "ties":  # few values: ties at every threshold
        return rng.integers(-3, 4, shape).astype(float)
    x = rng.standard_normal(shape) * rng.choice([0.3, 2.0, 5.0], (rows, 1))
    if kind == "specials":
        x[rng.random(shape) < 0.1] = -np.inf
        x[0] = -np.inf
        if rows > 2:
            x[1, cols // 2] = np.nan
            x[2, cols - 1] = np.inf
        x[rng.random(shape) < 0.05] = 0.0
        x[rng.random(shape) < 0.05] = -0.0
    return x


HOST_CASES = [  # dtype, cols (16-byte pieces unless odd), step per row, logits, temperature, top_k, top_p
    ("fp32", 1000, True, "normal", 1.0, 0, 1.0),
    ("fp32", 1000, False, "ties", 0.7, 50, 0.9),
    ("fp32", 37, True, "specials", 1.3, 0, 0.8),
    ("bf16", 1000, True, "ties", 1.0, 7, 1.0),
    ("bf16", 4096, False, "normal", 0.5, 0, 0.95),
    ("bf16", 999, True, "specials", 2.0, 300, 0.5),
    ("fp16", 264, True, "normal", 1.0, 264, 1e-6),
    ("fp16", 33, False, "ties", 1e-30, 0, 1.0),
    ("fp16", 3, True, "normal", 1e5, 2, 1.0),
    ("bf16", 128256, True, "normal", 1.0, 50, 0.9),
    ("fp32", 4097, True, "ties", 1.0, 2000, 0.9),  # more kept than the shared-memory list holds: read from the row
    ("bf16", 2048, False, "ties", 0.8, 1024, 0.7),  # the list full
    ("fp16", 2000, True, "specials", 0.9, 1025, 0.99),
]


@pytest.mark.parametrize(("dtype", "cols", "each", "kind", "temperature", "top_k", "top_p"), HOST_CASES)
def test_sample_cuh_on_the_host_draws_the_references_columns(dtype, cols, each, kind, temperature, top_k, top_p,
                                                             tmp_path_factory):
    """The template itself (select, ordered finds, their rounding fallbacks, both loaders, two tiles of rows) run on
    the host: every row's draw is the reference's, but where the reference's lies within rounding of a boundary."""
    rng = np.random.default_rng(cols + top_k)
    rows = 3 if cols > 100_000 else 24
    raw, held = _bits(dtype, _logits((rows, cols), rng, kind))
    steps = rng.integers(0, 1 << 31, rows if each else 1)
    seed = int(rng.integers(0, 1 << 62)) * 4 + 3
    exe = _host(dtype, cols, each, tmp_path_factory)
    got = _host_sample(exe, raw, steps, seed, temperature, top_k, top_p)
    want = sample_rows(held, steps, seed, temperature, top_k, top_p)
    margin = boundary_margin(held, steps, seed, temperature, top_k, top_p)
    differ = np.flatnonzero(got != want)
    assert (margin[differ] < NEAR).all(), (differ, got[differ], want[differ], margin[differ])
    assert len(differ) <= 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fp32", "bf16"]), st.sampled_from([9, 1000]), st.sampled_from(["normal", "ties", "specials"]),
       st.sampled_from([0.0, 1e-3, 0.6, 1.0, 3.0]), st.integers(0, 1000), st.sampled_from([1.0, 0.95, 0.5, 0.05]),
       st.integers(0, (1 << 64) - 1), st.integers(0, 1 << 20))
def test_sample_cuh_on_the_host_draws_the_references_columns_for_any_setting(tmp_path_factory, dtype, cols, kind,
                                                                            temperature, top_k, top_p, seed,
                                                                            data_seed):
    rng = np.random.default_rng(data_seed)
    raw, held = _bits(dtype, _logits((8, cols), rng, kind))
    steps = rng.integers(0, 1 << 31, 8)
    top_k = min(top_k, cols)
    if temperature == 0.0:
        top_k, top_p = 0, 1.0  # the argmax template: not sample.cuh
        temperature = 1.0
    exe = _host(dtype, cols, True, tmp_path_factory)
    got = _host_sample(exe, raw, steps, seed, temperature, top_k, top_p)
    want = sample_rows(held, steps, seed, temperature, top_k, top_p)
    differ = np.flatnonzero(got != want)
    assert (boundary_margin(held, steps, seed, temperature, top_k, top_p)[differ] < NEAR).all(), (got, want)


# --- the reference against the intended distribution -------------------------------------------------------------------
def intended(x: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The distribution, written independently of ops/sample.py: sort, cut, renormalize (float64, one row)."""
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))
    keep = order[:top_k] if top_k else order
    w = np.exp((x[keep] - x[keep[0]]) / temperature)
    w = w / w.sum()
    n, acc = 0, 0.0
    while n < len(keep) and (n == 0 or acc < top_p * (1 - 1e-12)):
        acc += w[n]
        n += 1
    out = np.zeros(len(x))
    out[keep[:n]] = w[:n] / w[:n].sum()
    return out


def _chi2(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def _chi2_bound(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty's chi-square quantile at about 1 - 1e-6 (z standard deviations)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.6, 0, 1.0), (1.0, 5, 1.0),
                                                           (1.5, 0, 0.7), (0.8, 8, 0.6), (3.0, 12, 0.95),
                                                           (1.0, 20, 1.0)])
def test_draws_follow_the_intended_distribution(temperature, top_k, top_p):
    rng = np.random.default_rng(7)
    x = np.round(rng.standard_normal(20) * 1.5, 1)
    x[3] = x[11]  # a tie
    n = 40_000
    drawn = sample_rows(np.broadcast_to(x, (n, 20)), np.arange(n) % 613, 99, temperature, top_k, top_p,
                        rows=np.arange(n) // 613)
    counts = np.bincount(drawn, minlength=20)
    p = intended(x, temperature, top_k, top_p)
    assert (counts[p == 0] == 0).all(), "a column outside the kept set was drawn"
    live = p > 0
    assert _chi2(counts[live], n * p[live]) < _chi2_bound(max(1, int(live.sum()) - 1))


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.floats(0.05, 20), st.integers(0, 40), st.floats(0.01, 1.0), st.integers(0, 3),
       st.sampled_from(["normal", "ties", "specials"]))
def test_every_draw_is_in_the_intended_support(cols, temperature, top_k, top_p, seed, kind):
    rng = np.random.default_rng(seed)
    x = _logits((6, cols), rng, kind)
    top_k = min(top_k, cols)
    drawn = sample_rows(x, np.arange(6), seed, temperature, top_k, top_p)
    for r in range(6):
        if not np.isfinite(x[r].max()):
            assert drawn[r] == np.argmax(x[r])
        else:
            assert intended(x[r], temperature, top_k, top_p)[drawn[r]] > 0 or boundary_margin(
                x[r:r + 1], [r], seed, temperature, top_k, top_p, rows=[r])[0] < 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(0, 3), st.sampled_from(["normal", "ties", "specials"]), st.floats(0.1, 5))
def test_greedy_settings_are_the_argmax(cols, seed, kind, temperature):
    x = _logits((5, cols), np.random.default_rng(seed), kind)
    want = np.argmax(x, axis=-1)
    for t, k, p in ((temperature, 1, 1.0), (0.0, 0, 1.0), (0.0, cols, 0.3), (temperature, 0, 1e-12),
                    (temperature, min(3, cols), 1e-12)):
        np.testing.assert_array_equal(sample_rows(x, np.arange(5), seed, t, k, p), want, err_msg=f"{t} {k} {p}")


def test_draws_are_reproducible_and_change_with_the_step_and_the_seed():
    x = np.zeros((64, 1000))
    a = sample_rows(x, np.full(64, 3), 5)
    assert (a == sample_rows(x, np.full(64, 3), 5)).all()
    assert (a == sample_rows(x, [3], 5)).all()  # one step for all rows
    assert (a != sample_rows(x, np.full(64, 4), 5)).mean() > 0.9
    assert (a != sample_rows(x, np.full(64, 3), 6)).mean() > 0.9
    assert len(set(a.tolist())) > 50  # rows draw apart


def test_the_boundary_margin_is_zero_on_a_boundary_and_inf_for_greedy_rows():
    x = np.log(np.array([[1.0, 1.0]]))
    u = sample_uniform(5, 0, 0)
    m = boundary_margin(x, [0], 5)[0]
    assert m == pytest.approx(min(abs(u - 0.5), abs(u - 1.0)))  # cumulative sums 1 and 2 of a kept mass of 2
    assert boundary_margin(x, [0], 5, temperature=0.0)[0] == math.inf
    assert boundary_margin(np.array([[1.0, np.nan]]), [0], 5)[0] == math.inf


# --- the op in a model --------------------------------------------------------------------------------------------------
def test_the_output_is_int32_with_the_last_axis_kept_and_the_attributes_stored():
    m = Model("s")
    y = m.sample(m.input("logits", (2, 3, 32000), "bf16"), m.input("pos", (6,), "int32"), seed=1, top_k=50)
    assert (y.shape, y.dtype) == ((2, 3, 1), "int32")
    assert dict(m.ops[0].attrs) == {"seed": 1, "temperature": 1.0, "top_k": 50, "top_p": 1.0}


HOSTILE = [
    (dict(seed=-1), "seed=-1 must be an int in 0 .. 2\\*\\*64 - 1"),
    (dict(seed=1 << 64), "seed=18446744073709551616 must be an int"),
    (dict(seed=True), "seed=True must be an int"),
    (dict(seed=1.0), "seed=1.0 must be an int"),
    (dict(seed="7"), "seed='7' must be an int"),
    (dict(seed=1, temperature=-0.5), "temperature=-0.5 must be 0 \\(greedy: the argmax\\) or a number in \\(0, 1e\\+06\\]"),
    (dict(seed=1, temperature=float("nan")), "temperature=nan must be 0"),
    (dict(seed=1, temperature=float("inf")), "temperature=inf must be 0"),
    (dict(seed=1, temperature=2e6), "temperature=2000000.0 must be 0"),
    (dict(seed=1, temperature="hot"), "temperature='hot' must be 0"),
    (dict(seed=1, temperature=None), "temperature=None must be 0"),
    (dict(seed=1, top_k=-1), "top_k=-1 must be an int in 0 .. 100 \\(the logits' last axis; 0 keeps every element\\)"),
    (dict(seed=1, top_k=101), "top_k=101 must be an int in 0 .. 100"),
    (dict(seed=1, top_k=2.0), "top_k=2.0 must be an int"),
    (dict(seed=1, top_k=False), "top_k=False must be an int"),
    (dict(seed=1, top_p=0.0), "top_p=0.0 must be a number in \\(0, 1\\] \\(1 keeps every element\\)"),
    (dict(seed=1, top_p=1.5), "top_p=1.5 must be a number in \\(0, 1\\]"),
    (dict(seed=1, top_p=-0.1), "top_p=-0.1 must be a number"),
    (dict(seed=1, top_p=float("nan")), "top_p=nan must be a number"),
    (dict(seed=1, top_p=True), "top_p=True must be a number"),
]


@pytest.mark.parametrize(("kw", "says"), HOSTILE)
def test_bad_arguments_are_refused_naming_the_argument(kw, says):
    m = Model("bad")
    x, pos = m.input("x", (4, 100)), m.input("pos", (1,), "int32")
    with pytest.raises(ModelError, match=f"sample: {says}"):
        m.op("sample", x, pos, **kw)
    with pytest.raises(ModelError, match=f"sample: {says}"):
        sample_rows(np.zeros((4, 100)), [0], **{"seed": 1, **kw})
    assert m.ops == []


def test_bad_tensors_are_refused_naming_them():
    m = Model("bad")
    x, pos, ids = m.input("x", (4, 100)), m.input("pos", (1,), "int32"), m.input("ids", (4, 100), "int32")
    with pytest.raises(ModelError, match="sample: ids is int32; the op takes fp32, fp16, bf16"):
        m.sample(ids, pos, seed=1)
    with pytest.raises(ModelError, match=r"sample: the step x must be an int32 tensor of one element or one per row "
                                         r"of the logits \(4\), not fp32 \(4, 100\)"):
        m.sample(x, x, seed=1)
    with pytest.raises(ModelError, match=r"the step p3 must be an int32 tensor .* not int32 \(3,\)"):
        m.sample(x, m.input("p3", (3,), "int32"), seed=1)
    with pytest.raises(ModelError, match="sample: give seed=, an int in 0 .. 2\\*\\*64 - 1"):
        m.op("sample", x, pos)
    with pytest.raises(ModelError, match="sample takes no argument top_n"):
        m.op("sample", x, pos, seed=1, top_n=3)
    with pytest.raises(ModelError, match=r"sample takes 2 tensor\(s\), not 1"):
        m.op("sample", x, seed=1)
    with pytest.raises(TypeError):
        m.sample(x, pos, 1)  # the seed is keyword-only
    assert m.ops == []


def test_check_args_keeps_numpy_numbers_as_python_ones():
    got = check_args(10, np.uint64((1 << 64) - 1), np.float32(0.5), np.int64(3), np.float64(0.25))
    assert got == {"seed": (1 << 64) - 1, "temperature": 0.5, "top_k": 3, "top_p": 0.25}
    assert all(type(v) in (int, float) for v in got.values())


def _plan_matches(m, sms, ins, seed=0, iterations=1):
    lw = lower(m, DeviceSpec(num_sms=sms), cache=False)
    want = evaluate(m, ins, iterations)
    got = run_plan(lw.plan, lw.model, ins, seed=seed, iterations=iterations)
    for src, dst in zip(m.outputs, lw.model.outputs):
        np.testing.assert_array_equal(got[dst], want[src])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), max_size=2), st.integers(1, 700), st.integers(1, 12),
       st.sampled_from(["fp32", "fp16", "bf16"]), st.sampled_from(["normal", "ties", "specials"]),
       st.booleans(), st.sampled_from([(1.0, 0, 1.0), (0.7, 5, 0.9), (0.0, 0, 1.0), (2.0, 0, 0.5)]),
       st.integers(0, 3))
def test_random_samples_run_tile_by_tile_to_the_reference(lead, cols, sms, dtype, kind, each, cfg, seed):
    shape = (*lead, cols)
    rows = math.prod(lead)
    m = Model("s")
    x = m.input("x", shape, dtype)
    pos = m.state("pos", (rows if each else 1,), "int32")
    t, k, p = cfg
    y = m.sample(x, pos, seed=seed, temperature=t, top_k=min(k, cols), top_p=p)
    m.output(m.embedding(m.input("table", (cols, 4), dtype), y))  # the drawn ids read further on
    m.count(pos)
    rng = np.random.default_rng(seed)
    ins = {"x": _logits((rows, cols), rng, kind).reshape(shape), "pos": rng.integers(0, 99, rows if each else 1),
           "table": rng.standard_normal((cols, 4))}
    _plan_matches(m, sms, ins, seed, iterations=2)


def test_a_tile_that_does_not_read_the_step_is_caught(monkeypatch):
    from ark_runtime.ops import sample

    real = sample.Sample.tiles

    def no_step(self, tm, op, v):
        real(self, tm, op, v)
        tm.tiles[:] = [t.__class__(t.id, t.op, t.index, t.writes, t.reads[:1], t.bytes, t.flops) for t in tm.tiles]

    monkeypatch.setattr(sample.Sample, "tiles", no_step)
    m = Model("s")
    x, pos = m.input("x", (40, 64)), m.input("pos", (40,), "int32")
    m.output(m.sample(x, pos, seed=3))
    with pytest.raises(AssertionError, match="not equal"):
        _plan_matches(m, 4, {"x": np.zeros((40, 64)), "pos": np.arange(40)})


def test_the_greedy_settings_choose_the_argmax_template():
    m = Model("s")
    x, pos = m.input("x", (2, 5000), "bf16"), m.input("pos", (1,), "int32")
    for kw in (dict(temperature=0.0), dict(top_k=1, top_p=0.5), dict(temperature=0.7, top_k=40)):
        m.output(m.sample(x, pos, seed=1, **kw))
    templates = [v["template"] for v in choose_variants(m, DeviceSpec(num_sms=132))]
    assert templates == ["argmax_rows", "argmax_rows", "sample_rows"]


def _stack_frames(text: str, arch: str) -> dict[str, int]:
    from cupy.cuda import nvrtc

    from driver.gpu import compile

    prog = nvrtc.createProgram(text, "ark_kernel.cu", [], [])
    opts = compile.options((f"-I{INCLUDE_DIR}", "-ftz=true", "--ptxas-options=-v"))
    nvrtc.compileProgram(prog, [*opts, f"--gpu-architecture={arch}"])
    log = nvrtc.getProgramLog(prog)
    log = log.decode() if isinstance(log, bytes) else log
    import re

    found = re.findall(r"Function properties for (\S+)\s*\n\s*ptxas\s*\.\s*(\d+) bytes stack frame, (\d+) bytes spill "
                       r"stores, (\d+) bytes spill loads", log)
    return {name: int(a) + int(b) + int(c) for name, a, b, c in found}


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_the_kernel_compiles_with_no_stack(dtype, arch):
    """Llama-3's vocabulary read in 16-byte pieces with a step per row, an odd width element by element with one
    step, a temperature whose scale overflows to inf, and the greedy settings (the argmax template)."""
    pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")
    m = Model(f"samples-{dtype}")
    big, odd = m.input("big", (4, 128256), dtype), m.input("odd", (2, 3, 1001), dtype)
    pos, one = m.input("pos", (4,), "int32"), m.input("one", (1,), "int32")
    m.output(m.sample(big, pos, seed=(1 << 64) - 1, temperature=0.7, top_k=50, top_p=0.9),
             m.sample(odd, one, seed=0, temperature=1e-39), m.sample(odd, one, seed=2, temperature=1.2, top_p=0.8),
             m.sample(big, one, seed=2, temperature=0.0))
    lw = lower(m, DeviceSpec(num_sms=132), cache=False)
    text = lw.source.text
    assert text.count("ark::sample_rows<") == 3 and text.count("ark::argmax_rows<") == 1
    assert "ark::SampleArgs<0, 0x7f800000u, 0x00000000u, 0x3f800000u, 0x0ull>" in text  # temperature 1e-39: s is inf
    frames = _stack_frames(text, arch)
    assert frames.get("ark_loop") == 0 and not {f: s for f, s in frames.items() if s}, frames
