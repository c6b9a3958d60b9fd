"""`arkdma bench models`: whole Hugging Face models on the loop-kernel runtime beside PyTorch, in the same run on the
same GPU.

Cases: Llama-3.2-1B-shaped decode (`LlamaForCausalLM` from a config, random weights, bf16: hidden 2048, MLP 8192,
16 layers, 32 heads, 8 KV heads, vocabulary 128256, rope theta 500000, tied embeddings), a 32-token prompt and 128
new tokens, batch 1 and 8; Llama-1B prefill of 128 and 512 tokens; BERT-Large (`BertModel`: hidden 1024, 24 layers,
16 heads, MLP 4096) at batch 1 and 8, sequence 128 and 384. `--quick` runs the same cases on two-layer models with a
small hidden size (bench/model_shapes.py).

Each case beside PyTorch eager, Hugging Face's static cache (decode only) and `torch.compile(mode="reduce-overhead")`
(CUDA graphs), measured one after another in one process:

- decode: every method prefills the same prompts, then runs `new_tokens` greedy steps from them; ms a step. Eager is
  the module's forward with its default (dynamic) cache; static is `StaticCache`, eager; compiled is the static-cache
  step (forward and argmax) under torch.compile, fullgraph. arkdma (bench/model_arkdma.py) prefills each prompt on
  the loop kernel, then runs the steps inside one resident kernel, each step's tokens streamed to pinned host memory:
  `arkdma_ms` = (last - first arrival) / (steps - 1) by the host's clock as the rows arrive, p10/p90 of the gaps
  between arrivals; `arkdma_gpu_ms` the median step by the GPU clock stamps (the last 64 steps); `latency_ms` one
  `run(1)` + `wait()` step from Python (median of 20 after 3).
- prefill and BERT: one forward. PyTorch by CUDA events over repeated calls; arkdma by the GPU clock stamps of 65
  back-to-back iterations of one resident kernel (median, p10, p90), `latency_ms` one `run(1)` + `wait()`.

`pct_hbm` = the bytes a step reads (the module's parameters, each once; for decode plus the keys and values its
attention reads, averaged over the steps) / arkdma's time / the read bandwidth measured at the start of the run:
`torch.sum` over a 4 GiB bf16 tensor (reads 4 GiB, writes one number), the median of 10 after 3 (`read_gbps`).
`ratio_to_compiled` = arkdma_ms / compiled_ms (below 1: faster than torch.compile).

Checks: decode compares each sequence's greedy tokens with eager's, step by step up to the first that differs
(`tokens_equal` of `tokens_compared`); a sequence that parts from eager's where eager's top two logits were within
`near_tie` of the larger one's magnitude (at least 1) counts as a near tie (`near_ties` of `divergences`): bf16
rounding may pick either. Prefill and BERT compare every output with eager's (`max_rel_err`, of the output's largest
magnitude; bf16 tolerance 6e-2, as `bench loop`). `ok` is False on a divergence that was not a near tie or an output
off by more than that.

A method that fails (an exception: a compile error, out of memory, a runtime fault) or runs past the row's time limit
is recorded in the row's `errors` and the run goes on; `seconds` has each method's wall time (building, compiling,
measuring). The measuring is a `Measurer` (bench/model_measure.py on a GPU); tests give their own."""

from __future__ import annotations

import contextlib
import enum
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from bench.time_limit import TimeLimitExceeded, time_limit

BF16_TOL = 6e-2  # of an output's largest magnitude, as bench loop and the GPU tests
READ_BYTES = 4 << 30
READ_METHOD = "torch.sum over a 4 GiB bf16 tensor"


class Kind(str, enum.Enum):
    DECODE = "decode"
    PREFILL = "prefill"
    BERT = "bert"


class Method(str, enum.Enum):
    EAGER = "eager"
    STATIC = "static"
    ARKDMA = "arkdma"
    COMPILED = "compiled"


@dataclass(frozen=True)
class Case:
    name: str
    kind: Kind
    batch: int
    tokens: int  # the prompt (decode), the sequence (prefill, BERT)


