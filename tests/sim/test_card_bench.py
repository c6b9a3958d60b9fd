"""`arkdma sim bench --card` end to end on a tiny run through the PCIe model: the JSON's keys, every copied
byte checked, the link's rate, the latency above the host memory's round trip, the model's terms."""

from __future__ import annotations

import json

import pytest

from sim import toolchain

pytestmark = [pytest.mark.sim,
              pytest.mark.skipif(toolchain.missing() is not None, reason=f"no simulator: {toolchain.missing()}")]


def session_card() -> list[str]:
    """The card sessions' small card (sim/card.py's SESSION_GEOMETRY) as options: no extra Verilator build in CI."""
    from sim.card import SESSION_GEOMETRY

    return [text for name, value in SESSION_GEOMETRY.items() for text in (f"--{name.replace('_', '-')}", str(value))]


ROW_KEYS = {"link", "bytes", "descriptors", "gbps", "line_rate_fraction", "latency_ns", "latency_cycles",
            "gbps_steady", "doorbell_to_first_read_cycles", "read_round_trip_ns", "cycles_per_write_tlp",
            "cycles_per_completion", "verified", "word_sent_cycles", "word_sent_ns"}


def test_tiny_card_bench_writes_checked_rows(tmp_path):
    pytest.importorskip("cocotbext.pcie")
    from arkdma_cli.main import main

    out, png = tmp_path / "card.json", tmp_path / "plot" / "card.png"
    assert main(["sim", "bench", "--card", "--json", str(out), "--plot", str(png), "--sizes", "256,4096",
                 "--total-bytes", "4096", "--round-trip-ns", "500", *session_card()]) == 0
    result = json.loads(out.read_text())
    assert png.stat().st_size > 0
    assert result["complete"] is True and result["verified"] is True and result["round_trip_ns"] == 500.0
    link = result["links"]["gen3x8"]
    assert (link["generation"], link["lanes"], link["interface_bits"], link["user_clk_mhz"]) == (3, 8, 256, 250.0)
    assert link["payload_rate_gbps"] == pytest.approx(6.6332, rel=1e-4)
    assert [(r["bytes"], r["descriptors"]) for r in result["rows"]] == [(256, 16), (4096, 1)]
    for row in result["rows"]:
        assert ROW_KEYS <= row.keys()
        assert row["verified"] is True
        assert row["gbps"] == pytest.approx(row["line_rate_fraction"] * link["payload_rate_gbps"])
        assert 0 < row["line_rate_fraction"] < 1
        assert row["latency_ns"] == pytest.approx(row["latency_cycles"] * 4.0)
        # the data is read across the link (>= the host memory's 500 ns) before the word is written back
        assert 500 <= row["read_round_trip_ns"] < row["latency_ns"]
        # the word's write request leaves the card's pins, then crosses the link into host memory
        assert row["read_round_trip_ns"] < row["word_sent_ns"] < row["latency_ns"]
        assert row["word_sent_ns"] == pytest.approx(row["word_sent_cycles"] * 4.0)
        assert row["cycles_per_write_tlp"] > 0 and row["cycles_per_completion"] > 0
    streamed = result["rows"][0]
    assert streamed["gbps_steady"] > 0 and streamed["write_tlps"] >= 16 * 256 // 128
    alone = result["rows"][1]
    assert alone["gbps_steady"] is None  # one descriptor: no steady rate between two words
    # the block model drives the card's size ports from Device Control: reads of 512 B, writes of at most
    # 128 B (more of them: the destination sits 64 bytes into a payload-sized block) and the word's
    assert alone["read_requests"] == 4096 // 512 and alone["write_tlps"] >= 4096 // 128 + 1
    assert link["end_to_end_model"] is None  # no 8 KiB row


def test_the_latency_model_takes_the_card_from_doorbell_to_the_words_request(tmp_path):
    """The 8 KiB row feeds the modelled GPU-driven latency: the card's term ends where the completion word's
    write request leaves the card's pins (the hop to the GPU is the measured posted write, so the simulated hop
    into host memory is not counted as well), and the total is the three terms."""
    pytest.importorskip("cocotbext.pcie")
    from arkdma_cli.main import main
    from sim.latency_model import ONE_WAY_NS

    out = tmp_path / "card8k.json"
    assert main(["sim", "bench", "--card", "--json", str(out), "--sizes", "8192", "--total-bytes", "8192",
                 "--round-trip-ns", "500", *session_card()]) == 0
    result = json.loads(out.read_text())
    row, model = result["rows"][0], result["links"]["gen3x8"]["end_to_end_model"]
    assert row["verified"] is True and row["word_sent_cycles"] < row["latency_cycles"]
    gpu_post, card, word = model["terms"]
    assert card["ns"] == pytest.approx(row["word_sent_ns"]) and f"{row['word_sent_cycles']} cycles" in card["basis"]
    assert gpu_post["ns"] == word["ns"] == ONE_WAY_NS
    assert model["total_ns"] == pytest.approx(2 * ONE_WAY_NS + row["word_sent_ns"])


