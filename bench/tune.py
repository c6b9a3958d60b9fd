"""`arkdma bench tune`: each knob setting of a matmul's kernel (OpSpec.knobs: the wgmma tile's block and loader, the
skinny tiles' kind and width, matmul.cuh's block) measured on the GPU, one resident loop kernel per setting, at the
shape classes real models have (decode at batch 1 and 8, prefill at 128 and 512 tokens; Llama-1B-, Qwen- and
BERT-Large-shaped projections). `table_rows` turns a committed run into rows of ark_runtime/ops/tables/, so the
runtime's choices rest on what was measured (ops/measured.py).

Each setting's time is the median gap between consecutive iterations by the GPU clock (p10, p90 beside it), over
RING iterations after two of warm-up, the inputs random normal, the weights scaled by 1/sqrt(K).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass, field

# (M, N, K): decode and prefill projections of Llama-3.2-1B (hidden 2048, MLP 8192), Qwen2-0.5B (896, 4864) and
# BERT-Large (1024, 4096)
SHAPES = (
    (1, 2048, 2048), (8, 8192, 2048), (8, 2048, 8192), (16, 896, 896),
    (128, 2048, 2048), (128, 8192, 2048), (128, 2048, 8192), (128, 4864, 896),
    (512, 2048, 2048), (512, 8192, 2048), (384, 1024, 1024), (384, 4096, 1024),
)


@dataclass
class TuneRow:
    id: str  # "MxNxK-dtype-knob=value-..."
    m: int
    n: int
    k: int
    dtype: str
    knobs: dict
    chosen: bool  # the setting the runtime chooses today (variant without knobs)
    us: float
    p10_us: float
    p90_us: float
    tiles: int


@dataclass
class TuneResult:
    device: str
    num_sms: int
    rows: list[TuneRow] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"device": self.device, "num_sms": self.num_sms, "rows": [asdict(r) for r in self.rows]}


def _model(m: int, n: int, k: int, dtype: str):
    from ark_runtime.model import Model

    model = Model(f"mm{m}x{n}x{k}")
    model.output(model.matmul(model.input("a", (m, k), dtype), model.input("b", (k, n), dtype)))
    return model


def settings(m: int, n: int, k: int, dtype: str, device) -> tuple[str, list[dict], dict]:
    """The matmul's output name, every knob setting it has on `device`, and the variant it gets unset."""
    from ark_runtime.lower import LowerOptions, lower
    from ark_runtime.ops import spec

    lw = lower(_model(m, n, k, dtype), device, LowerOptions(split_k=False), cache=False)
    op = lw.model.ops[0]
    knobs = spec("matmul").knobs(lw.model, op, device)
    combos = [dict(zip(knobs, values)) for values in itertools.product(*knobs.values())]
    return lw.model.tensors[op.output].name, combos, lw.plan.variants[0]


def _is_chosen(knobs: dict, variant: dict) -> bool:
    for name, value in knobs.items():
        have = {"block": tuple(variant["block"]), "loader": variant.get("loader"), "tile": variant["template"],
                "width": variant["block"][1]}.get(name)
        if have != value:
            return False
    return True


def run(shapes=SHAPES, dtype: str = "bf16", progress=None) -> TuneResult:
    import cupy
    import numpy as np

    from ark_runtime.host_values import to_bits
    from ark_runtime.kernel.codes import RING
    from ark_runtime.runtime import Runtime
    from ark_runtime.scheduler import DeviceSpec, device_family

    say = progress or (lambda what: None)
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    device = DeviceSpec(name=device_family(name), num_sms=props["multiProcessorCount"],
                        wgmma=cupy.cuda.Device().compute_capability == "90")
    result = TuneResult(name, device.num_sms)
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        out, combos, chosen = settings(m, n, k, dtype, device)
        model = _model(m, n, k, dtype)
        values = {"a": rng.standard_normal((m, k)), "b": rng.standard_normal((k, n)) / np.sqrt(k)}
        bind = {t.name: cupy.asarray(to_bits(t, values[t.name])) for t in model.tensors if t.producer is None}
        for knobs in combos:
            rid = f"{m}x{n}x{k}-{dtype}-" + "-".join(f"{key}={_text(v)}" for key, v in knobs.items())
            say(rid)
            with Runtime(_model(m, n, k, dtype), bind=bind, split_k=False, knobs={out: knobs}) as rt:
                rt.run(2)
                rt.wait()
                rt.run(RING + 1)
                rt.wait(timeout=120)
                gaps = np.diff(rt.iteration_ns()) / 1e3
                tiles = len(rt.plan.tiles)
            p10, p50, p90 = np.percentile(gaps, [10, 50, 90])
            result.rows.append(TuneRow(rid, m, n, k, dtype, {key: _json(v) for key, v in knobs.items()},
                                       _is_chosen(knobs, chosen), float(p50), float(p10), float(p90), tiles))
    return result


def _text(v) -> str:
    return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _json(v):
    return list(v) if isinstance(v, tuple) else v


def table_rows(result: dict, decision: str, source: str, family: str) -> list[dict]:
    """Rows for ark_runtime/ops/tables/<decision>.json from a committed `--json` run at `source`: each candidate of the
    decision beside the others at the same shape, every other knob at the value the runtime chooses for it (rows
    whose other knobs differ are left out), classed as the decision classes shapes."""
    from ark_runtime.ops.matmul import skinny_class

    out = []
    for r in result["rows"]:
        knobs = r["knobs"]
        if decision == "matmul_sm90.loader" and "loader" in knobs:
            candidate, others = knobs["loader"], {k: v for k, v in knobs.items() if k != "loader"}
            klass = "waves" if r["tiles"] > result["num_sms"] else "one wave"
        elif decision == "skinny.tile" and "tile" in knobs:
            candidate, others = knobs["tile"], {k: v for k, v in knobs.items() if k != "tile"}
            klass = skinny_class(r["m"])
        else:
            continue
        same = [o for o in result["rows"] if (o["m"], o["n"], o["k"], o["dtype"]) == (r["m"], r["n"], r["k"], r["dtype"])
                and o["chosen"] and all(o["knobs"].get(k) == v for k, v in others.items())]
        if not same:  # the other knobs are not the runtime's own choice here
            continue
        out.append({"device": family, "class": klass, "case": f"{r['m']}x{r['n']}x{r['k']}-{r['dtype']}",
                    "candidate": candidate, "us": r["us"], "source": source, "at": f"rows[id={r['id']}].us"})
    return out


def summary(result: TuneResult) -> list[dict]:
    """Per shape: the runtime's choice, the fastest setting, and how much faster it is."""
    out = []
    for shape, rows in itertools.groupby(result.rows, key=lambda r: (r.m, r.n, r.k, r.dtype)):
        rows = list(rows)
        best = min(rows, key=lambda r: r.us)
        chosen = [r for r in rows if r.chosen]
        out.append({"shape": shape, "best": best.knobs, "best_us": best.us,
                    "chosen": chosen[0].knobs if chosen else None, "chosen_us": chosen[0].us if chosen else None,
                    "speedup": (chosen[0].us / best.us) if chosen else None,
                    "median_setting_us": statistics.median(r.us for r in rows)})
    return out
