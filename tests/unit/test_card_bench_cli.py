"""`arkdma sim bench --card` refuses what it cannot honestly run, before any build or simulation: links the
block model does not offer at 256 or 512 bits, a link the card's interface width cannot run, bad sizes and times, options of the other bench, an engine the requester does
not serve, runs too large to finish."""

from __future__ import annotations

import pytest

from arkdma_cli.main import RUNTIME_ERROR, main
from tests.unit.test_cli_hostile import usage_error

CARD = ["sim", "bench", "--card", "--json", "out/never.json"]


@pytest.fixture
def no_simulation(monkeypatch):
    """Fails the test if the bench gets as far as building or simulating anything."""
    def refuse(*args, **kwargs):
        raise AssertionError("the card bench started although its settings should have been refused")

    monkeypatch.setattr("sim.card_bench_report.run", refuse)
    monkeypatch.setattr("sim.build.build", refuse)




@pytest.mark.parametrize("link, says", [
    ("gen4x16", "500 MHz"), ("gen3x2", "cannot be simulated"), ("gen5x4", "cannot be simulated"), ("pcie3", "genGxN"), ("gen3x8,gen3x8", "twice"), ("gen3x8;ls", "genGxN"),
    (",", "one or more"),
])
def test_unknown_or_unsimulatable_links_are_usage_errors(link, says, capsys, no_simulation):
    err = usage_error(CARD + ["--link", link], capsys)
    assert says in err and "--link" in err


@pytest.mark.parametrize("argv", [["--mrrs", "100"], ["--mrrs", "8192"], ["--mrrs", "x"], ["--mps", "4096"],
                                  ["--sizes", "0,64"], ["--sizes", "64,-1"], ["--sizes", "lots"],
                                  ["--sizes", str(2 << 30)], ["--round-trip-ns", "-5"], ["--round-trip-ns", "nan"],
                                  ["--total-bytes", "0"], ["--min-descriptors", "x"]])
def test_bad_sizes_and_times_are_usage_errors(argv, capsys, no_simulation):
    usage_error(CARD + argv, capsys)


def _needs_toolchain():
    from sim.toolchain import missing

    if missing():
        pytest.skip(f"the settings are checked after the toolchain: {missing()}")


@pytest.mark.parametrize("argv, says", [
    (["--sizes", "1048576", "--min-descriptors", "64"], "would move"),
    (["--total-bytes", str(1 << 30)], "would move"),
    (["--data-width", "512"], "need the 256-bit interface"),
    (["--link", "gen3x16", "--data-width", "256"], "need the 512-bit interface"),
    (["--data-width", "96"], "not 96-bit"),
    (["--slots", "3"], "slots"),
    (["--clock-mhz", "100"], "link's user clock"),
    (["--store-bytes", "6"], "store_bytes"),
    (["--store-bytes", "-16"], "store_bytes"),
])
def test_settings_the_card_cannot_run_are_refused_before_the_build(argv, says, capsys, no_simulation):
    if "--clock-mhz" not in argv:
        _needs_toolchain()
    assert main(CARD + argv) == RUNTIME_ERROR
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize("option", [["--link", "gen3x8"], ["--quick"], ["--plot", "out/x.png"], ["--store-bytes", "0"]])
def test_card_options_without_card_are_refused(option, capsys, no_simulation):
    assert main(["sim", "bench", "--json", "out/never.json", *option]) == RUNTIME_ERROR
    assert "add --card" in capsys.readouterr().err
