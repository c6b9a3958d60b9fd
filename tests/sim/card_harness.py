"""Runs one cocotb module of the card through the PCIe model (sim/card.py) from a pytest test: skips where
nothing can simulate, builds the card at the small geometry the card sessions share (sim/card.py's
SESSION_GEOMETRY), returns the module's result JSON."""

from __future__ import annotations

import json

import pytest

def run_card(tmp_path, module: str, testcase: str, *, top=None, env: dict | None = None,
             data_width: int | None = None, reads_outstanding: int | None = None) -> dict:
    """`data_width` 512: the 512-bit card, at Gen3 x16 (sim/card_session.Card's default for it);
    `reads_outstanding`: other than the sessions' (the card's own, 128, takes a long build)."""
    from sim.toolchain import missing

    reason = missing()
    if reason:
        pytest.skip(f"cannot simulate here: {reason}")
    pytest.importorskip("cocotbext.pcie")
    from sim.build import build, run
    from sim.card import CARD, session_params

    given = {k: v for k, v in (("data_width", data_width), ("reads_outstanding", reads_outstanding)) if v}
    model = build(session_params(**given), top=top or CARD)
    out = tmp_path / "result.json"
    run(model, module, tmp_path / "run", env={"ARKDMA_SIM_RESULT": str(out), **(env or {})}, testcase=testcase)
    return json.loads(out.read_text())
