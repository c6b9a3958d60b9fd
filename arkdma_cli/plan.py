"""`arkdma plan MODEL`: a model's plan (tiles, per-SM streams, counters) built and checked without a GPU,
written as JSON and drawn as a timeline."""

from __future__ import annotations

import argparse
import json

from arkdma_cli.arguments import bounded_int, output_file
from driver.errors import ArkdmaError


def register(sub) -> None:
    from ark_runtime.models import NAMED

    p = sub.add_parser(
        "plan", help="plan a model for the loop kernel (tiles on SMs, counters) and check it, no GPU needed",
        description="Cuts the model's ops into tiles, places them on the SMs (one resident CTA each, with its "
                    "instruction stream), orders them across SMs with counters that only grow, and checks the "
                    "invariants: every tile once, every dependency ordered (also against the previous iteration), "
                    f"no deadlock with every CTA resident. Named models: {', '.join(NAMED)}.")
    p.add_argument("model", metavar="MODEL", help="a named model (see above)")
    p.add_argument("--sms", type=bounded_int(1, 1024, "SM count"), default=132,
                   help="SMs to plan for (default 132, an H100)")
    p.add_argument("--placement", choices=("cost", "round-robin"), default="cost",
                   help="cost: each tile where it starts first (default); round-robin: tile i on SM i mod SMs")
    p.add_argument("--json", type=output_file, default=None, metavar="FILE", help="write the plan as JSON")
    p.add_argument("--png", type=output_file, default=None, metavar="FILE", help="draw the plan's timeline")
    p.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from ark_runtime.lower import LowerError, LowerOptions, lower
    from ark_runtime.model import ModelError
    from ark_runtime.models import named
    from ark_runtime.scheduler import DeviceSpec

    try:
        model = named(args.model)
        lowered = lower(model, DeviceSpec(num_sms=args.sms), LowerOptions(placement=args.placement))
    except (ModelError, LowerError) as exc:
        raise ArkdmaError(str(exc)) from exc
    plan, runs = lowered.plan, lowered.model
    stats = plan.stats()
    changes = [what for what, done in (("elementwise chains fused", any(o.kind == "fused" for o in runs.ops)),
                                       ("short matmuls split along K", any(o.kind == "split_sum" for o in runs.ops)))
               if done]
    fused = f" ({len(model.ops)} as written; {', '.join(changes)})" if changes else ""
    print(f"{plan.model['name']}: " + ", ".join(f"{k} {v}" for k, v in stats.items()) + f"{fused}; invariants hold")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(plan.as_json(), separators=(",", ":")))
        print(f"wrote {args.json}")
    if args.png:
        from ark_runtime.timeline import draw

        print(f"wrote {draw(plan, args.png)}")
    return 0
