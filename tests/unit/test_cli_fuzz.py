"""`arkdma sim fuzz`: a short campaign on the reference engine, and the refusals of bad arguments."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from arkdma_cli.main import main  # noqa: E402


def test_fuzz_reference_runs_and_summarises(tmp_path, capsys):
    assert main(["sim", "fuzz", "--seconds", "2", "--engine", "reference", "--seed", "3",
                 "--out", str(tmp_path / "found")]) == 0
    out = capsys.readouterr().out
    assert "arkdma sim fuzz: reference" in out
    assert "descriptors" in out and "failures (kinds)" in out
    assert not (tmp_path / "found").exists()  # nothing failed, so no reproducer was written


@pytest.mark.parametrize("args", [["--seconds", "0"], ["--seconds", "-5"], ["--seconds", "x"], [],
                                  ["--seconds", "1", "--data-width", "128"], ["--seconds", "1e9"],
                                  ["--seconds", "99999999999"], ["--seconds", "1", "--engine", "no-such-engine"],
                                  ["--seconds", "1", "--seed", "-1"], ["--seconds", "1", "--batch", "0"],
                                  ["--seconds", "1", "--max-descriptors", "1000000"],
                                  ["--seconds", "1", "--out", "README.md"], ["--seconds", "1", "--out", ""]])
def test_fuzz_refuses_bad_arguments(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "fuzz", *args])
    assert exc.value.code == 2
    assert "usage: arkdma sim fuzz" in capsys.readouterr().err
