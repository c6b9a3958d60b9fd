"""`arkdma bench models` without a GPU: its arguments and their refusals, the cases it picks, the checks (greedy tokens
against eager's with near ties, outputs within bf16 tolerance), the bandwidth arithmetic, and whole runs through the
command with a fake measurer: the rows' keys, a method that fails or runs out of time recorded while the run goes on,
each row saved as it is measured, the table, the JSON and the plot. The measuring itself runs in
tests/gpu/test_bench_models.py."""

from __future__ import annotations

import contextlib
import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from arkdma_cli import bench as cli
from arkdma_cli.main import build_parser, main
from bench import models
from bench.model_arkdma import sequences, step_ms
from bench.models import CASES, GROUPS, Case, Kind, Method, ModelsConfig, Outcome, Work

KEYS = {"model", "case", "arkdma_ms", "eager_ms", "static_ms", "compiled_ms", "pct_hbm", "arkdma_p10_ms",
        "arkdma_p90_ms", "latency_ms", "tokens_equal", "tokens_compared", "near_ties", "divergences", "errors", "ok"}


# --- arguments -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--cases", "decode-b1,decode-b2"], "unknown case(s) decode-b2; choose from decode-b1"),
    (["--cases", ""], "unknown case(s) (none given)"),
    (["--cases", ",,"], "unknown case(s) (none given)"),
    (["--cases", "Decode"], "unknown case(s) Decode"),
    (["--row-timeout", "0"], "want a time in seconds above 0"),
    (["--row-timeout", "nan"], "want a time in seconds above 0"),
    (["--row-timeout", "soon"], "want a time in seconds above 0"),
    (["--from-json", "no/such/file.json"], "does not exist"),
])
def test_bad_arguments_are_usage_errors_that_say_what_was_wrong(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "models", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_folder_for_the_json_or_the_plot_is_refused(tmp_path, capsys):
    for flag in ("--json", "--plot"):
        with pytest.raises(SystemExit):
            main(["bench", "models", flag, str(tmp_path)])
        assert "is a directory, not a file" in capsys.readouterr().err


def test_a_file_that_is_no_run_is_refused_with_a_message(tmp_path, capsys):
    other = tmp_path / "loop.json"
    other.write_text(json.dumps({"device": "GPU", "rows": [{"case": "a"}]}))
    assert main(["bench", "models", "--from-json", str(other)]) == 1
    assert "is not a result of `arkdma bench models --json`" in capsys.readouterr().err


def test_without_a_gpu_the_command_says_so(capsys):
    from driver.gpu.launch import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here")
    assert main(["bench", "models", "--quick", "--cases", "decode-b1"]) == 1
    assert "the benchmarks run on a CUDA GPU" in capsys.readouterr().err


NAMES = [c.name for c in CASES] + list(GROUPS)


@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=12))
def test_cases_come_in_the_benchmarks_order_each_once(names):
    picked = models.pick_cases(",".join(names))
    want = {c.name for n in names for c in GROUPS.get(n, [c for c in CASES if c.name == n])}
    assert [c.name for c in picked] == [c.name for c in CASES if c.name in want]


@given(st.text(max_size=40))
def test_any_text_is_a_set_of_cases_or_one_clear_error(text):
    try:
        picked = models.pick_cases(text)
    except models.CaseError as exc:
        assert str(exc).startswith("unknown case(s) ") and "choose from decode-b1" in str(exc)
        return
    assert picked and set(picked) <= set(CASES)


def test_the_cases_are_the_issues():
    by = {c.name: c for c in CASES}
    assert [(c.batch, c.tokens) for c in GROUPS["decode"]] == [(1, 32), (8, 32)]
    assert [c.tokens for c in GROUPS["prefill"]] == [128, 512]
    assert {(c.batch, c.tokens) for c in GROUPS["bert"]} == {(1, 128), (1, 384), (8, 128), (8, 384)}
    assert by["decode-b8"].kind is Kind.DECODE and ModelsConfig().new_tokens == 128


@pytest.mark.parametrize("bad", [dict(cases=()), dict(new_tokens=1), dict(new_tokens=10), dict(row_timeout_s=0)])
def test_a_config_that_cannot_run_is_refused(bad):
    with pytest.raises(ValueError):
        ModelsConfig(**bad)


