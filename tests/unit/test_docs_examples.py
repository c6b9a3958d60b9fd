"""The command examples in docs/runtime.md print what the doc shows: each block that starts with `./dev arkdma plan`
is run (its files written to a temporary folder) and its first printed line compared with the doc's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from arkdma_cli.main import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def _examples() -> list[tuple[str, str]]:
    blocks = re.findall(r"```\n(\./dev arkdma plan [^\n]+)\n([^\n]+)\n", DOC.read_text())
    assert blocks, "docs/runtime.md shows no `arkdma plan` example"
    return blocks


@pytest.mark.parametrize(("command", "printed"), _examples())
def test_the_doc_shows_what_the_command_prints(command, printed, tmp_path, capsys):
    args = shlex.split(command)[2:]
    args = [str(tmp_path / Path(a).name) if a.startswith("out/") else a for a in args]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[0] == printed
