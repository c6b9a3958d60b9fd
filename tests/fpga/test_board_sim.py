"""The board's design simulated (sim/board.py): `arkdma fpga probe --dma` over tcp:// finds the engine core and
runs a loopback DMA through it, as on a board."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sim


def test_probe_and_loopback_dma_on_the_simulated_board(capsys):
    from sim.toolchain import missing

    reason = missing()
    if reason:
        pytest.skip(f"cannot simulate here: {reason}")
    from arkdma_cli.main import main
    from sim.board import BoardSimulation, board_params

    from tests.conformance.builder import GEOMETRY

    # the conformance suite's geometry: the card-uart-sim engine's build, not one more
    board = BoardSimulation(board_params(**GEOMETRY)).start()
    try:
        assert main(["fpga", "probe", "--port", board.url, "--dma", "--timeout", "30"]) == 0
    finally:
        board.stop()
    out = capsys.readouterr().out
    assert "core engine" in out and f"NUM_QUEUES 0x{GEOMETRY['num_queues']:08x}" in out
    assert "loopback DMA: 1021 bytes copied and checked" in out and "completion count 1" in out
