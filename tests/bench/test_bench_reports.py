"""The benchmarks' arithmetic and reports without a GPU: % of ideal, clock calibration, winners, baseline
ratios, targets, tables and plots from rows, and the commands' errors when no GPU is here."""

from __future__ import annotations

import numpy as np
import pytest

from arkdma_cli import bench as cli
from arkdma_cli.main import main
from bench import dma, interference

KiB, MiB = 1024, 1 << 20


def test_pct_of_ideal():
    assert interference.pct_of_ideal(10, 10, 10) == 100  # perfect overlap
    assert interference.pct_of_ideal(10, 10, 20) == 0  # no gain at all
    assert interference.pct_of_ideal(10, 4, 12) == pytest.approx(50)
    with pytest.raises(ValueError, match="no overlap is possible"):
        interference.pct_of_ideal(10, 0, 10)


def test_clock_calibration():
    us = dma.calibrated_us(np.array([1980, 3960]), span_ns=1_000_000, span_clk=1_980_000_000)
    assert us == pytest.approx([0.001, 0.002])
    with pytest.raises(ValueError, match="cannot calibrate"):
        dma.calibrated_us(np.array([1]), 0, 5)


def result() -> dma.DmaResult:
    r = dma.DmaResult("Test GPU", {}, 32)
    r.rows += [
        dma.Row("software", "D2H", 8 * KiB, 1, 5.0, 1.6, engine_streams=1),
        dma.Row("baseline", "D2H", 8 * KiB, 1, 16.0, 0.5),
        dma.Row("devgraph", "D2H", 8 * KiB, 1, 4.0, 2.0),
        dma.Row("software", "D2H", 8 * KiB, 64, 30.0, 12.0, layout="contiguous", engine_streams=4),
        dma.Row("software", "D2H", 8 * KiB, 64, 60.0, 3.0, layout="scattered", engine_streams=4),
        dma.Row("baseline", "D2H", 8 * KiB, 64, 40.0, 13.0),
    ]
    return r


def test_winners_ratios_and_targets():
    r = result()
    w = {(x["bytes"], x["inflight"]): x for x in dma.winners(r)}
    assert w[(8 * KiB, 1)]["winner"] == "devgraph" and w[(8 * KiB, 64)]["winner"] == "baseline"
    ratios = {x["path"]: x["speedup"] for x in dma.baseline_ratios(r)}
    assert ratios == {"software": pytest.approx(3.2), "devgraph": pytest.approx(4.0)}
    t = {x["target"]: x for x in dma.targets(r)}
    assert t["D2H 8 KiB one-way latency"]["met"] is False and t["D2H 8 KiB one-way latency"]["measured"] == 5.0
    tp = t["D2H 8 KiB throughput"]
    assert (tp["met"], tp["measured"], tp["layout"], tp["scattered"]) == (True, 12.0, "contiguous", 3.0)


def test_tables_and_plot(tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    for table in cli.dma_tables(result()):
        console.print(table)
    text = console.export_text()
    assert "3.2x" in text and "devgraph" in text and "D2H 8 KiB throughput" in text
    dma.plot(result(), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_interference_report(tmp_path):
    k = interference.KindResult("engine D2H", "engine", "D2H", 10**9, 20.0, 19.0, 20.5, 20.4, 20.5, 2.0, 52.6, 48.8,
                                interference.pct_of_ideal(20.0, 19.0, 20.5))
    r = interference.InterferenceResult("Test GPU", {"matmuls": 20}, "torch.matmul bf16 8192^3", 780.0, [k])
    assert r.as_json()["pct_of_ideal"] == {"engine D2H": pytest.approx(97.37, abs=0.01)}
    interference.plot(r, tmp_path / "i.png")
    assert (tmp_path / "i.png").stat().st_size > 1000


def test_commands_say_what_is_missing_without_a_gpu(capsys):
    from driver.gpu.launch import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here")
    assert main(["bench", "dma", "--quick"]) == 1
    assert "the benchmarks run on a CUDA GPU" in capsys.readouterr().err
    assert main(["bench", "dma", "--paths", "software,warp"]) == 1
    assert "unknown path(s) warp" in capsys.readouterr().err


def test_config_points_count_every_measurement():
    c = dma.DmaConfig()
    assert c.points() == len(c.software_points()) + 3 * 4 * 3 * 4
    assert sum(1 for p in c.software_points() if p[3] == 1) == 2 * 3 * 4  # one latency per engine configuration


def test_worker_runs_calls_in_another_process_and_survives_a_failure():
    import os

    w = dma.Worker(timeout=60)
    try:
        assert w.call(os.getpid) != os.getpid()
        with pytest.raises(ZeroDivisionError):
            w.call(divmod, 1, 0)
        assert w.call(divmod, 7, 2) == (3, 1)  # a fresh worker after the failure
    finally:
        w.close()
