"""The simulation build folder stays bounded: old models and run folders are pruned, the ones in use kept."""

from __future__ import annotations

import os

from sim.build import BUILD_ROOT, PROJECT_ROOT, prune


def _folder(path, age):
    path.mkdir(parents=True)
    (path / "f").write_bytes(b"x")
    os.utime(path, (1_000_000 + age, 1_000_000 + age))
    return path


def test_prune_keeps_the_newest_models_and_runs(tmp_path):
    models = [_folder(tmp_path / f"dw64_{i}", i) for i in range(5)]
    runs = [_folder(tmp_path / "runs" / f"job-{i}", i) for i in range(7)]
    removed = prune(tmp_path, keep_models=2, keep_runs=3)
    assert sorted(p.name for p in removed) == sorted([m.name for m in models[:3]] + [r.name for r in runs[:4]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dw64_3", "dw64_4", "runs"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["job-4", "job-5", "job-6"]


def test_prune_spares_what_was_used_lately(tmp_path):
    """Another test process may be between a build and its run: a folder touched lately stays, whatever its rank."""
    old = [_folder(tmp_path / f"dw64_{i}", i) for i in range(3)]
    fresh = tmp_path / "dw64_fresh"
    fresh.mkdir()
    os.utime(old[0])  # used just now
    removed = prune(tmp_path, keep_models=1, keep_runs=1)
    assert sorted(p.name for p in removed) == ["dw64_1", "dw64_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dw64_0", "dw64_fresh"]


def test_build_products_live_under_one_ignored_folder():
    assert BUILD_ROOT.parent == PROJECT_ROOT / "build" or os.environ.get("ARKDMA_BUILD_DIR")
    assert "build/" in (PROJECT_ROOT / ".gitignore").read_text().split()


def test_the_build_message_names_the_last_build_or_the_tops_estimate(tmp_path):
    """A rebuild names the last build's time from its build.json; a first build (or an unreadable record) the top's
    estimate, which for the card depends on its reads in flight (the shipped 128 take about 8 minutes)."""
    from sim.build import ENGINE, _expected_time
    from sim.card import CARD, session_params

    small, shipped = session_params(), session_params(reads_outstanding=128)
    assert _expected_time(tmp_path, small, ENGINE) == "about a minute"
    assert _expected_time(tmp_path, small, CARD) == "about a minute"
    assert _expected_time(tmp_path, shipped, CARD).startswith("about 8 minutes")
    assert "a few minutes" in _expected_time(tmp_path, session_params(reads_outstanding=64), CARD)
    (tmp_path / "build.json").write_text('{"seconds": 481.4}')
    assert _expected_time(tmp_path, shipped, CARD) == "its last build took 481 s"
    for bad in ("{", '{"seconds": "soon"}', "[]", '{"params": {}}'):
        (tmp_path / "build.json").write_text(bad)
        assert _expected_time(tmp_path, shipped, CARD).startswith("about 8 minutes")
