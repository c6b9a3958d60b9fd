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


def test_the_communication_docs_program_computes_a_tensor_parallel_mlp():
    """docs/communication.md's program, run as written: the two ranks' halves all-reduced give every rank the MLP of
    the whole weights."""
    import numpy as np

    text = (DOC.parent / "communication.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4096))
    w1, w2 = rng.standard_normal((4096, 16384)) / 64, rng.standard_normal((16384, 4096)) / 128
    half = 16384 // 2
    scope = {"inputs0": {"x": x, "w1": w1[:, :half], "w2": w2[:half]},
             "inputs1": {"x": x, "w1": w1[:, half:], "w2": w2[half:]}}
    exec(compile(code, "communication.md", "exec"), scope)  # noqa: S102 - the doc's own example
    h = x @ w1
    want = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3))) @ w2
    for r, m in enumerate(scope["world"].models):
        np.testing.assert_allclose(scope["outs"][r][m.outputs[0]], want, rtol=1e-9, atol=1e-9)
