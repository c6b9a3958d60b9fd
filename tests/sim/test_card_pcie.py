"""The card through the PCIe model (sim/card.py, sim/card_session.py): enumeration, BAR0 identity and
register programs, copies of host memory across the link (reads as tagged requests and completions, writes
posted), a bus error from unbacked host memory, an unsupported BAR read refused."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.sim


def test_card_first_light_through_the_pcie_model(tmp_path):
    from sim.toolchain import missing

    reason = missing()
    if reason:
        pytest.skip(f"cannot simulate here: {reason}")
    pytest.importorskip("cocotbext.pcie")
    from sim.board import board_params
    from sim.build import build, run
    from sim.card import CARD

    model = build(board_params(num_queues=2, slots=16, num_regions=8), top=CARD)
    out = tmp_path / "result.json"
    run(model, "sim.card_session", tmp_path / "run", env={"ARKDMA_SIM_RESULT": str(out)}, testcase="card_first_light")
    result = json.loads(out.read_text())
    assert result["identity"] == {"num_queues": 2, "slots": 16, "num_regions": 8}
    assert result["copies"] == {"descriptors": 5, "bytes": 8266, "completion_word": 5}
    assert result["unbacked_read"] == "BUS_ERROR"
    assert result["long_read"].startswith("refused")
