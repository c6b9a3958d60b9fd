"""`arkdma bench tune` without a GPU: every default shape's knob settings, of which exactly one is the runtime's own
choice; the rows a committed run gives a measured table (and only those whose other knobs are the runtime's); the
command's refusals."""

from __future__ import annotations

import json

import pytest

from bench import tune
from ark_runtime.scheduler import DeviceSpec

H200 = DeviceSpec(name="H200", num_sms=132, wgmma=True)


@pytest.mark.parametrize("shape", tune.SHAPES, ids=["x".join(map(str, s)) for s in tune.SHAPES])
def test_each_shape_has_settings_and_the_runtimes_choice_is_one_of_them(shape):
    name, combos, chosen = tune.settings(*shape, "bf16", H200)
    assert combos and name
    assert sum(tune._is_chosen(c, chosen) for c in combos) == 1, (combos, chosen)


def _row(m, n, k, knobs, us, chosen, tiles=10):
    rid = f"{m}x{n}x{k}-bf16-" + "-".join(f"{a}={tune._text(tuple(b) if isinstance(b, list) else b)}"
                                          for a, b in knobs.items())
    return {"id": rid, "m": m, "n": n, "k": k, "dtype": "bf16", "knobs": knobs, "chosen": chosen, "us": us,
            "p10_us": us, "p90_us": us, "tiles": tiles}


def test_table_rows_compare_candidates_at_the_runtimes_other_choices():
    result = {"device": "test", "num_sms": 132, "rows": [
        _row(128, 2048, 2048, {"block": [64, 128], "loader": "cp.async"}, 10.0, True),
        _row(128, 2048, 2048, {"block": [64, 128], "loader": "tma"}, 12.0, False),
        _row(128, 2048, 2048, {"block": [128, 128], "loader": "tma"}, 9.0, False),  # another block: left out
        _row(8, 8192, 2048, {"tile": "gemv_mma", "width": 128}, 30.0, True),
        _row(8, 8192, 2048, {"tile": "gemv", "width": 128}, 40.0, False),
    ]}
    loader = tune.table_rows(result, "matmul_sm90.loader", "bench/results/x.json", "H200")
    assert [(r["candidate"], r["us"], r["class"]) for r in loader] == [("cp.async", 10.0, "one wave"),
                                                                       ("tma", 12.0, "one wave")]
    assert loader[0]["at"] == "rows[id=128x2048x2048-bf16-block=64x128-loader=cp.async].us"
    skinny = tune.table_rows(result, "skinny.tile", "bench/results/x.json", "H200")
    assert {(r["candidate"], r["class"]) for r in skinny} == {("gemv_mma", "5-16 rows"), ("gemv", "5-16 rows")}


def test_tune_table_refuses_a_file_outside_the_checkout_and_a_file_that_is_no_run(tmp_path):
    from arkdma_cli.main import main

    bad = tmp_path / "run.json"
    bad.write_text(json.dumps({"rows": []}))
    assert main(["bench", "tune-table", "--from-json", str(bad), "--decision", "skinny.tile", "--device", "H200"]) == 1
