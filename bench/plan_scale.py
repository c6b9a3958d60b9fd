"""`arkdma bench plan`: how lowering a model scales with its size, pass by pass: rewriting (fusion, split-K), choosing
each op's variant, cutting tiles and planning them (with the plan's checks), generating the kernel's source and
compiling it with NVRTC (no GPU needed), then lowering again from the cache by content. With `runtime` (a GPU), also
how long `Runtime(model)` takes to its first finished iteration, the first time in this process and again.

The models: whole stacks of layers (ark_runtime.models.STACKS: 24 BERT-Large-shaped layers, 16 Llama-1B-shaped
layers), every layer with its own weights, as a real checkpoint has them.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field


@dataclass
class ScaleRow:
    model: str
    ops_written: int
    ops_run: int  # after fusion and split-K
    tiles: int
    cases: int  # distinct op bodies in the kernel: identical layers share them
    source_kb: float
    rewrite_s: float
    variants_s: float
    plan_s: float  # tiles, dependencies, placement, streams and the checks
    generate_s: float
    compile_s: float  # NVRTC, for sm_90a
    total_s: float  # rewrite through compile
    cached_lower_s: float  # lower() again, from the cache
    runtime_first_s: float | None = None  # Runtime(model) to its first iteration done, on the GPU
    runtime_again_s: float | None = None


@dataclass
class ScaleResult:
    device: str  # where it ran: the CPU, and the GPU when the runtime was timed
    cores: int
    rows: list[ScaleRow] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"device": self.device, "cores": self.cores, "rows": [asdict(r) for r in self.rows]}


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def measure(name: str, num_sms: int = 132, runtime: bool = False) -> ScaleRow:
    from ark_runtime import lower_cache, models
    from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
    from ark_runtime.lower import LowerOptions, lower, rewrite
    from ark_runtime.plan import build_plan, choose_variants
    from ark_runtime.scheduler import DeviceSpec
    from driver.gpu import compile

    model = models.named(name)
    device = DeviceSpec(num_sms=num_sms)
    runs, t_rewrite = _timed(lambda: rewrite(model, device, LowerOptions()))
    variants, t_variants = _timed(lambda: choose_variants(runs, device))
    plan, t_plan = _timed(lambda: build_plan(runs, device, variants=variants))
    source, t_generate = _timed(lambda: generate(runs, plan))
    _, t_compile = _timed(lambda: compile.cubin(source.text, "sm_90a", (f"-I{INCLUDE_DIR}",)))
    with tempfile.TemporaryDirectory() as folder:
        saved = os.environ.get(lower_cache.ENV)
        os.environ[lower_cache.ENV] = folder
        try:
            lower(model, device)
            _, t_cached = _timed(lambda: lower(model, device))
        finally:
            if saved is None:
                os.environ.pop(lower_cache.ENV)
            else:
                os.environ[lower_cache.ENV] = saved
    row = ScaleRow(name, len(model.ops), len(runs.ops), len(plan.tiles), max(source.op_cases) + 1,
                   round(len(source.text) / 1024, 1), t_rewrite, t_variants, t_plan, t_generate, t_compile,
                   t_rewrite + t_variants + t_plan + t_generate + t_compile, t_cached)
    if runtime:
        row.runtime_first_s, row.runtime_again_s = _runtime_start(model)
    return row


def _runtime_start(model) -> tuple[float, float]:
    """Runtime(model) to its first iteration done, twice in this process (the second finds the lowered model and
    the kernel in their caches)."""
    from ark_runtime.runtime import Runtime

    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        with Runtime(model) as rt:
            rt.run(1)
            rt.wait(timeout=120)
            times.append(time.perf_counter() - t0)
    return times[0], times[1]


def run(names: tuple[str, ...], runtime: bool = False, progress=None) -> ScaleResult:
    say = progress or (lambda what: None)
    device = f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"
    if runtime:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        device += f"; {props['name'].decode() if isinstance(props['name'], bytes) else props['name']}"
    result = ScaleResult(device, os.cpu_count() or 1)
    for name in names:
        say(f"{name}: lowering and compiling")
        result.rows.append(measure(name, runtime=runtime))
    return result
