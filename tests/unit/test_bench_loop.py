"""`arkdma bench loop` without a GPU: its arguments, its table and plot from a result, the JSON keys the
runtime issue asks for. The measuring itself runs in tests/gpu/test_bench_loop.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from arkdma_cli.bench import loop_table
from arkdma_cli.main import main
from bench.loop import LoopResult, Row, plot


def _trips(ark: float, graph: float) -> dict:
    """A row's round-trip fields, as bench.loop.run fills them."""
    return {"roundtrip_p10_us": ark * 0.9, "roundtrip_p90_us": ark * 1.3, "graph_roundtrip_us": graph,
            "graph_roundtrip_p10_us": graph * 0.95, "graph_roundtrip_p90_us": graph * 1.1,
            "roundtrip_ratio": ark / graph, "go_path": "auto", "go_writes": {"stream": 1, "host": 220}}


def _result() -> LoopResult:
    return LoopResult("NVIDIA H100 80GB HBM3", "2.11", [
        Row("a", "chain64", 4.0, 3.5, 4.4, 30.0, 300.0, 108.0, 5.0, 0.8, 1e-6, True, **_trips(30.0, 15.0)),
        Row("f", "copy8192", 9.0, 8.0, 10.0, 40.0, 12.0, 6.0, None, 1.5, 0.0, True, path="sm", copy_us=3.2,
            **_trips(40.0, 25.0)),
        Row("d", "tasks1000", 900.0, 890.0, 950.0, 1000.0, 5000.0, 1500.0, None, 0.6, 0.0, False, per_edge_us=0.9),
    ])


def test_unknown_case_is_refused_before_any_gpu_work(capsys):
    assert main(["bench", "loop", "--cases", "a,z"]) != 0
    assert "unknown case(s) z; choose from a, b, c, d, e, f" in capsys.readouterr().err


def test_table_shows_every_row_and_marks_a_wrong_result(tmp_path):
    console = Console(width=220, record=True)
    console.print(loop_table(_result()))
    text = console.export_text()
    assert "chain64" in text and "copy8192" in text and "sm 3.2" in text and "0.90/edge" in text
    assert "WRONG" in text and text.count("ok ") == 2
    # the round trips beside the CUDA graph's, with their spread and ratio; a row without them shows dashes
    assert "30.0 (27.0-39.0)" in text and "15.0 (14.2-16.5)" in text and "2.00" in text and "1.60" in text
    d = next(line for line in text.splitlines() if "tasks1000" in line)
    assert "1,000.0" in d and d.count(" - ") >= 2


def test_json_has_the_keys_the_issue_names_and_the_plot_is_drawn(tmp_path):
    data = json.loads(json.dumps(_result().as_json()))
    assert data["device"].startswith("NVIDIA")
    for row in data["rows"]:
        assert {"case", "arkdma_us", "eager_us", "graph_us", "compile_us", "path", "ratio_to_best_torch"} <= set(row)
        assert {"roundtrip_us", "roundtrip_p10_us", "roundtrip_p90_us", "graph_roundtrip_us", "graph_roundtrip_p10_us",
                "graph_roundtrip_p90_us", "roundtrip_ratio", "go_path", "go_writes"} <= set(row)
    assert data["rows"][0]["roundtrip_ratio"] == 2.0 and data["rows"][2]["graph_roundtrip_us"] is None
    plot(_result(), tmp_path / "loop.png")
    assert (tmp_path / "loop.png").stat().st_size > 1000


@pytest.mark.parametrize("case", ["", ","])
def test_no_case_is_refused(case, capsys):
    assert main(["bench", "loop", "--cases", case]) != 0
    assert "(none given)" in capsys.readouterr().err


def test_each_case_is_saved_as_it_finishes_so_a_cut_off_run_keeps_its_rows(tmp_path, monkeypatch, capsys):
    import sys
    import types

    import bench.loop
    import arkdma_cli.bench as cli_bench

    out = tmp_path / "loop.json"
    seen = []

    def fake_run(config, progress, on_row):
        result = LoopResult("GPU", "2.11", [], complete=False)
        for row in _result().rows[:2]:
            progress(f"{row.case} {row.model}: arkdma")
            result.rows.append(row)
            on_row(result)
            seen.append(json.loads(out.read_text()))
        raise RuntimeError("cut off")

    monkeypatch.setattr(cli_bench, "_need_gpu", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(bench.loop, "run", fake_run)
    with pytest.raises(RuntimeError, match="cut off"):
        main(["bench", "loop", "--cases", "a,f", "--json", str(out), "--plot", str(tmp_path / "p.png")])
    assert [len(s["rows"]) for s in seen] == [1, 2] and not any(s["complete"] for s in seen)
    printed = capsys.readouterr().out
    assert "a chain64: arkdma 4.0 us" in printed and "f copy8192: arkdma" in printed


def test_round_trips_time_each_step_after_the_warmup():
    """round_trips: the warm-up steps are not timed; each timed step is one sample; p10 <= median <= p90."""
    import time

    from bench.timing import round_trips

    calls = []

    def step():
        calls.append(len(calls))
        if len(calls) <= 3:
            time.sleep(0.05)  # the warm-up is slow: it must not count

    got = round_trips(step, samples=20, warmup=3)
    assert len(calls) == 23
    assert 0 < got.p10 <= got.median <= got.p90 < 20000


@given(done=st.integers(0, 10_000), segment=st.integers(1, 118))
def test_the_graph_window_is_all_this_run_and_holds_a_relaunch(done, segment):
    """The RING iterations timed on the graph path are all run after the round trips, with a relaunch of the kernel's
    graph (every `segment` iterations) inside them."""
    from ark_runtime.kernel.codes import RING
    from bench.loop import graph_window

    n = graph_window(done, segment)
    end = done + n
    assert n >= RING + 1
    assert any(b % segment == 0 for b in range(end - RING + 1, end)), "no relaunch inside the timed window"
    assert (end - RING // 2) % segment == 0
