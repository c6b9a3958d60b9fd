"""Peer-to-peer DMA through the PCIe model (sim/card_p2p_session.py): the card and a second endpoint standing in
for a GPU's memory, each on a root port of one root complex. The engine copies host -> peer, peer -> host,
peer -> peer and writes a signal into the peer, byte for byte with guards, every peer request going endpoint to
endpoint; a read of the hole after the peer's BAR is answered Unsupported Request and ends in BUS_ERROR with
nothing written; the checker catches a byte planted wrong in the peer's memory."""

from __future__ import annotations

import pytest

from tests.sim.card_harness import run_card

pytestmark = pytest.mark.sim


def test_card_copies_to_and_from_a_peer_endpoint(tmp_path):
    result = run_card(tmp_path, "sim.card_p2p_session", "card_peer_to_peer")
    assert result["peer_base"] >= 1 << 32, "the peer's BAR should sit above 4 GiB (a 64-bit prefetchable BAR)"
    assert result["copies"]["bytes"] == {"host->peer": 1021 + 4173 + 8, "peer->host": 3000 + 64,
                                         "peer->peer": 4429 + 17, "signal->peer": 8}
    assert result["copies"]["completion_word"] == result["copies"]["descriptors"] == 8
    assert result["peer_requests"]["read"] > 0 and result["peer_requests"]["write"] > 0
    assert result["root_complex_saw_peer_addresses"] == 0
    assert result["planted"] == {"data": [17], "guard": [-1]}
    hole = result["hole_read"]
    assert (hole["error"], hole["completion_word_error"]) == ("BUS_ERROR", True)
    assert hole["peer_ur_completions"] >= 1, "the peer answered no read of the hole Unsupported Request"
    assert result["after_error"] == 2051