CASES = (
    Case("decode-b1", Kind.DECODE, 1, 32),
    Case("decode-b8", Kind.DECODE, 8, 32),
    Case("prefill-128", Kind.PREFILL, 1, 128),
    Case("prefill-512", Kind.PREFILL, 1, 512),
    Case("bert-b1-s128", Kind.BERT, 1, 128),
    Case("bert-b1-s384", Kind.BERT, 1, 384),
    Case("bert-b8-s128", Kind.BERT, 8, 128),
    Case("bert-b8-s384", Kind.BERT, 8, 384),
)
GROUPS = {"all": CASES, **{k.value: tuple(c for c in CASES if c.kind is k) for k in Kind}}


class CaseError(ValueError):
    """--cases named something that is neither a case nor a group."""


def pick_cases(text: str) -> tuple[Case, ...]:
    """Comma-separated case names or groups (decode, prefill, bert, all), in the order of CASES, each once."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    by_name = {c.name: c for c in CASES}
    bad = [n for n in names if n not in by_name and n not in GROUPS]
    if bad or not names:
        raise CaseError(f"unknown case(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(by_name)} or "
                        f"the groups {', '.join(GROUPS)}")
    wanted = {c.name for n in names for c in GROUPS.get(n, (by_name.get(n),))}
    return tuple(c for c in CASES if c.name in wanted)


@dataclass(frozen=True)
class ModelsConfig:
    cases: tuple[Case, ...] = CASES
    quick: bool = False  # two-layer models with a small hidden size
    compile: bool = True  # the torch.compile baselines (the longest part of a run)
    new_tokens: int = 128  # decode steps of every method
    warmup_steps: int = 8  # arkdma decode steps before the timed ones
    latency_samples: int = 20  # run(1) + wait() steps timed
    latency_warmup: int = 3
    reps: int = 20  # PyTorch calls per timing (prefill, BERT; fewer for long calls)
    samples: int = 5  # timings per PyTorch figure (median)
    row_timeout_s: float = 300.0  # every method of a row together
    near_tie: float = 2e-2  # top-2 logit gap, of the top logit's magnitude (at least 1), that counts as a tie
    timeout_s: float = 120.0  # one wait for the loop kernel

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError("no cases to run")
        if self.new_tokens < 2:
            raise ValueError(f"new_tokens must be at least 2 (a step time needs two arrivals), not {self.new_tokens}")
        if self.latency_samples + self.latency_warmup > self.new_tokens:
            raise ValueError("the latency steps must fit in the caches, which hold new_tokens steps")
        if not self.row_timeout_s > 0:
            raise ValueError(f"row_timeout_s must be positive, not {self.row_timeout_s}")


def quick_config(config: ModelsConfig) -> ModelsConfig:
    """The same cases on two-layer models with fewer steps and samples."""
    return replace(config, quick=True, new_tokens=64, reps=10, samples=3)


@dataclass
class Outcome:
    """What one method measured in one case."""

    ms: float  # a decode step, or one forward
    p10_ms: float | None = None
    p90_ms: float | None = None
    gpu_ms: float | None = None  # arkdma: the median step by the GPU clock (decode)
    latency_ms: float | None = None  # arkdma: one run(1) + wait() from Python
    tokens: list[list[int]] | None = None  # decode: each sequence's greedy tokens, new_tokens of them
    margins: list[list[float]] | None = None  # decode, eager: each step's top-2 logit gap, of the top's magnitude
    outputs: dict[str, np.ndarray] | None = None  # prefill, BERT: outputs to check, by name (float32)
    profile: dict | None = None  # arkdma: Runtime.profile() of its last iteration (Profile.as_json)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Work:
    """A case made ready to measure: each method's measuring function (called once, in order) and the bytes a step
    reads."""

    bytes_read: int
    methods: dict[Method, Callable[[], Outcome]]


class Measurer(Protocol):
    def device(self) -> str: ...

    def versions(self) -> dict[str, str]: ...

    def read_bandwidth(self) -> float: ...  # bytes per second

    def model(self, case: Case) -> str: ...  # the model's name in the rows

    def prepare(self, case: Case) -> contextlib.AbstractContextManager[Work]: ...


@dataclass
class Row:
    model: str
    case: str
    kind: str
    batch: int
    tokens: int  # prompt (decode) or sequence length
    new_tokens: int | None = None  # decode
    arkdma_ms: float | None = None
    arkdma_p10_ms: float | None = None
    arkdma_p90_ms: float | None = None
    arkdma_gpu_ms: float | None = None
    latency_ms: float | None = None
    eager_ms: float | None = None
    static_ms: float | None = None  # decode only
    compiled_ms: float | None = None
    pct_hbm: float | None = None
    bytes_read: int | None = None
    ratio_to_compiled: float | None = None
    tokens_equal: int | None = None
    tokens_compared: int | None = None
    divergences: int | None = None
    near_ties: int | None = None
    max_rel_err: float | None = None
    ok: bool | None = None  # None: arkdma's output was not checked (it or eager failed)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile: dict | None = None  # arkdma's last iteration, op by op and SM by SM (Runtime.profile().as_json())

    @property
    def failed(self) -> bool:
        return Method.ARKDMA.value in self.errors or "setup" in self.errors


@dataclass
class ModelsResult:
    device: str
    versions: dict[str, str]
    read_gbps: float | None
    config: dict
    rows: list[Row] = field(default_factory=list)
    read_method: str = READ_METHOD
    complete: bool = False  # False while cases remain: a run cut short keeps the rows it measured
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"device": self.device, "versions": self.versions, "read_gbps": self.read_gbps,
                "read_method": self.read_method, "config": self.config, "complete": self.complete,
                "notes": self.notes, "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_json(cls, d: dict) -> ModelsResult:
        rows = [Row(**r) for r in d["rows"]]
        return cls(d["device"], d["versions"], d["read_gbps"], d["config"], rows, d["read_method"], d["complete"],
                   d.get("notes", []))


def save(result: ModelsResult, path: Path) -> None:
    """Writes the JSON whole or not at all (a run cut off while writing leaves the last file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.as_json(), indent=1))
    tmp.replace(path)