# --- checks and arithmetic -----------------------------------------------------------------------------------------
def test_tokens_equal_to_the_reference_all_count():
    ref = [[5, 6, 7], [1, 2, 3]]
    got = models.compare_tokens(ref, ref, [[0.5] * 3] * 2, 0.02)
    assert (got.equal, got.compared, got.divergences, got.near_ties, got.ok) == (6, 6, 0, 0, True)


@settings(max_examples=200)
@given(data=st.data(), batch=st.integers(1, 4), steps=st.integers(1, 12))
def test_a_divergence_counts_up_to_where_it_parts_and_is_a_tie_only_at_a_small_gap(data, batch, steps):
    ref = [data.draw(st.lists(st.integers(0, 9), min_size=steps, max_size=steps)) for _ in range(batch)]
    margins = [data.draw(st.lists(st.floats(0, 1), min_size=steps, max_size=steps)) for _ in range(batch)]
    tie = data.draw(st.floats(0, 0.5))
    where = [data.draw(st.one_of(st.none(), st.integers(0, steps - 1))) for _ in range(batch)]
    ours = []
    for b in range(batch):
        seq = list(ref[b])
        if where[b] is not None:
            seq[where[b]] = seq[where[b]] + 10  # a token the reference never has
            seq[where[b] + 1:] = data.draw(st.lists(st.integers(0, 9), min_size=steps - where[b] - 1,
                                                    max_size=steps - where[b] - 1))
        ours.append(seq)
    got = models.compare_tokens(ours, ref, margins, tie)
    parted = [b for b in range(batch) if where[b] is not None]
    assert got.compared == batch * steps
    assert got.equal == sum(steps if where[b] is None else where[b] for b in range(batch))
    assert got.divergences == len(parted)
    assert got.near_ties == sum(margins[b][where[b]] <= tie for b in parted)
    assert got.ok == all(margins[b][where[b]] <= tie for b in parted)


@pytest.mark.parametrize(("ours", "ref", "margins"), [
    ([[1, 2]], [[1, 2], [3, 4]], [[0, 0], [0, 0]]),
    ([[1, 2]], [[1, 2, 3]], [[0, 0, 0]]),
    ([[1, 2]], [[1, 2]], [[0]]),
])
def test_token_lists_of_different_shapes_are_refused(ours, ref, margins):
    with pytest.raises(ValueError):
        models.compare_tokens(ours, ref, margins, 0.02)


def test_outputs_are_compared_by_the_largest_error_of_each_outputs_scale():
    ref = {"a": np.array([[10.0, -20.0]]), "b": np.array([0.5, 0.25])}
    ours = {"a": np.array([10.5, -20.0]), "b": np.array([0.5, 0.35]), "extra": np.zeros(3)}
    assert models.max_rel_err(ours, ref) == pytest.approx(max(0.5 / 20, 0.1 / 1.0))
    assert models.max_rel_err({"a": np.array([np.nan, 0.0]), "b": ref["b"]}, ref) == math.inf
    with pytest.raises(ValueError, match="no output to compare"):
        models.max_rel_err({"c": np.zeros(2)}, ref)
    with pytest.raises(ValueError, match="against the reference's"):
        models.max_rel_err({"a": np.zeros(3)}, ref)


def test_percent_of_the_read_bandwidth():
    # 2.47 GB of weights read at 4,256 GB/s take 0.58 ms: all of it
    assert models.pct_of_bandwidth(2_470_000_000, 0.5804, 4256.0) == pytest.approx(100.0, rel=1e-3)
    assert models.pct_of_bandwidth(1_000_000_000, 1.0, 2000.0) == pytest.approx(50.0)
    for bad in ((None, 1.0, 1.0), (1, None, 1.0), (1, 1.0, None), (1, 0.0, 1.0), (1, 1.0, 0.0)):
        assert models.pct_of_bandwidth(*bad) is None


@given(batch=st.integers(1, 16), prompt=st.integers(1, 600), steps=st.integers(1, 300))
def test_kv_bytes_a_step_reads_are_the_mean_over_the_steps(batch, prompt, steps):
    from bench.model_shapes import LLAMA_1B, kv_bytes_per_step

    row = LLAMA_1B.kv_heads * LLAMA_1B.head_dim * 2
    total = sum(batch * 2 * LLAMA_1B.layers * row * (prompt + i + 1) for i in range(steps))
    assert kv_bytes_per_step(LLAMA_1B, batch, prompt, steps) == total // steps


