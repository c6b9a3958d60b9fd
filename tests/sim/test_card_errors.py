"""The card's read errors through the PCIe model (sim/card_errors_session.py), the card built with a short
completion timeout: a read never answered ends in BUS_ERROR within the timeout's bound and its late
completion is not taken as data by the next read of its ID; a poisoned completion, a Completer Abort and an
Unsupported Request end in BUS_ERROR; each failed copy writes nothing, its completion word carries the error,
and the queue copies the next descriptor byte for byte once re-enabled."""

from __future__ import annotations

import pytest

from tests.sim.card_harness import run_card

pytestmark = pytest.mark.sim

TIMEOUT_CYCLES = 4096  # 16 us at 250 MHz: far above a read's round trip in the model, short to simulate


def errors_card():
    """The card's build with the short completion timeout (its own build folder)."""
    import dataclasses

    from sim.card import CARD, SimCard

    return dataclasses.replace(CARD, make=lambda p: SimCard(p, completion_timeout_cycles=TIMEOUT_CYCLES),
                               suffix=f"_card_cto{TIMEOUT_CYCLES}")


def test_card_read_errors_through_the_pcie_model(tmp_path):
    from sim.card_errors_session import TIMEOUT_ENV
    result = run_card(tmp_path, "sim.card_errors_session", "card_read_errors", top=errors_card(),
                      env={TIMEOUT_ENV: str(TIMEOUT_CYCLES)})
    assert {k: v["error"] for k, v in result["failed"].items()} == {
        "lost": "BUS_ERROR", "poisoned": "BUS_ERROR", "abort": "BUS_ERROR", "unsupported": "BUS_ERROR"}
    assert TIMEOUT_CYCLES <= result["failed"]["lost"]["cycles_to_halt"] <= TIMEOUT_CYCLES * 5 // 4 + 2000
    assert result["copies"] == [0x4000, 1000, 64, 3000]
    assert result["faults_served"] == {"lost": 1, "late": 1, "poisoned": 1, "abort": 1}
