"""The engine's build parameters as command-line options: integers as `--name N`, flags as `--name`/`--no-name`."""

from __future__ import annotations

import argparse

import pytest

from arkdma_cli.engine_options import add_param_options, given_params, params_from
from driver.errors import ArkdmaError


def _parse(argv: list[str], data_width: int | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_param_options(parser, data_width=data_width)
    return parser.parse_args(argv)


@pytest.mark.parametrize(("argv", "want"), [
    ([], {}),
    (["--extra-stages"], {"extra_stages": True}),
    (["--no-extra-stages"], {"extra_stages": False}),
    (["--fall-through", "--slots", "16"], {"fall_through": True, "slots": 16}),
])
def test_flags_and_integers_given(argv, want):
    assert given_params(_parse(argv)) == want


def test_flags_reach_the_parameters_and_the_rest_keep_their_defaults():
    p = params_from(_parse(["--extra-stages", "--buffer-bytes", "8192"], data_width=64))
    assert (p.extra_stages, p.fall_through, p.buffer_bytes, p.data_width) == (True, False, 8192, 64)


def test_a_flag_takes_no_value():
    with pytest.raises(SystemExit):
        _parse(["--extra-stages", "1"])


def test_a_rejected_set_is_a_clear_error():
    with pytest.raises(ArkdmaError, match="engine parameters rejected"):
        params_from(_parse(["--slots", "3"]))


def test_fpga_build_help_shows_the_board_and_the_card_defaults(capsys):
    """`fpga build --help` names what each board builds unless told otherwise, not EngineParams' own defaults."""
    from arkdma_cli.main import build_parser
    from fpga.cores.pcie_card_top import card_params
    from sim.board import board_params

    with pytest.raises(SystemExit):
        build_parser().parse_args(["fpga", "build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    board, card = board_params(), card_params()
    for name in ("reads_outstanding", "buffer_bytes", "data_width", "max_burst_beats"):
        assert (f"--{name.replace('_', '-')} N (default ecp5-evn {getattr(board, name)}; "
                f"alveo-u250 {getattr(card, name)})") in text
    assert "--extra-stages, --no-extra-stages (default ecp5-evn on; alveo-u250 off)" in text
    assert board.reads_outstanding != card.reads_outstanding  # the two sets differ where the help must tell them apart