def test_kv_bytes_refuse_empty_runs():
    from bench.model_shapes import LLAMA_1B, kv_bytes_per_step

    with pytest.raises(ValueError):
        kv_bytes_per_step(LLAMA_1B, 1, 32, 0)


@given(batch=st.integers(1, 8), steps=st.integers(2, 20), data=st.data())
def test_the_rings_rows_become_each_sequences_tokens(batch, steps, data):
    texts = [data.draw(st.lists(st.integers(0, 999), min_size=steps + 1, max_size=steps + 1)) for _ in range(batch)]
    first = [t[0] for t in texts]
    made = [texts[b][s + 1] for s in range(steps) for b in range(batch)]  # a step's rows, sequence by sequence
    assert sequences(first, made, batch, steps) == [t[:steps] for t in texts]
    with pytest.raises(ValueError):
        sequences(first[:-1] if batch > 1 else [], made, batch, steps)


def test_a_step_is_the_span_of_the_arrivals_over_the_gaps():
    ms, spread = step_ms([1.0, 1.001, 1.002, 1.006])
    assert ms == pytest.approx(2.0)
    assert spread.p10 <= spread.median <= spread.p90 and spread.median == pytest.approx(1.0)
    with pytest.raises(ValueError):
        step_ms([1.0])


# --- whole runs with a fake measurer ----------------------------------------------------------------------------
def _decode_outcomes(batch: int, steps: int, part_at: int | None = None, gap: float = 0.5):
    ref = [[(7 * b + s) % 50 for s in range(steps)] for b in range(batch)]
    ours = [list(r) for r in ref]
    if part_at is not None:
        ours[0][part_at] += 100
    margins = [[gap] * steps for _ in range(batch)]
    return (Outcome(9.0, tokens=ref, margins=margins),
            Outcome(0.8, 0.75, 0.9, gpu_ms=0.78, latency_ms=0.95, tokens=ours))


class FakeMeasurer:
    """Figures made up from the case; `fail` (case, method) -> an exception to raise; `slow` (case, method) ->
    seconds to sleep; `wrong` case names whose arkdma tokens part from eager's at a wide gap."""

    def __init__(self, config: ModelsConfig, fail=None, slow=None, wrong=(), interrupt_at=None):
        self.config, self.fail, self.slow, self.wrong = config, fail or {}, slow or {}, set(wrong)
        self.interrupt_at = interrupt_at
        self.prepared, self.closed = [], []

    def device(self):
        return "Fake H200"

    def versions(self):
        return {"torch": "2.11", "transformers": "5.17"}

    def read_bandwidth(self):
        return 4.0e12

    def model(self, case):
        return "bert-fake" if case.kind is Kind.BERT else "llama-fake"

    def _call(self, case: Case, method: Method, outcome: Outcome):
        def measure():
            if (case.name, method) in self.slow:
                time.sleep(self.slow[(case.name, method)])
            if (case.name, method) in self.fail:
                raise self.fail[(case.name, method)]
            return outcome
        return measure

    @contextlib.contextmanager
    def prepare(self, case):
        if case.name == self.interrupt_at:
            raise KeyboardInterrupt
        self.prepared.append(case.name)
        ms = case.batch * case.tokens / 100
        if case.kind is Kind.DECODE:
            eager, ark = _decode_outcomes(case.batch, self.config.new_tokens,
                                          part_at=3 if case.name in self.wrong else None)
            outcomes = {Method.EAGER: eager, Method.STATIC: Outcome(3.0), Method.ARKDMA: ark,
                        Method.COMPILED: Outcome(1.5)}
        else:
            out = np.linspace(-2, 2, 64).reshape(8, 8)
            outcomes = {Method.EAGER: Outcome(ms * 3, outputs={"x": out}),
                        Method.ARKDMA: Outcome(ms, ms * 0.9, ms * 1.2, latency_ms=ms * 1.5, outputs={"x": out * 1.01}),
                        Method.COMPILED: Outcome(ms * 1.1)}
        try:
            yield Work(2_000_000_000, {m: self._call(case, m, o) for m, o in outcomes.items()})
        finally:
            self.closed.append(case.name)


def _args(tmp_path, *extra):
    return build_parser().parse_args(["bench", "models", "--json", str(tmp_path / "m.json"), *extra])


