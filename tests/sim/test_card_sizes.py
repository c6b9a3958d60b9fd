"""The card's request sizes through the PCIe model (sim/card_sizes_session.py): with the host's
Max_Read_Request_Size and Max_Payload_Size at 128 bytes, a few KiB are copied byte for byte with every read
request and write payload at most 128 bytes and none across 4 KiB; raised to 512 bytes and then 4 KiB, the reads
grow to it (the card's read bursts are a page long)."""

from __future__ import annotations

import pytest

from tests.sim.card_harness import run_card

pytestmark = pytest.mark.sim


def test_card_keeps_to_the_hosts_request_sizes(tmp_path):
    result = run_card(tmp_path, "sim.card_sizes_session", "card_request_sizes")
    assert result["cfg"] == {"max_read_req": 0, "max_payload": 0}, "the block model did not drive the card's sizes"
    small = result["mrrs_128"]
    # 8194 bytes, each burst cut into 128-byte reads
    assert small["reads"]["largest"] == 128 and small["reads"]["count"] >= 8194 // 128
    assert small["writes"]["largest"] == 128 and small["writes"]["count"] >= 8194 // 128
    assert small["reads"]["across_4k"] == 0 and small["writes"]["across_4k"] == 0
    assert result["cfg_after"] == {"max_read_req": 2}
    assert result["mrrs_512"]["reads"]["largest"] == 512
    assert result["mrrs_512"]["writes"]["largest"] == 128
    # raised to 4 KiB: 8,192 bytes from byte 3 of a page are reads of 4,096, 4,096 and the last few beats
    assert result["cfg_4096"] == {"max_read_req": 5}
    big = result["mrrs_4096"]
    assert big["reads"]["largest"] == 4096 and big["reads"]["count"] == 3 and big["reads"]["across_4k"] == 0
    assert big["writes"]["largest"] == 128 and big["writes"]["across_4k"] == 0
