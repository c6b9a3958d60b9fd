"""`arkdma bench ...`: GPU benchmarks (DMA paths, interference, the loop kernel, whole models, tuning) and lowering at
scale, with tables, JSON and plots.

The benchmarks live in bench/ and are imported only when a command runs (they need CuPy and a GPU).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from arkdma_cli.arguments import input_file, output_file, seconds
from driver.errors import ArkdmaError, EngineUnavailable

KiB, MiB = 1024, 1 << 20
COMM_OPS = ("put", "all_reduce", "put_rate", "overlap", "tp_block")  # bench/comm.py's OPS (kept here: no import)


def register(sub) -> None:
    p = sub.add_parser("bench", help="GPU benchmarks: engine DMA against the CPU-controlled and CPU-free paths")
    bsub = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")

    d = bsub.add_parser("dma", help="one-way latency and throughput of GPU-driven copies, every path side by side")
    d.add_argument("--engine", choices=("software",), default="software",
                   help="the engine the GPU drives (software: the software engine's CUDA executor)")
    d.add_argument("--paths", default="software,baseline,prearmed,devgraph",
                   help="comma-separated paths to measure (default: all)")
    d.add_argument("--quick", action="store_true", help="a few points only (a smoke run)")
    d.add_argument("--json", type=Path, help="write device, rows and summaries as JSON here")
    d.add_argument("--plot", type=Path, default=Path("out/bench_dma.png"), help="PNG (default out/bench_dma.png)")
    d.add_argument("--from-json", type=Path, metavar="FILE",
                   help="no measuring: print the tables and draw the plot of a run saved with --json")
    d.set_defaults(func=run_dma)

    i = bsub.add_parser("interference", help="matmul slowdown and %% of ideal overlap for engine and SM copies")
    i.add_argument("--quick", action="store_true", help="a smaller matmul loop, one repeat")
    i.add_argument("--engine-streams", type=int, default=1, help="CUDA streams per engine queue")
    i.add_argument("--json", type=Path, help="write the results as JSON here")
    i.add_argument("--plot", type=Path, default=Path("out/bench_interference.png"),
                   help="PNG (default out/bench_interference.png)")
    i.set_defaults(func=run_interference)

    lp = bsub.add_parser("loop", help="the loop-kernel runtime beside PyTorch eager, CUDA graphs and torch.compile")
    lp.add_argument("--cases", default="a,b,c,d,e,f",
                    help="comma-separated cases: a chain64, b MLP, c transformer block, d dependent tasks, "
                         "e 8192^3 matmul, f copies to pinned host (default: all)")
    lp.add_argument("--no-compile", action="store_true", help="leave out the torch.compile baselines (slow to build)")
    lp.add_argument("--quick", action="store_true", help="smaller shapes and fewer repeats (a smoke run)")
    lp.add_argument("--json", type=Path, help="write device, torch version and rows as JSON here")
    lp.add_argument("--plot", type=Path, default=Path("out/bench_loop.png"), help="PNG (default out/bench_loop.png)")
    lp.set_defaults(func=run_loop)

    mo = bsub.add_parser(
        "models", help="whole models on the loop kernel (Llama-1B decode and prefill, BERT-Large) beside PyTorch "
                       "eager, HF static cache and torch.compile; about 8 minutes on an H200",
        description="Hugging Face Llama-3.2-1B-shaped decode (32-token prompt, 128 new tokens, batch 1 and 8) and "
                    "prefill (128, 512 tokens), BERT-Large (batch 1 and 8, sequence 128 and 384), random weights, "
                    "bf16, on the loop-kernel runtime beside PyTorch eager, Hugging Face's static cache (decode) and "
                    "torch.compile(mode='reduce-overhead'), all in one run on one GPU. The whole default run takes "
                    "roughly 8 minutes on an H200, most of it torch.compile and the runtime's first builds; --quick "
                    "about a minute. Each row is written to the JSON as it is measured; a PNG goes beside it.")
    mo.add_argument("--cases", type=model_cases, default=None, metavar="CASES",
                    help="comma-separated cases or groups (default: all): decode-b1, decode-b8, prefill-128, "
                         "prefill-512, bert-b1-s128, bert-b1-s384, bert-b8-s128, bert-b8-s384; groups decode, "
                         "prefill, bert, all")
    mo.add_argument("--quick", action="store_true",
                    help="the same cases on two-layer models with a small hidden size, 64 decode steps (about a "
                         "minute)")
    mo.add_argument("--no-compile", action="store_true",
                    help="leave out the torch.compile baselines (the longest part of a run)")
    mo.add_argument("--row-timeout", type=seconds, default=300.0, metavar="SECONDS",
                    help="time for every method of one row together; what runs past it is recorded as timed out "
                         "and the run goes on (default 300)")
    mo.add_argument("--json", type=output_file, default=Path("out/bench_models.json"), metavar="FILE",
                    help="device, versions, read bandwidth and rows, rewritten after each row "
                         "(default out/bench_models.json)")
    mo.add_argument("--plot", type=output_file, default=None, metavar="FILE",
                    help="PNG (default: beside the JSON, the same name ending .png)")
    mo.add_argument("--from-json", type=input_file, metavar="FILE",
                    help="no measuring: print the table and draw the plot of a run saved with --json")
    mo.set_defaults(func=run_models)
    cm = bsub.add_parser("comm", help="communication inside the loop kernel (a World on 2 GPUs) beside NCCL and "
                                      "symmetric memory: put latency, all_reduce, message rate, overlap, TP block")
    cm.add_argument("--ops", default=",".join(COMM_OPS),
                    help=f"comma-separated cases (default: all of {','.join(COMM_OPS)})")
    cm.add_argument("--devices", default="0,1", help="the GPUs of rank 0 and rank 1 (default 0,1; on a machine with "
                                                     "one GPU both ranks share it, a loopback)")
    cm.add_argument("--iterations", type=int, default=None,
                    help="iterations timed on each side (default 64; --quick 32)")
    cm.add_argument("--quick", action="store_true", help="a few sizes and the tiny TP block (a minute at most)")
    cm.add_argument("--no-baselines", action="store_true", help="arkdma only: leave out PyTorch + NCCL and "
                                                                "symmetric memory")
    cm.add_argument("--json", type=Path, help="write device, rows and notes as JSON here (each row as measured)")
    cm.add_argument("--plot", type=Path, default=Path("out/bench_comm.png"), help="PNG (default out/bench_comm.png)")
    cm.set_defaults(func=run_comm)

    tu = bsub.add_parser("tune", help="each knob setting of a matmul's kernel at real models' shapes, on the GPU")
    tu.add_argument("--shapes", default=None,
                    help="comma-separated MxNxK (default: decode and prefill projections of Llama-1B, Qwen, BERT)")
    tu.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    tu.add_argument("--json", type=Path, help="write device, SMs and rows as JSON here")
    tu.set_defaults(func=run_tune)

    tt = bsub.add_parser("tune-table", help="rows of a measured table (ark_runtime/ops/tables/) from a committed "
                                            "`bench tune --json` run (no GPU needed)")
    tt.add_argument("--from-json", type=Path, required=True, metavar="FILE", help="the run, a file in the checkout")
    tt.add_argument("--decision", required=True, choices=("matmul_sm90.loader", "skinny.tile"))
    tt.add_argument("--device", required=True, help="the GPU model the rows are for, as tables name it (H200)")
    tt.set_defaults(func=run_tune_table)

    pl = bsub.add_parser("plan", help="how lowering, planning and compiling scale with a model's size (no GPU needed)")
    pl.add_argument("--models", default="bert-large24,llama16",
                    help="comma-separated named models (default: bert-large24,llama16, whole stacks of layers)")
    pl.add_argument("--runtime", action="store_true",
                    help="also time Runtime(model) to its first iteration, twice (needs a GPU)")
    pl.add_argument("--json", type=Path, help="write device, cores and rows as JSON here")
    pl.set_defaults(func=run_plan_scale)


def _need_gpu() -> None:
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        raise EngineUnavailable(f"the benchmarks run on a CUDA GPU: {reason}")
    from host.provider import CudaProvider

    reason = CudaProvider().unavailable_reason()
    if reason:
        raise EngineUnavailable(f"engine software-cuda cannot run here: {reason}")


def _console() -> Console:
    # Logs (not a terminal) get wide tables instead of rich's 80-column default.
    return Console() if sys.stdout.isatty() else Console(width=180)


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description:<58}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _stepper(progress: Progress, console: Console):
    """A step(what) that shows `what` on one open-ended task of `progress`; where the console is a log (no live
    bar), each step on its own line too."""
    task = progress.add_task("starting", total=None)

    def step(what: str) -> None:
        progress.update(task, description=what[:58])
        if not console.is_terminal:
            progress.console.print(what)
    return step


def _write_json(path: Path | None, result, **extra) -> None:
    """result.as_json(), with `extra` fields, into `path` (its folder made), where --json gave one."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**result.as_json(), **extra}, indent=1))