def _run(tmp_path, measurer_of, *extra):
    args = _args(tmp_path, *extra)
    config = models.ModelsConfig(cases=args.cases or CASES, row_timeout_s=args.row_timeout,
                                 compile=not args.no_compile)
    measurer = measurer_of(config)
    console = Console(width=260, record=True)
    rc = cli.run_models(args, console, measurer=measurer)
    return rc, json.loads((tmp_path / "m.json").read_text()), console.export_text(), measurer


def test_a_run_writes_every_row_with_the_keys_asked_for_a_table_and_a_plot_beside_the_json(tmp_path):
    rc, data, text, measurer = _run(tmp_path, FakeMeasurer)
    assert rc == 0
    assert data["device"] == "Fake H200" and data["complete"] and data["read_gbps"] == pytest.approx(4000.0)
    assert data["read_method"] == models.READ_METHOD and data["config"]["cases"] == [c.name for c in CASES]
    assert [r["case"] for r in data["rows"]] == [c.name for c in CASES]
    for r in data["rows"]:
        assert KEYS <= set(r), KEYS - set(r)
        assert r["errors"] == {} and r["ok"] is True
        assert set(r["seconds"]) >= {"setup", "eager", "arkdma", "compiled"}
    decode = data["rows"][0]
    assert decode["static_ms"] == 3.0 and decode["tokens_equal"] == decode["tokens_compared"] == 128
    assert decode["near_ties"] == decode["divergences"] == 0 and decode["latency_ms"] == 0.95
    assert decode["pct_hbm"] == pytest.approx(100 * 2e9 / 0.8e-3 / 4e12)
    assert decode["ratio_to_compiled"] == pytest.approx(0.8 / 1.5)
    bert = data["rows"][-1]
    assert bert["static_ms"] is None and bert["tokens_equal"] is None and bert["max_rel_err"] == pytest.approx(0.01)
    assert measurer.prepared == measurer.closed == [c.name for c in CASES]
    assert "decode-b8" in text and "bert-b8-s384" in text and "128/128 equal, 0 near-ties" in text
    assert "1.88" in text  # compiled / arkdma of decode: 1.5 / 0.8
    png = tmp_path / "m.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000


def test_a_failing_or_slow_method_is_recorded_and_the_run_goes_on(tmp_path):
    fail = {("decode-b1", Method.COMPILED): RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB"),
            ("prefill-128", Method.ARKDMA): ValueError("no tile fits")}
    slow = {("bert-b1-s128", Method.EAGER): 3.0}
    rc, data, text, _ = _run(tmp_path, lambda c: FakeMeasurer(c, fail=fail, slow=slow), "--row-timeout", "1")
    rows = {r["case"]: r for r in data["rows"]}
    assert len(rows) == len(CASES) and data["complete"]
    d = rows["decode-b1"]
    assert d["errors"] == {"compiled": "RuntimeError: CUDA out of memory."} and d["compiled_ms"] is None
    assert d["arkdma_ms"] == 0.8 and d["ratio_to_compiled"] is None and d["ok"] is True
    p = rows["prefill-128"]
    assert p["errors"] == {"arkdma": "ValueError: no tile fits"} and p["arkdma_ms"] is None and p["ok"] is None
    assert p["eager_ms"] is not None and p["compiled_ms"] is not None
    b = rows["bert-b1-s128"]
    assert b["errors"]["eager"].startswith("timed out") and b["seconds"]["eager"] < 2.5
    assert all(b["errors"][m].startswith("not run") for m in ("arkdma", "compiled"))
    assert rows["bert-b1-s384"]["errors"] == {} and rows["bert-b1-s384"]["ok"]
    assert rc == 1  # arkdma failed in a row
    assert "prefill-128" in text and "no tile fits" in text


def test_tokens_that_part_at_a_wide_gap_are_wrong_and_the_command_says_so(tmp_path):
    rc, data, text, _ = _run(tmp_path, lambda c: FakeMeasurer(c, wrong={"decode-b8"}), "--cases", "decode")
    b1, b8 = data["rows"]
    assert b1["ok"] is True and b8["ok"] is False
    assert (b8["tokens_equal"], b8["divergences"], b8["near_ties"]) == (8 * 128 - 125, 1, 0)
    assert rc == 1 and "1 WRONG" in text and "differs from PyTorch eager: decode-b8" in text