def test_the_hosts_max_payload_size_cuts_the_cards_writes(tmp_path):
    """--mps 256: enumeration sets 256 bytes in the card's Device Control, the card cuts its writes to it (fewer,
    longer write TLPs than at 128), and line_rate_fraction is of the link's rate at that payload size."""
    pytest.importorskip("cocotbext.pcie")
    from arkdma_cli.main import main
    from sim.card_bench_link import payload_rate_gbps

    rows = {}
    for mps in (128, 256):
        out = tmp_path / f"mps{mps}.json"
        assert main(["sim", "bench", "--card", "--json", str(out), "--sizes", "4096", "--total-bytes", "4096",
                     "--round-trip-ns", "500", *session_card(),
                     "--mps", str(mps)]) == 0
        result = json.loads(out.read_text())
        link = result["links"]["gen3x8"]
        assert link["max_payload_bytes"] == mps
        assert link["payload_rate_gbps"] == pytest.approx(payload_rate_gbps(3, 8, mps))
        rows[mps] = result["rows"][0]
        assert rows[mps]["verified"] is True
    # 4 KiB, 64 bytes into a 128-byte block, in write bursts ending at multiples of the payload size in the
    # destination: 64 + 31 x 128 + 64 bytes (33 writes) at 128, 192 + 15 x 256 + 64 (17 writes) at 256; and two
    # writes of the completion word
    assert (rows[128]["write_tlps"], rows[256]["write_tlps"]) == (33 + 2, 17 + 2)
    assert rows[256]["cycles_per_write_tlp"] > rows[128]["cycles_per_write_tlp"]  # 9 beats a 256-byte write, not 5


def test_a_max_payload_size_the_host_cannot_set_is_refused(capsys):
    from arkdma_cli.main import main

    with pytest.raises(SystemExit):
        main(["sim", "bench", "--card", "--json", "/tmp/never.json", "--mps", "300"])
    assert "--mps" in capsys.readouterr().err


def test_card_bench_at_the_512_bit_links(tmp_path):
    """--link gen3x16,gen4x8 benches the 512-bit card (taken without --data-width) at both links the block model
    offers a 512-bit interface: the same keys, every byte checked, rates of the 512-bit links; the rows carry
    write requests that straddle RQ beats."""
    pytest.importorskip("cocotbext.pcie")
    from arkdma_cli.main import main

    out = tmp_path / "card512.json"
    assert main(["sim", "bench", "--card", "--json", str(out), "--link", "gen3x16,gen4x8", "--sizes", "256,4096",
                 "--total-bytes", "4096", "--round-trip-ns", "500", *session_card()]) == 0
    result = json.loads(out.read_text())
    assert result["complete"] is True and result["verified"] is True
    assert result["params"]["data_width"] == 512
    for name, gen, lanes in (("gen3x16", 3, 16), ("gen4x8", 4, 8)):
        link = result["links"][name]
        assert (link["generation"], link["lanes"], link["interface_bits"], link["user_clk_mhz"]) == (gen, lanes, 512,
                                                                                                      250.0)
        assert link["payload_rate_gbps"] == pytest.approx(13.2664, rel=1e-4)
    assert [(r["link"], r["bytes"]) for r in result["rows"]] == [("gen3x16", 256), ("gen3x16", 4096),
                                                                  ("gen4x8", 256), ("gen4x8", 4096)]
    for row in result["rows"]:
        assert ROW_KEYS <= row.keys() and row["verified"] is True
        assert 0 < row["line_rate_fraction"] < 1 and 500 <= row["read_round_trip_ns"] < row["latency_ns"]


def test_a_link_the_cards_interface_cannot_run_is_refused(capsys):
    from arkdma_cli.main import main

    with pytest.raises(SystemExit):
        main(["sim", "bench", "--card", "--json", "/tmp/never.json", "--link", "gen4x16"])
    assert "500 MHz" in capsys.readouterr().err
    # one card per run: gen3x8 runs the 256-bit interface, gen3x16 the 512-bit one
    assert main(["sim", "bench", "--card", "--json", "/tmp/never.json", "--link", "gen3x8,gen3x16"]) != 0
    assert "need the 512-bit interface" in capsys.readouterr().err