def _save_json(console: Console, path: Path | None, result, **extra) -> None:
    """_write_json, and where it went said."""
    if path is not None:
        _write_json(path, result, **extra)
        console.print(f"json: {path}")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB" if n >= KiB else f"{n} B"


def dma_config(args):
    from bench.dma import PATHS, DmaConfig

    paths = tuple(p for p in args.paths.split(",") if p)
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        raise ArkdmaError(f"unknown path(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(PATHS)}")
    config = DmaConfig(paths=paths)
    if args.quick:
        config = replace(config, sizes=(64, 8 * KiB), inflights=(1, 16), engine_streams=(1,), latency_iterations=50,
                         round_iterations=20, stream_bytes=16 * MiB, repeats=1)
    return config


def dma_tables(result) -> list[Table]:
    from bench.dma import baseline_ratios, fastest, targets, winners

    paths = list(dict.fromkeys(r.path for r in result.rows))
    lat = Table(title=f"one-way latency, us (median; post to completion seen by the GPU; software: best of its "
                      f"configurations) on {result.device}")
    for col in ("direction", "bytes", *paths, "baseline / software"):
        lat.add_column(col, justify="right")
    ratios = {(r["direction"], r["bytes"]): r["speedup"] for r in baseline_ratios(result) if r["path"] == "software"}
    for d, b in sorted({(r.direction, r.bytes) for r in result.rows if r.inflight == 1}):
        cells = []
        for p in paths:
            row = fastest(result, p, d, b)
            cells.append(f"{row.latency_us:.2f}" if row else "-")
        ratio = ratios.get((d, b))
        lat.add_row(d, _size(b), *cells, f"{ratio:.1f}x" if ratio else "-")

    parts = Table(title="software path, one way: where the time goes (us, medians)")
    for col in ("direction", "bytes", "engine streams", "total", "GPU post()", "engine thread issuing", "the rest"):
        parts.add_column(col, justify="right")
    for r in sorted((r for r in result.rows if r.path == "software" and r.inflight == 1 and r.post_us is not None),
                    key=lambda r: (r.direction, r.bytes, r.engine_streams or 0)):
        rest = r.latency_us - r.post_us - (r.engine_issue_us or 0)
        parts.add_row(r.direction, _size(r.bytes), str(r.engine_streams), f"{r.latency_us:.2f}", f"{r.post_us:.2f}",
                      f"{r.engine_issue_us:.2f}" if r.engine_issue_us is not None else "-", f"{rest:.2f}")

    thr = Table(title="throughput, GB/s (software: best engine configuration and layout)")
    for col in ("direction", "bytes", "in flight", *paths, "winner"):
        thr.add_column(col, justify="right")
    for w in winners(result):
        best = dict(w["ranking"])
        thr.add_row(w["direction"], _size(w["bytes"]), str(w["inflight"]),
                    *(f"{best[p]:.2f}" if p in best else "-" for p in paths), w["winner"])

    tgt = Table(title="targets (software engine)")
    for col in ("target", "goal", "measured", "met", "layout", "streams", "scattered GB/s"):
        tgt.add_column(col, justify="right")
    for t in targets(result):
        tgt.add_row(t["target"], t["goal"], f"{t['measured']:.2f}", "yes" if t["met"] else "[red]no[/red]", t["layout"],
                    str(t["engine_streams"]), f"{t['scattered']:.2f}" if t["scattered"] is not None else "-")
    return [lat, parts, thr, tgt]