def test_a_near_tie_is_counted_and_is_no_error(tmp_path):
    def near(config):
        m = FakeMeasurer(config)
        m.prepare = lambda case, _p=m.prepare: _tie(_p(case), config)
        return m

    @contextlib.contextmanager
    def _tie(ctx, config):
        with ctx as work:
            eager, ark = _decode_outcomes(1, config.new_tokens, part_at=5, gap=0.001)
            yield Work(work.bytes_read, {**work.methods, Method.EAGER: lambda: eager, Method.ARKDMA: lambda: ark})

    rc, data, text, _ = _run(tmp_path, near, "--cases", "decode-b1")
    row = data["rows"][0]
    assert (row["tokens_equal"], row["divergences"], row["near_ties"], row["ok"]) == (5, 1, 1, True)
    assert rc == 0 and "5/128 equal, 1 near-tie" in text


def test_no_compile_leaves_the_compiled_column_empty_with_a_note(tmp_path):
    rc, data, _, _ = _run(tmp_path, FakeMeasurer, "--cases", "prefill-128", "--no-compile")
    row = data["rows"][0]
    assert rc == 0 and row["compiled_ms"] is None and "compiled" not in row["seconds"]
    assert any("--no-compile" in n for n in row["notes"])


def test_each_row_is_saved_as_it_is_measured_so_a_cut_off_run_keeps_its_rows(tmp_path, monkeypatch, capsys):
    """Through main: the GPU's measurer swapped for a fake that is interrupted (Ctrl-C) at the third case."""
    import bench.model_measure

    out = tmp_path / "m.json"
    seen = []
    real_save = models.save

    def save(result, path):
        real_save(result, path)
        seen.append(json.loads(path.read_text()))

    monkeypatch.setattr(cli, "_need_gpu", lambda: None)
    monkeypatch.setattr(models, "save", save)
    monkeypatch.setattr(bench.model_measure, "TorchMeasurer", lambda c: FakeMeasurer(c, interrupt_at="prefill-128"))
    assert main(["bench", "models", "--json", str(out)]) == 130
    assert [len(s["rows"]) for s in seen] == [1, 2] and not any(s["complete"] for s in seen)
    assert [r["case"] for r in json.loads(out.read_text())["rows"]] == ["decode-b1", "decode-b8"]
    assert "llama-fake decode-b1: arkdma 0.800 ms, compiled 1.500 ms" in capsys.readouterr().out


def test_a_saved_run_prints_and_plots_again_without_measuring(tmp_path):
    _, data, text, _ = _run(tmp_path, FakeMeasurer, "--cases", "decode-b1,bert")
    console = Console(width=260, record=True)
    args = build_parser().parse_args(["bench", "models", "--from-json", str(tmp_path / "m.json"),
                                      "--plot", str(tmp_path / "again.png")])
    assert cli.run_models(args, console) == 0
    again = console.export_text()
    table = lambda t: t[t.index("whole models"):t.index("plot:")]  # noqa: E731
    assert table(again) == table(text)
    assert (tmp_path / "again.png").stat().st_size > 5000
    assert models.ModelsResult.from_json(data).as_json() == data


def test_a_measurer_that_fails_to_build_a_case_or_the_bandwidth_leaves_a_row_of_errors(tmp_path):
    class Broken(FakeMeasurer):
        def read_bandwidth(self):
            raise RuntimeError("no memory for 4 GiB")

        @contextlib.contextmanager
        def prepare(self, case):
            if case.name == "bert-b8-s384":
                raise MemoryError("the module")
            with super().prepare(case) as work:
                yield work

    rc, data, text, _ = _run(tmp_path, Broken, "--cases", "bert")
    assert data["read_gbps"] is None and "no pct_hbm" in data["notes"][0]
    last = data["rows"][-1]
    assert last["errors"] == {"setup": "MemoryError: the module"} and last["arkdma_ms"] is None
    assert all(r["pct_hbm"] is None for r in data["rows"]) and data["rows"][0]["ok"]
    assert rc == 1


def test_time_limits_are_refused_unless_positive():
    from bench.time_limit import TimeLimitExceeded, time_limit

    for bad in (0, -1, math.nan, True, "5"):
        with pytest.raises(ValueError):
            with time_limit(bad):
                pass
    with pytest.raises(TimeLimitExceeded):
        with time_limit(0.05):
            time.sleep(1)
    with time_limit(math.inf):
        pass