# --- checks ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenCheck:
    equal: int  # tokens equal to the reference's before each sequence's first difference
    compared: int
    divergences: int  # sequences whose tokens part from the reference's
    near_ties: int  # of those, the ones that parted where the reference's top two logits were within the tie margin

    @property
    def ok(self) -> bool:
        return self.divergences == self.near_ties


def compare_tokens(ours: list[list[int]], ref: list[list[int]], margins: list[list[float]],
                   near_tie: float) -> TokenCheck:
    """Greedy tokens against a reference's, sequence by sequence, up to the first that differs (after it the two
    run on different text); `margins[b][i]`: the reference's top-2 logit gap at token i, of the top's magnitude."""
    if not (len(ours) == len(ref) == len(margins)):
        raise ValueError(f"{len(ours)} sequences against {len(ref)} (margins for {len(margins)})")
    equal = compared = divergences = ties = 0
    for b, (mine, theirs, gaps) in enumerate(zip(ours, ref, margins)):
        if not (len(mine) == len(theirs) == len(gaps)):
            raise ValueError(f"sequence {b}: {len(mine)} tokens against {len(theirs)} (margins for {len(gaps)})")
        compared += len(theirs)
        first = next((i for i, (a, r) in enumerate(zip(mine, theirs)) if a != r), None)
        if first is None:
            equal += len(theirs)
            continue
        equal += first
        divergences += 1
        ties += gaps[first] <= near_tie
    return TokenCheck(equal, compared, divergences, ties)


