"""One lowering pipeline: a model as written to what the loop kernel runs, for `Runtime`, `arkdma plan` and the tests.

    lowered = lower(model, DeviceSpec(num_sms=132), LowerOptions())
    lowered.plan        # tiles on SMs, per-SM streams, counters (plain JSON-able data)
    lowered.source      # the kernel's CUDA C++ and what the host needs to launch it

The passes, in order: check the graph (graph_check.py), fuse elementwise chains (fusion.py), cut short matmuls along
K (split_k.py), choose each op's kernel variant and plan (plan.py: tiles, placement, streams, checked), generate the
kernel (kernel/codegen.py). Nothing here touches a GPU; the result is kept by content (lower_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ark_runtime import lower_cache
from ark_runtime.fusion import fuse
from ark_runtime.kernel.codegen import KernelSource, generate
from ark_runtime.kernel.program import ProgramArrays, build_program
from ark_runtime.model import Model, ModelError
from ark_runtime.plan import Plan, PlanError, build_plan, choose_variants
from ark_runtime.scheduler import PLACEMENTS, DeviceSpec
from ark_runtime.split_k import split_k as split_k_matmuls
from ark_runtime.tiling import switched_off

SPLIT_K_ENV = "ARK_SPLIT_K"  # "0": split_k=None means off
COPY_PATHS = ("sm", "engine", "graph")  # how a copy op moves its bytes (LowerOptions.copy_paths)


class LowerError(ValueError):
    """A model the pipeline cannot lower; the message names the op or tensor and what to change."""


@dataclass(frozen=True)
class LowerOptions:
    fuse_chains: bool = True  # elementwise chains as one op (fusion.py)
    split_k: bool | None = None  # short matmuls cut along K (split_k.py); None: on unless $ARK_SPLIT_K is off
    placement: str = "cost"  # scheduler.PLACEMENTS
    # per copy op, by the name of the tensor it writes: "sm" (the CTAs' stores, cut into tiles), "engine" (one tile
    # posting a DMA) or "graph" (one tile launching a device graph); a copy not named posts a DMA
    copy_paths: tuple[tuple[str, str], ...] = ()
    # per op, by the name of the tensor it writes (in the model as run), some of its spec's knobs set (a tuner's
    # candidate: OpSpec.knobs), as ((name, ((knob, value), ...)), ...)
    knobs: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.fuse_chains, bool):
            raise LowerError(f"fuse_chains is True or False, not {self.fuse_chains!r}")
        if self.split_k not in (None, True, False):
            raise LowerError(f"split_k is True, False or None (None: ${SPLIT_K_ENV}, on unless 0), not "
                             f"{self.split_k!r}")
        if self.placement not in PLACEMENTS:
            raise LowerError(f"placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        for name, path in self.copy_paths:
            if path not in COPY_PATHS:
                raise LowerError(f"copy path {path!r} of {name!r} is not one of {', '.join(COPY_PATHS)}")

    @property
    def splits(self) -> bool:
        return (not switched_off(SPLIT_K_ENV)) if self.split_k is None else self.split_k


@dataclass(frozen=True)
class Lowered:
    source_model: Model  # as written
    model: Model  # as run: chains fused, matmuls split
    device: DeviceSpec
    options: LowerOptions
    plan: Plan
    source: KernelSource
    copy_paths: dict[int, str] = field(default_factory=dict)  # per copy op of `model`: "sm", "engine" or "graph"
    program: ProgramArrays | None = None  # the plan's streams as the kernel's instruction arrays (kernel/program.py)

    @property
    def graph_ops(self) -> list[int]:
        return [op for op, path in sorted(self.copy_paths.items()) if path == "graph"]


def rewrite(model: Model, device: DeviceSpec, options: LowerOptions = LowerOptions()) -> Model:
    """The model as the kernel runs it: the rewriting passes only (no plan, no source)."""
    runs = fuse(model) if options.fuse_chains else model
    return split_k_matmuls(runs, device) if options.splits else runs


def lower(model: Model, device: DeviceSpec | None = None, options: LowerOptions = LowerOptions(),
          cache: bool = True) -> Lowered:
    """Every pass (or the same model's result from the cache, lower_cache.py); LowerError naming what cannot be
    lowered."""
    if not isinstance(model, Model):
        raise LowerError(f"lower takes a Model, not {type(model).__name__}")
    if not isinstance(options, LowerOptions):
        raise LowerError(f"options must be LowerOptions, not {type(options).__name__}")
    device = device or DeviceSpec()
    try:
        model.check()
    except ModelError as exc:
        raise LowerError(str(exc)) from None
    k = lower_cache.key(model, device, options) if cache else None
    if k is not None:
        found = lower_cache.load(k)
        if found is not None:
            return found
    lowered = _lower(model, device, options)
    if k is not None:
        lower_cache.store(k, lowered)
    return lowered


def _lower(model: Model, device: DeviceSpec, options: LowerOptions) -> Lowered:
    runs = rewrite(model, device, options)
    wanted = dict(options.copy_paths)
    paths = {}
    for op in runs.ops:
        if op.kind == "copy":
            paths[op.id] = wanted.get(runs.tensors[op.output].name, "engine")
    unknown = sorted(set(wanted) - {runs.tensors[runs.ops[op].output].name for op in paths})
    if unknown:
        raise LowerError(f"copy_paths names {', '.join(unknown)}, which no copy op of {model.name!r} writes")
    by_name = {runs.tensors[op.output].name: op.id for op in runs.ops}
    unknown = sorted(name for name, _ in options.knobs if name not in by_name)
    if unknown:
        raise LowerError(f"knobs name {', '.join(unknown)}, which no op of {model.name!r} (as run) writes")
    knobs = {by_name[name]: dict(values) for name, values in options.knobs}
    try:
        variants = choose_variants(runs, device, {op: {"path": p} for op, p in paths.items()}, knobs)
        plan = build_plan(runs, device, options.placement, variants=variants)
        source = generate(runs, plan, graph_copies=any(p == "graph" for p in paths.values()))
    except (PlanError, ModelError) as exc:
        raise LowerError(str(exc)) from None
    return Lowered(model, runs, device, options, plan, source, paths, build_program(plan, source.op_cases))
