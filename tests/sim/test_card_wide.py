"""The 512-bit card through the PCIe model at Gen3 x16 with RQ and RC straddled (sim/card_wide_session.py): copies of
1 byte to 12 KiB from and to many byte offsets, some across 4 KiB, byte for byte with guards; requests and
completions straddle beats (two in one), no request over the host's 128-byte payload or across 4 KiB."""

from __future__ import annotations

import pytest

from tests.sim.card_harness import run_card

pytestmark = pytest.mark.sim


def test_512_bit_card_copies_every_size_and_offset_with_rq_and_rc_straddled(tmp_path):
    from sim.card_wide_session import BATCHES  # imports cocotb: only where the sim tests run

    result = run_card(tmp_path, "sim.card_wide_session", "card_wide_sweep", data_width=512)
    sizes = [n for batch, _, _ in BATCHES for n in batch]
    assert (result["descriptors"], result["bytes"]) == (len(sizes), sum(sizes))
    rq = result["rq"]
    # a 128-byte write request is five halves: two of them end in a beat's first half and the next starts in its
    # second in a stream of them, so many beats carry two requests
    assert rq["straddled"] >= 50, rq
    # likewise 128-byte completions (35 DWORDs): the block model straddles them when the next is waiting
    assert result["rc"]["straddled"] >= 20, result["rc"]
    assert rq["requests"] == result["requests"]["reads"]["count"] + result["requests"]["writes"]["count"]
    for kind in ("reads", "writes"):
        assert result["requests"][kind]["across_4k"] == 0
    assert result["requests"]["writes"]["largest"] == 128