def max_rel_err(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    """The largest |ours - ref| over the outputs both have, of each output's largest magnitude (at least 1)."""
    shared = [k for k in ref if k in ours]
    if not shared:
        raise ValueError(f"no output to compare: ours {sorted(ours)}, the reference's {sorted(ref)}")
    worst = 0.0
    for k in shared:
        a, r = np.asarray(ours[k], np.float64), np.asarray(ref[k], np.float64)
        if a.size != r.size:
            raise ValueError(f"output {k}: {a.shape} against the reference's {r.shape}")
        a = a.reshape(r.shape)
        if not np.isfinite(a).all():
            return math.inf
        worst = max(worst, float(np.abs(a - r).max()) / max(1.0, float(np.abs(r).max())))
    return worst


def pct_of_bandwidth(nbytes: int | None, ms: float | None, read_gbps: float | None) -> float | None:
    """nbytes read in ms, as a percentage of read_gbps (GB/s, 1e9 bytes)."""
    if nbytes is None or ms is None or read_gbps is None or ms <= 0 or read_gbps <= 0:
        return None
    return 100.0 * nbytes / (ms * 1e-3) / (read_gbps * 1e9)


def finish_row(row: Row, outcomes: dict[Method, Outcome], read_gbps: float | None, near_tie: float) -> Row:
    """Fills a row's figures and checks from what each method measured."""
    for method, outcome in outcomes.items():
        setattr(row, f"{method.value}_ms", outcome.ms)
        row.notes += [f"{method.value}: {n}" for n in outcome.notes]
    ark, eager = outcomes.get(Method.ARKDMA), outcomes.get(Method.EAGER)
    if ark is not None:
        row.arkdma_p10_ms, row.arkdma_p90_ms = ark.p10_ms, ark.p90_ms
        row.arkdma_gpu_ms, row.latency_ms, row.profile = ark.gpu_ms, ark.latency_ms, ark.profile
        row.pct_hbm = pct_of_bandwidth(row.bytes_read, ark.ms, read_gbps)
        if row.compiled_ms:
            row.ratio_to_compiled = ark.ms / row.compiled_ms
    if ark is None or eager is None:
        if ark is not None:
            row.notes.append("arkdma: not checked (eager, the reference, failed)")
        return row
    if row.kind == Kind.DECODE.value:
        if ark.tokens is None or eager.tokens is None or eager.margins is None:
            row.notes.append("arkdma: not checked (no tokens to compare)")
            return row
        check = compare_tokens(ark.tokens, eager.tokens, eager.margins, near_tie)
        row.tokens_equal, row.tokens_compared = check.equal, check.compared
        row.divergences, row.near_ties, row.ok = check.divergences, check.near_ties, check.ok
    else:
        if ark.outputs is None or eager.outputs is None:
            row.notes.append("arkdma: not checked (no outputs to compare)")
            return row
        row.max_rel_err = max_rel_err(ark.outputs, eager.outputs)
        row.ok = row.max_rel_err <= BF16_TOL
    return row


# --- the run ---------------------------------------------------------------------------------------------------------
def methods_of(case: Case, config: ModelsConfig) -> tuple[Method, ...]:
    """The order a case's methods run in: eager first (the reference), torch.compile last (the likeliest to fail or
    run out of time, and to leave PyTorch's state changed)."""
    out = [Method.EAGER] + ([Method.STATIC] if case.kind is Kind.DECODE else []) + [Method.ARKDMA]
    return tuple(out + ([Method.COMPILED] if config.compile else []))


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def measure_row(case: Case, measurer: Measurer, config: ModelsConfig, read_gbps: float | None,
                say: Callable[[str], None] = lambda what: None) -> Row:
    """One case, every method under the row's time limit; a method that fails is recorded and the next one runs."""
    row = Row(measurer.model(case), case.name, case.kind.value, case.batch, case.tokens,
              new_tokens=config.new_tokens if case.kind is Kind.DECODE else None)
    if not config.compile:
        row.notes.append("compiled: left out (--no-compile)")
    end = time.monotonic() + config.row_timeout_s
    outcomes: dict[Method, Outcome] = {}

    def attempt(what: str, fn: Callable):
        left = end - time.monotonic()
        if left <= 0:
            row.errors[what] = f"not run: the row's {config.row_timeout_s:.0f} s were spent"
            return None
        t0 = time.perf_counter()
        try:
            with time_limit(left):
                return fn()
        except TimeLimitExceeded:
            row.errors[what] = f"timed out: the row's {config.row_timeout_s:.0f} s were spent"
        except Exception as exc:  # noqa: BLE001 - a method that fails is recorded; the run goes on
            row.errors[what] = describe(exc)
        finally:
            row.seconds[what] = round(time.perf_counter() - t0, 3)
        return None

    stack = contextlib.ExitStack()
    try:
        say(f"{case.name}: building")
        work = attempt("setup", lambda: stack.enter_context(measurer.prepare(case)))
        if work is None:
            return row
        row.bytes_read = work.bytes_read
        for method in methods_of(case, config):
            fn = work.methods.get(method)
            if fn is None:
                row.errors[method.value] = "not measured: the measurer has no such method for this case"
                continue
            say(f"{case.name}: {method.value}")
            got = attempt(method.value, fn)
            if got is not None:
                outcomes[method] = got
    finally:
        try:
            stack.close()  # the case's modules and tensors freed
        except Exception as exc:  # noqa: BLE001 - the figures stand; the next case may still run
            row.errors["cleanup"] = describe(exc)
    return finish_row(row, outcomes, read_gbps, config.near_tie)


def run(config: ModelsConfig, measurer: Measurer, progress: Callable[[str], None] | None = None,
        on_row: Callable[[ModelsResult], None] | None = None) -> ModelsResult:
    """Every case of `config`, one after another; `progress(what)` hears each step, `on_row(result)` gets the result
    so far after each row (complete=False until the last)."""
    say = progress or (lambda what: None)
    say("read bandwidth")
    notes = []
    try:
        read_gbps = measurer.read_bandwidth() / 1e9
    except Exception as exc:  # noqa: BLE001 - without it only pct_hbm is missing
        read_gbps = None
        notes.append(f"read bandwidth not measured ({describe(exc)}): no pct_hbm")
    settings = {k: v for k, v in asdict(config).items() if k != "cases"}
    settings["cases"] = [c.name for c in config.cases]
    result = ModelsResult(measurer.device(), measurer.versions(), read_gbps, settings, notes=notes)
    for case in config.cases:
        result.rows.append(measure_row(case, measurer, config, read_gbps, say))
        if on_row:
            on_row(result)
    result.complete = True
    return result


# --- the plot --------------------------------------------------------------------------------------------------------
def plot(result: ModelsResult, path: Path) -> None:
    """Two panels: ms per case for each method (arkdma with its p10-p90), and torch.compile's time over arkdma's
    (above 1: arkdma faster) with decode's % of the read bandwidth beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows
    labels = [f"{r.model}\n{r.case}" + (" (arkdma failed)" if r.failed else " (WRONG)" if r.ok is False else "")
              for r in rows]
    y = np.arange(len(rows))
    fig, (ax, gain) = plt.subplots(1, 2, figsize=(15, 0.7 * len(rows) + 1.8), sharey=True,
                                   gridspec_kw={"width_ratios": [3, 2]})
    series = [("arkdma", "arkdma_ms", "C0"), ("eager", "eager_ms", "C7"), ("HF static cache", "static_ms", "C1"),
              ("torch.compile reduce-overhead", "compiled_ms", "C2")]
    h = 0.8 / len(series)
    for i, (name, key, color) in enumerate(series):
        vals = np.array([getattr(r, key) or np.nan for r in rows], float)
        err = None
        if key == "arkdma_ms":
            lo = np.array([r.arkdma_p10_ms or np.nan for r in rows], float)
            hi = np.array([r.arkdma_p90_ms or np.nan for r in rows], float)
            err = np.nan_to_num(np.vstack([vals - lo, hi - vals]), nan=0.0).clip(min=0.0)
        ax.barh(y + (i - 1.5) * h, vals, h, xerr=err, label=name, color=color, capsize=2)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per decode step or forward (log; arkdma p10-p90)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    bw = f", read {result.read_gbps:,.0f} GB/s" if result.read_gbps else ""
    ax.set_title(f"arkdma bench models on {result.device}{bw}", fontsize=10)
    speed = np.array([r.compiled_ms / r.arkdma_ms if r.compiled_ms and r.arkdma_ms else np.nan for r in rows], float)
    gain.barh(y, speed, 0.6, color=["C0" if s >= 1 else "C3" for s in np.nan_to_num(speed, nan=1.0)])
    gain.axvline(1.0, color="k", lw=0.8)
    top = np.nanmax(speed) if np.isfinite(speed).any() else 1.0
    gain.set_xlim(0, max(1.2, 1.45 * top))  # room for the % labels
    for yi, s in zip(y, speed):
        if math.isnan(s):
            gain.text(0.02, yi, "no figure to compare", va="center", fontsize=7, color="0.4")
    for yi, r, s in zip(y, rows, speed):
        if r.pct_hbm is not None and not math.isnan(s):
            gain.text(s, yi, f" {r.pct_hbm:.0f}% of read bw", va="center", fontsize=7)
    gain.set_xlabel("torch.compile ms / arkdma ms (above 1: arkdma faster)")
    gain.grid(True, axis="x", alpha=0.3)
    gain.set_title("against torch.compile (reduce-overhead)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
