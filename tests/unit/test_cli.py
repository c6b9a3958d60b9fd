"""The `arkdma` command: info, abi check, demo on the reference engine, and its errors."""

from __future__ import annotations

import json

import pytest

from arkdma_cli.main import main


def test_info_lists_every_engine_with_a_reason(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for engine in ("card", "software-cuda", "rtl", "software-host", "reference"):
        assert engine in out
    assert "abi" in out and "GPUs:" in out and "cards:" in out


def test_abi_check_passes_on_the_checkout(capsys):
    assert main(["abi", "check"]) == 0


def test_demo_on_the_reference_engine_checks_bytes_and_writes_plot_and_json(tmp_path, capsys):
    plot, js = tmp_path / "demo.png", tmp_path / "demo.json"
    rc = main(["demo", "--engine", "reference", "--sizes", "64,4096", "--bytes-per-size", "65536",
               "--plot", str(plot), "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "reference" in out and "ok" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads(js.read_text())["rows"]
    assert [r["bytes"] for r in rows] == [64, 4096]
    assert all(r["verified"] and r["gbps"] > 0 for r in rows)
    assert rows[0]["descriptors"] == 1024 and rows[1]["descriptors"] == 16


def test_demo_on_an_engine_that_is_not_here_says_why(capsys):
    assert main(["demo", "--engine", "card"]) == 1
    assert "no arkdma card" in capsys.readouterr().out


@pytest.mark.parametrize("sizes", ["a,b", "0", "-5", ""])
def test_demo_refuses_bad_sizes_with_an_example(sizes, capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--sizes", sizes])
    assert info.value.code == 2
    assert "like 64,4096" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["sim", "bench", "--sizes", "0,64"], ["sim", "bench", "--sizes", str(2 << 30)],
                                  ["demo", "--bytes-per-size", "0"], ["sim", "bench", "--total-bytes", "x"]])
def test_size_and_count_options_are_refused_with_what_they_want(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "like 64,4096" in err or "want a positive integer" in err
