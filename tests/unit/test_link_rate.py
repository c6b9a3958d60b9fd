"""The card bench's link table and payload-limited rate (sim/card_bench_link.py), against numbers worked by
hand, and the table against cocotbext-pcie's own list of configurations."""

from __future__ import annotations

import pytest

from sim.card_bench_link import Link, LinkError, known_links, parse_link, parse_links, payload_rate_gbps


@pytest.mark.parametrize("gen, lanes, mps, want", [
    # 2.5 GT/s x 1 x 8/10 / 8 = 0.25 GB/s; 128 / (128 + 16 + 8) = 128/152
    (1, 1, 128, 0.25 * 128 / 152),
    # 5 GT/s x 16 x 8/10 / 8 = 8 GB/s
    (2, 16, 128, 8.0 * 128 / 152),
    # 8 GT/s x 8 x 128/130 / 8 = 7.8769 GB/s -> 6.6332 GB/s
    (3, 8, 128, 6.6332),
    # Gen3 x16 at 256 B payloads: 15.7538 x 256/280 = 14.4035
    (3, 16, 256, 14.4035),
    # Gen4 x16, 128 B: 31.5077 x 128/152 = 26.5328
    (4, 16, 128, 26.5328),
])
def test_payload_rate_by_hand(gen, lanes, mps, want):
    assert payload_rate_gbps(gen, lanes, mps) == pytest.approx(want, rel=1e-4)


def test_rate_grows_with_payload_and_lanes_and_headers_cost():
    assert payload_rate_gbps(3, 8, 256) > payload_rate_gbps(3, 8, 128)
    assert payload_rate_gbps(3, 8) == pytest.approx(payload_rate_gbps(3, 4) * 2)
    # a 3-DWORD header (32-bit address) costs 4 bytes less per TLP
    assert payload_rate_gbps(3, 8, header_bytes=12) == pytest.approx(7.8769 * 128 / 148, rel=1e-4)


@pytest.mark.parametrize("gen, lanes, mps", [(5, 8, 128), (3, 3, 128), (3, 8, 100), (0, 1, 128)])
def test_rate_refuses_impossible_links(gen, lanes, mps):
    with pytest.raises(LinkError):
        payload_rate_gbps(gen, lanes, mps)


def test_parse_link_and_its_rate():
    link = parse_link(" Gen3x8 ")
    assert (link.generation, link.lanes, link.user_clk_mhz, link.name) == (3, 8, 250.0, "gen3x8")
    assert link.payload_rate_gbps == pytest.approx(6.6332, rel=1e-4)
    assert link.raw_gbps == pytest.approx(7.8769, rel=1e-4)
    assert link.as_dict()["interface_bits"] == 256
    assert [lk.name for lk in parse_links("gen3x8,gen4x4")] == ["gen3x8", "gen4x4"]


@pytest.mark.parametrize("text, rate", [("gen3x16", 13.2664), ("gen4x8", 13.2664)])
def test_the_512_bit_links(text, rate):
    """Gen3 x16 and Gen4 x8 run the 512-bit interface at 250 MHz: 15.754 GB/s x 128/152 each."""
    link = parse_link(text)
    assert (link.interface_bits, link.user_clk_mhz) == (512, 250.0)
    assert link.payload_rate_gbps == pytest.approx(rate, rel=1e-4)


@pytest.mark.parametrize("text, says", [
    ("gen4x16", "500 MHz"), ("gen3x2", "cannot be simulated"), ("gen5x16", "cannot be simulated"),
    ("pcie3", "genGxN"), ("gen3x8;rm -rf /", "genGxN"), ("", "one or more"), ("gen3x8,gen3x8", "twice"),
    (",", "one or more"),
])
def test_parse_refuses_what_the_front_end_cannot_be(text, says):
    with pytest.raises(LinkError, match=says):
        parse_links(text)


@pytest.mark.parametrize("bits", [256, 512])
def test_links_match_the_block_model(bits):
    """Every link offered is one cocotbext-pcie's UltraScale+ model accepts at its interface width, and none of
    the model's at 256 or 512 bits is left out."""
    usp = pytest.importorskip("cocotbext.pcie.xilinx.us.usp_model")
    theirs = {(g, n, f / 1e6) for g, n, w, f in usp.valid_configs if w == bits}
    ours = {(lk.generation, lk.lanes, lk.user_clk_mhz) for lk in map(parse_link, known_links(bits))}
    assert ours == theirs
    assert all(parse_link(name).interface_bits == bits for name in known_links(bits))


@pytest.mark.parametrize("size", [0, 64, 384, 8192])
def test_a_link_refuses_a_read_request_size_device_control_cannot_set(size):
    with pytest.raises(LinkError, match="max read request size"):
        Link(3, 8, max_read_request_bytes=size)
    assert Link(3, 8).max_read_request_bytes == 512 and Link(3, 8).as_dict()["max_read_request_bytes"] == 512
