"""The loop kernel's side of `arkdma bench models`: greedy decode as examples/generate.py runs it (each prompt prefilled
into its sequence's block of the caches, then every step inside one resident kernel, the tokens streamed to the
host), and one forward (prefill, BERT) run back to back. Each returns a bench.models.Outcome; torch is passed in.

While a loop kernel is resident, PyTorch may not allocate or launch a kernel it has not launched before (the runtime's
limits, docs/runtime.md): every tensor is made before a Runtime starts and read back with Runtime.get."""

from __future__ import annotations

import time

import numpy as np

from ark_runtime.kernel.codes import RING
from bench.model_shapes import cache_tensors, decode_models
from bench.models import ModelsConfig, Outcome
from bench.timing import Spread, iteration_us, round_trips


def _prefill_each(torch, prefill, ids, caches: dict, timeout: float) -> list[int]:
    """Each prompt (a row of `ids`) through one resident prefill kernel in turn, its caches read back into that
    sequence's block of `caches`; the first token of each sequence (the argmax of its last position)."""
    from ark_runtime.runtime import Runtime

    host_ids = ids.to(torch.int32).cpu().numpy()
    scratch = {name: torch.zeros((1, *c.shape[1:]), dtype=c.dtype, device=c.device) for name, c in caches.items()}
    first, blocks = [], {name: [] for name in caches}
    bind = {**prefill.weights, **scratch, "ids": torch.from_numpy(host_ids[0].copy()).to(ids.device)}
    with Runtime(prefill.model, bind=bind) as rt:
        for prompt in host_ids:
            rt.set("ids", prompt)
            rt.run(1)
            rt.wait(timeout=timeout)
            first.append(int(rt.get(prefill.logits)[-1].argmax()))
            for name in caches:
                blocks[name].append(rt.get(name)[0])
    for name, cache in caches.items():  # bf16 -> float32 -> bf16 is exact
        cache.copy_(torch.from_numpy(np.stack(blocks[name])).to(cache.device, cache.dtype))
    return first


def decode(torch, module, ids, config: ModelsConfig) -> Outcome:
    """Greedy decode of the prompts in `ids` [B, P] for config.new_tokens steps; see bench/models.py for the
    figures. Each phase (warm-up, the timed steps, the round trips) starts again from the prompts' end: the token,
    position and length states set back, the ring's count back to 0 (the caches' rows past a length are not read)."""
    from ark_runtime.runtime import Runtime

    batch, prompt = ids.shape
    steps = config.new_tokens
    dtype = next(module.parameters()).dtype
    prefill, step_model = decode_models(module, batch, prompt, steps)
    caches = cache_tensors(torch, step_model.model, ids.device, dtype)
    first = _prefill_each(torch, prefill, ids, caches, config.timeout_s)
    start = {"token": [[t] for t in first], "position": [prompt] * batch, "length": [prompt] * batch, "produced": [0]}
    made, arrivals = [], []
    with Runtime(step_model.model, bind={**step_model.weights, **caches}) as rt:
        def restart() -> None:
            for name, value in start.items():
                rt.set(name, value)

        restart()
        rt.run(config.warmup_steps)
        rt.wait(timeout=config.timeout_s)
        restart()
        rt.run(steps)
        for row in rt.stream("tokens", "produced", timeout=config.timeout_s):
            made.append(int(row[0]))
            if len(made) % batch == 0:
                arrivals.append(time.perf_counter())
        gpu = Spread.of(np.diff(rt.iteration_ns()[-steps:]) / 1e6)  # the timed steps' stamps only
        profile = rt.profile().as_json()
        restart()

        def one_step() -> None:
            rt.run(1)
            rt.wait(timeout=config.timeout_s)
        trips = round_trips(one_step, config.latency_samples, config.latency_warmup)
    if len(made) != steps * batch or len(arrivals) != steps:
        raise RuntimeError(f"the ring gave {len(made)} tokens, not {steps} steps of {batch}")
    ms, gaps = step_ms(arrivals)
    return Outcome(ms, gaps.p10, gaps.p90, gpu_ms=gpu.median, latency_ms=trips.median / 1e3,
                   tokens=sequences(first, made, batch, steps), profile=profile)


def sequences(first: list[int], made: list[int], batch: int, steps: int) -> list[list[int]]:
    """Each sequence's first `steps` tokens: the prefill's, then one a step from the ring's rows (`batch` a step,
    sequence by sequence); the last step's token would begin the next text and is left out, as eager's is."""
    if len(first) != batch or len(made) < (steps - 1) * batch:
        raise ValueError(f"{len(first)} first tokens and {len(made)} ring rows for {steps} steps of {batch}")
    return [[first[b]] + made[b::batch][:steps - 1] for b in range(batch)]


def step_ms(arrivals: list[float]) -> tuple[float, Spread]:
    """ms a step from the host's clock (s) at each step's arrival: (last - first) / (steps - 1), and the spread of
    the gaps between arrivals (ms)."""
    if len(arrivals) < 2:
        raise ValueError(f"a step time needs at least two arrivals, not {len(arrivals)}")
    gaps = np.diff(arrivals) * 1e3
    return (arrivals[-1] - arrivals[0]) * 1e3 / (len(arrivals) - 1), Spread.of(gaps)


def forward(torch, model, bind: dict, outputs: dict[str, tuple], config: ModelsConfig) -> Outcome:
    """One model run back to back in one resident kernel: RING + 1 iterations timed by the GPU clock stamps, round
    trips of run(1) + wait(), then `outputs` (name -> the shape to give it) read back."""
    from ark_runtime.runtime import Runtime

    with Runtime(model, bind=bind) as rt:
        rt.run(2)
        rt.wait(timeout=config.timeout_s)

        def one() -> None:
            rt.run(1)
            rt.wait(timeout=config.timeout_s)
        trips = round_trips(one, config.latency_samples, config.latency_warmup)
        gaps = Spread.of(iteration_us(rt, RING + 1, config.timeout_s) / 1e3)
        got = {key: rt.get(name).reshape(shape) for key, (name, shape) in outputs.items()}
        profile = rt.profile().as_json()
    return Outcome(gaps.median, gaps.p10, gaps.p90, latency_ms=trips.median / 1e3, outputs=got, profile=profile)