def run_dma(args, console: Console | None = None) -> int:
    console = console or _console()
    from bench import dma

    if args.from_json:
        try:
            result = dma.DmaResult.from_json(json.loads(args.from_json.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArkdmaError(f"{args.from_json} is not a result of `arkdma bench dma --json`: {exc}") from exc
    else:
        config = dma_config(args)
        _need_gpu()
        with _progress(console) as progress:
            task = progress.add_task("starting", total=config.points())

            def tick(what: str) -> None:
                progress.update(task, description=what)
                progress.advance(task)

            result = dma.run(config, tick)
    for table in dma_tables(result):
        console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    dma.plot(result, args.plot)
    console.print(f"plot: {args.plot}")
    if args.json and not args.from_json:
        _save_json(console, args.json, result, winners=dma.winners(result), baseline_ratios=dma.baseline_ratios(result),
                   targets=dma.targets(result))
    return 0


def interference_table(result) -> Table:
    t = Table(title=f"interference with {result.matmul} x{result.config['matmuls']} on {result.device} "
                    f"({result.tflops_alone:.0f} TFLOP/s alone)")
    for col in ("transfer", "GB moved", "T_compute ms", "T_comm ms", "T_concurrent ms", "matmul slowdown",
                "GB/s alone -> together", "% of ideal"):
        t.add_column(col, justify="right")
    for k in result.kinds:
        t.add_row(k.kind, f"{k.bytes / 1e9:.2f}", f"{k.t_compute_ms:.2f}", f"{k.t_comm_ms:.2f}", f"{k.t_concurrent_ms:.2f}",
                  f"{k.matmul_slowdown_pct:+.1f}%", f"{k.gbps_alone:.1f} -> {k.gbps_concurrent:.1f}", f"{k.pct_of_ideal:.1f}")
    return t


def run_interference(args, console: Console | None = None) -> int:
    console = console or _console()
    if args.engine_streams < 1:
        raise ArkdmaError(f"--engine-streams must be at least 1, not {args.engine_streams}")
    _need_gpu()
    from bench import interference

    config = interference.InterferenceConfig(engine_streams=args.engine_streams)
    if args.quick:
        config = replace(config, matmul_n=4096, matmuls=10, repeats=1)
    with _progress(console) as progress:
        result = interference.run(config, _stepper(progress, console))
    console.print(interference_table(result))
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    interference.plot(result, args.plot)
    console.print(f"plot: {args.plot}")
    _save_json(console, args.json, result)
    return 0


def loop_table(result) -> Table:
    t = Table(title=f"loop kernel against PyTorch on {result.device} (torch {result.torch}), us per iteration")
    for col in ("case", "model", "arkdma (p10-p90)", "round trip (p10-p90)", "graph round trip (p10-p90)",
                "x graph trip", "host us (graph's)", "eager", "CUDA graph", "compile", "x best torch",
                "path / copy us", "check"):
        t.add_column(col, justify="left" if col in ("case", "model", "path / copy us") else "right")
    fmt = lambda v: "-" if v is None else f"{v:,.1f}"  # noqa: E731
    spread = lambda m, lo, hi: fmt(m) + ("" if lo is None or hi is None else f" ({lo:,.1f}-{hi:,.1f})")  # noqa: E731
    for r in result.rows:
        extra = f"{r.path} {r.copy_us:.1f}" if r.path else (f"{r.per_edge_us:.2f}/edge" if r.per_edge_us else "")
        t.add_row(r.case, r.model, f"{r.arkdma_us:,.1f} ({r.arkdma_p10_us:,.1f}-{r.arkdma_p90_us:,.1f})",
                  spread(r.roundtrip_us, r.roundtrip_p10_us, r.roundtrip_p90_us),
                  spread(r.graph_roundtrip_us, r.graph_roundtrip_p10_us, r.graph_roundtrip_p90_us),
                  "-" if r.roundtrip_ratio is None else f"{r.roundtrip_ratio:.2f}",
                  "-" if r.host_us is None else f"{r.host_us:,.1f} ({fmt(r.graph_host_us)})", fmt(r.eager_us),
                  fmt(r.graph_us), fmt(r.compile_us), f"{r.ratio_to_best_torch:.2f}", extra,
                  f"ok {r.max_rel_err:.1e}" if r.ok else f"[red]WRONG {r.max_rel_err:.2e}[/red]")
    return t


def profile_table(profile: dict, top: int = 8) -> str:
    """The ops of a loop-bench row's profile that took longest, one line each."""
    from ark_runtime.profile import Profile

    return Profile.from_json(profile).table(top)


def run_loop(args, console: Console | None = None) -> int:
    console = console or _console()
    from bench import loop

    cases = tuple(c for c in args.cases.split(",") if c)
    bad = [c for c in cases if c not in loop.CASES]
    if bad or not cases:
        raise ArkdmaError(f"unknown case(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(loop.CASES)}")
    _need_gpu()
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise EngineUnavailable(f"bench loop compares with PyTorch, which is not installed here: {exc}") from None
    config = loop.LoopConfig(cases=cases, compile=not args.no_compile, quick=args.quick)
    if args.quick:
        config = replace(config, reps=10, samples=3)
    def finished(result) -> None:  # each case's row printed and saved at once: a cut-off run keeps them
        r = result.rows[-1]
        progress.console.print(f"{r.case} {r.model}: arkdma {r.arkdma_us:.1f} us, best PyTorch x"
                               f"{r.ratio_to_best_torch:.2f}, {'ok' if r.ok else 'WRONG'}")
        if r.profile and not console.is_terminal:  # a log keeps where the time went
            progress.console.print(profile_table(r.profile))
        _write_json(args.json, result)
        sys.stdout.flush()

    with _progress(console) as progress:
        step = _stepper(progress, console)
        result = loop.run(config, step, finished)
    console.print(loop_table(result))
    for r in result.rows:
        for note in r.notes:
            console.print(f"[yellow]note:[/yellow] {r.case} {r.model}: {note}")
    loop.plot(result, args.plot)
    console.print(f"plot: {args.plot}")
    _save_json(console, args.json, result)
    wrong = [f"{r.case} {r.model}" for r in result.rows if not r.ok]
    if wrong:
        console.print(f"[red]results differ from PyTorch: {', '.join(wrong)}[/red]")
        return 1
    return 0


def model_cases(text: str):
    """--cases of `bench models`: an argparse type, so a bad name is a usage error before any work."""
    import argparse

    from bench.models import CaseError, pick_cases

    try:
        return pick_cases(text)
    except CaseError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def models_table(result) -> Table:
    bw = f"; read {result.read_gbps:,.0f} GB/s ({result.read_method})" if result.read_gbps else ""
    t = Table(title=f"whole models on {result.device} (torch {result.versions.get('torch', '?')}{bw}), ms per decode "
                    "step or forward")
    for col in ("model", "case", "arkdma (p10-p90)", "run(1)+wait", "eager", "HF static", "compiled", "compiled/arkdma",
                "% read bw", "check", "errors"):
        t.add_column(col, justify="left" if col in ("model", "case", "check", "errors") else "right")
    fmt = lambda v: "-" if v is None else f"{v:,.3f}"  # noqa: E731
    for r in result.rows:
        ark = "-" if r.arkdma_ms is None else fmt(r.arkdma_ms) + (
            "" if r.arkdma_p10_ms is None else f" ({r.arkdma_p10_ms:,.3f}-{r.arkdma_p90_ms:,.3f})")
        if r.ok is None:
            check = "-"
        elif r.tokens_compared is not None:
            check = (f"{r.tokens_equal}/{r.tokens_compared} equal, {r.near_ties} near-tie"
                     f"{'' if r.near_ties == 1 else 's'}")
            check += "" if r.ok else f", [red]{r.divergences - r.near_ties} WRONG[/red]"
        else:
            check = f"ok {r.max_rel_err:.1e}" if r.ok else f"[red]WRONG {r.max_rel_err:.2e}[/red]"
        errors = "; ".join(f"{k}: {v[:70]}" for k, v in r.errors.items())
        t.add_row(r.model, r.case, ark, fmt(r.latency_ms), fmt(r.eager_ms), fmt(r.static_ms), fmt(r.compiled_ms),
                  "-" if r.ratio_to_compiled is None else f"{1 / r.ratio_to_compiled:.2f}",
                  "-" if r.pct_hbm is None else f"{r.pct_hbm:.1f}", check,
                  f"[red]{errors}[/red]" if r.failed else errors)
    return t


def run_models(args, console: Console | None = None, measurer=None) -> int:
    """`measurer`: what measures (bench.models.Measurer); default the GPU's (bench/model_measure.py)."""
    console = console or _console()
    from bench import models

    plot_path = args.plot or (args.from_json or args.json).with_suffix(".png")
    if args.from_json:
        try:
            result = models.ModelsResult.from_json(json.loads(args.from_json.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArkdmaError(f"{args.from_json} is not a result of `arkdma bench models --json`: {exc}") from exc
    else:
        config = models.ModelsConfig(cases=args.cases or models.CASES, compile=not args.no_compile,
                                     row_timeout_s=args.row_timeout)
        if args.quick:
            config = models.quick_config(config)
        if measurer is None:
            _need_gpu()
            try:
                import torch  # noqa: F401
                import transformers  # noqa: F401
            except ImportError as exc:
                raise EngineUnavailable(f"bench models compares with PyTorch and Hugging Face transformers: {exc} "
                                        "(pip install -e '.[torch]')") from None
            from bench.model_measure import TorchMeasurer

            measurer = TorchMeasurer(config)

        def finished(result) -> None:  # each row printed and saved at once: a cut-off run keeps them
            r = result.rows[-1]
            figures = ", ".join(f"{k} {v:.3f} ms" for k, v in (("arkdma", r.arkdma_ms), ("compiled", r.compiled_ms))
                                if v is not None)
            progress.console.print(f"{r.model} {r.case}: {figures or 'no figures'}"
                                   + "".join(f"; {k} failed: {v}" for k, v in r.errors.items()))
            if r.profile:
                progress.console.print(profile_table(r.profile, top=12), markup=False, highlight=False)
            models.save(result, args.json)
            sys.stdout.flush()

        with _progress(console) as progress:
            step = _stepper(progress, console)
            result = models.run(config, measurer, step, finished)
        models.save(result, args.json)
    console.print(models_table(result))
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    for r in result.rows:
        for note in r.notes:
            console.print(f"[yellow]note:[/yellow] {r.case}: {note}")
    models.plot(result, plot_path)
    console.print(f"plot: {plot_path}")
    if not args.from_json:
        console.print(f"json: {args.json}")
    bad = [r.case for r in result.rows if r.ok is False or r.failed]
    if bad:
        console.print(f"[red]arkdma failed or differs from PyTorch eager: {', '.join(bad)}[/red]")
        return 1
    return 0


def comm_config(args):
    """The run `bench comm`'s arguments ask for; ArkdmaError naming what is wrong."""
    from bench import comm

    ops = tuple(o for o in args.ops.split(",") if o)
    bad = [o for o in ops if o not in comm.OPS]
    if bad or not ops:
        raise ArkdmaError(f"unknown op(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(comm.OPS)}")
    from examples.two_gpus import parse_devices

    try:
        devices = parse_devices(args.devices)
    except ValueError as exc:
        raise ArkdmaError(str(exc)) from None
    config = comm.CommConfig(ops=ops, devices=devices, baselines=not args.no_baselines)
    if args.quick:
        config = comm.quick(config)
    if args.iterations is not None:
        if args.iterations < 2:
            raise ArkdmaError(f"--iterations must be at least 2 (time is the gap between iterations), not "
                              f"{args.iterations}")
        config = replace(config, iterations=args.iterations)
    return config


def comm_table(result) -> Table:
    where = "loopback: both ranks on one GPU" if result.loopback else f"GPUs {', '.join(map(str, result.devices))}"
    t = Table(title=f"communication inside the loop kernel on {result.device} ({where}), us (median, p10-p90)")
    for col in ("op", "bytes", "arkdma us", "NCCL us", "symm us", "arkdma GB/s", "NCCL GB/s", "x NCCL", "overlap",
                "note"):
        t.add_column(col, justify="left" if col in ("op", "note", "overlap") else "right")
    fmt = lambda v, p=1: "-" if v is None else f"{v:,.{p}f}"  # noqa: E731
    for r in result.rows:
        ark = "-" if r.arkdma_us is None else f"{r.arkdma_us:,.2f} ({r.arkdma_p10_us:,.2f}-{r.arkdma_p90_us:,.2f})"
        nccl = "-" if r.nccl_us is None else f"{r.nccl_us:,.2f} {r.nccl_how or ''}".strip()
        symm = "-" if r.symm_us is None else f"{r.symm_us:,.2f} {r.symm_algorithm}"
        over = ""
        if r.op == "overlap":
            over = (f"{fmt(r.pct_of_ideal)}% ideal, matmul {fmt(r.matmul_slowdown_pct)}% (NCCL "
                    f"{fmt(r.nccl_pct_of_ideal)}%, {fmt(r.nccl_matmul_slowdown_pct)}%)")
        note = ""
        if r.error:
            note = f"[red]FAILED: {r.error[:90]}[/red]"
        elif r.max_rel_err is not None:
            note = f"err {r.max_rel_err:.1e}"
        if r.nccl_error and not r.error:
            note = (note + " " if note else "") + f"no NCCL: {r.nccl_error[:60]}"
        t.add_row(r.op, _size(r.bytes), ark, nccl, symm, fmt(r.arkdma_gbps), fmt(r.nccl_gbps),
                  "-" if r.speedup is None else f"{r.speedup:.2f}", over, note)
    return t


def run_comm(args, console: Console | None = None) -> int:
    console = console or _console()
    config = comm_config(args)
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        raise EngineUnavailable(f"bench comm runs on one or two CUDA GPUs: {reason}")
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise EngineUnavailable(f"bench comm compares with PyTorch + NCCL, which is not installed here: {exc}") from None
    from bench import comm, comm_plot

    shown = 0

    def saved(result) -> None:  # each row said and saved at once: a run cut short keeps what it measured
        nonlocal shown
        for r in result.rows[shown:]:
            what = "FAILED: " + r.error[:200] if r.error else (
                f"arkdma {r.arkdma_us:.2f} us, NCCL {'-' if r.nccl_us is None else f'{r.nccl_us:.2f}'} us")
            progress.console.print(f"{r.op} {_size(r.bytes)}: {what}")
        shown = len(result.rows)
        _write_json(args.json, result)
        sys.stdout.flush()

    with _progress(console) as progress:
        step = _stepper(progress, console)
        result = comm.run(config, step, saved)
    console.print(comm_table(result))
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note[:1500]}")
    comm_plot.plot(result, args.plot)
    console.print(f"plot: {args.plot}")
    _save_json(console, args.json, result)
    failed = [f"{r.op} {_size(r.bytes)}" for r in result.rows if r.error]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/red]")
        return 1
    return 0


def plan_scale_table(result) -> Table:
    t = Table(title=f"lowering at scale on {result.device}, seconds")
    for col in ("model", "ops (run)", "tiles", "cases", "rewrite", "variants", "plan", "generate", "NVRTC", "total",
                "cached", "Runtime first", "Runtime again"):
        t.add_column(col, justify="left" if col == "model" else "right")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in result.rows:
        t.add_row(r.model, f"{r.ops_written} ({r.ops_run})", f"{r.tiles:,}", str(r.cases), fmt(r.rewrite_s),
                  fmt(r.variants_s), fmt(r.plan_s), fmt(r.generate_s), fmt(r.compile_s), fmt(r.total_s),
                  fmt(r.cached_lower_s), fmt(r.runtime_first_s), fmt(r.runtime_again_s))
    return t


def run_plan_scale(args, console: Console | None = None) -> int:
    console = console or _console()
    from ark_runtime.models import NAMED, STACKS
    from bench import plan_scale

    names = tuple(n for n in args.models.split(",") if n)
    bad = [n for n in names if n not in NAMED and n not in STACKS]
    if bad or not names:
        raise ArkdmaError(f"unknown model(s) {', '.join(bad) or '(none given)'}; choose from "
                          f"{', '.join((*STACKS, *NAMED))}")
    if args.runtime:
        _need_gpu()
    with _progress(console) as progress:
        task = progress.add_task("starting", total=len(names))

        def step(what: str) -> None:
            progress.update(task, description=what)
            progress.advance(task)

        result = plan_scale.run(names, args.runtime, step)
    console.print(plan_scale_table(result))
    _save_json(console, args.json, result)
    return 0


def _shapes(text: str | None):
    from bench.tune import SHAPES

    if text is None:
        return SHAPES
    out = []
    for part in text.split(","):
        try:
            m, n, k = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise ArkdmaError(f"--shapes: {part!r} is not MxNxK (three positive ints)") from None
        if min(m, n, k) < 1:
            raise ArkdmaError(f"--shapes: {part!r} has a dimension below 1")
        out.append((m, n, k))
    return tuple(out)


def run_tune(args, console: Console | None = None) -> int:
    console = console or _console()
    shapes = _shapes(args.shapes)
    _need_gpu()
    from bench import tune

    with _progress(console) as progress:
        result = tune.run(shapes, args.dtype, _stepper(progress, console))
    t = Table(title=f"matmul knob settings on {result.device}, us an iteration")
    for col in ("shape", "runtime's choice", "us", "fastest", "us", "x"):
        t.add_column(col, justify="left" if col in ("shape", "runtime's choice", "fastest") else "right")
    for s in tune.summary(result):
        t.add_row("x".join(map(str, s["shape"][:3])) + f" {s['shape'][3]}", str(s["chosen"]),
                  f"{s['chosen_us']:.1f}" if s["chosen_us"] else "-", str(s["best"]), f"{s['best_us']:.1f}",
                  f"{s['speedup']:.2f}" if s["speedup"] else "-")
    console.print(t)
    _save_json(console, args.json, result)
    return 0


def run_tune_table(args, console: Console | None = None) -> int:
    """Replaces the table's rows from this source with the run's, keeping the others."""
    console = console or _console()
    from ark_runtime.ops.measured import TABLES
    from bench import tune

    root = Path(__file__).resolve().parents[1]
    try:
        source = args.from_json.resolve().relative_to(root).as_posix()
    except ValueError:
        raise ArkdmaError(f"{args.from_json} is not in the checkout: commit the run under bench/results/ first, so "
                          "the table's rows can name it") from None
    try:
        result = json.loads(args.from_json.read_text())
        rows = tune.table_rows(result, args.decision, source, args.device)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArkdmaError(f"{args.from_json} is not a run of `arkdma bench tune --json`: {exc}") from exc
    if not rows:
        raise ArkdmaError(f"{args.from_json} has no rows for {args.decision}")
    path = TABLES / f"{args.decision}.json"
    table = json.loads(path.read_text())
    table["rows"] = [r for r in table["rows"] if r.get("source") != source] + rows
    path.write_text(json.dumps(table, indent=1) + "\n")
    console.print(f"{path.name}: {len(rows)} rows from {source}")
    return 0
