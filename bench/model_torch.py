"""PyTorch's side of `arkdma bench models`: the read bandwidth, greedy decode with Hugging Face's dynamic cache (eager),
its static cache (eager) and the static-cache step under `torch.compile(mode="reduce-overhead")`, and one forward
(prefill, BERT) eager and compiled. Each returns a bench.models.Outcome; torch is passed in.

Decode: every method prefills the same prompts (untimed), then runs `steps` greedy steps, the token staying on the
GPU (no host sync inside the loop); ms a step = wall time of the steps (synchronized at both ends) / steps. Eager
first runs the steps once untimed to record each sequence's tokens and each step's top-2 logit gap (the reference
the runtime's tokens are checked against), then again timed. One forward: CUDA events over repeated calls after a
warm-up (bench/timing.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.models import READ_BYTES, Outcome
from bench.timing import events_us, reps_for


def read_bandwidth(torch, nbytes: int = READ_BYTES, samples: int = 10) -> float:
    """Bytes per second that torch.sum reads from a `nbytes` bf16 tensor (median of `samples` after 3)."""
    x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    us = events_us(torch, lambda: x.sum(dtype=torch.float32), 1, samples)
    x = None
    torch.cuda.empty_cache()  # the 4 GiB back before the models are built
    return nbytes / (us * 1e-6)


def _greedy(logits):
    """The next token of each sequence, [B, 1], from logits [B, S, V]."""
    return logits[:, -1:].argmax(-1)


def _gap(torch, logits):
    """Each sequence's top-2 gap at the last position, of the top logit's magnitude (at least 1), [B]."""
    top = logits[:, -1].float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]) / top[:, 0].abs().clamp(min=1.0)


def _timed_steps(torch, step: Callable, token, steps: int) -> float:
    """ms a step over `steps` greedy steps from `token`."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        token = step(token)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def decode_eager(torch, module, ids, steps: int) -> Outcome:
    """The module's forward with its default cache: the reference run (tokens, gaps), then the timed run."""
    with torch.no_grad():
        out = module(ids, use_cache=True)
        past, token = out.past_key_values, _greedy(out.logits)
        tokens, gaps = [token], [_gap(torch, out.logits)]
        for _ in range(steps - 1):
            out = module(token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, _greedy(out.logits)
            tokens.append(token)
            gaps.append(_gap(torch, out.logits))
        made = torch.cat(tokens, dim=1).tolist()  # [B, steps]
        margins = torch.stack(gaps, dim=1).tolist()
        del out, past

        out = module(ids, use_cache=True)
        past = out.past_key_values

        def step(token):
            return _greedy(module(token, past_key_values=past, use_cache=True).logits)
        ms = _timed_steps(torch, step, _greedy(out.logits), steps)
    return Outcome(ms, tokens=made, margins=margins)


def _static_cache(module, rows: int):
    from transformers import StaticCache

    return StaticCache(config=module.config, max_cache_len=rows)


def decode_static(torch, module, ids, steps: int, rows: int) -> Outcome:
    """Hugging Face's StaticCache of `rows` rows, eager: warm-up steps, the cache reset, then the timed steps."""
    with torch.no_grad():
        cache = _static_cache(module, rows)

        def step(token):
            return _greedy(module(token, past_key_values=cache, use_cache=True).logits)

        first = _greedy(module(ids, past_key_values=cache, use_cache=True).logits)
        _timed_steps(torch, step, first, min(4, steps))
        cache.reset()
        first = _greedy(module(ids, past_key_values=cache, use_cache=True).logits)
        ms = _timed_steps(torch, step, first, steps)
    return Outcome(ms)


def decode_compiled(torch, module, ids, steps: int, rows: int) -> Outcome:
    """The static-cache step (forward and argmax) under torch.compile(mode="reduce-overhead", fullgraph=True), as
    Hugging Face's static-cache guide does: the prefill eager, each step a CUDA graph replay. The first calls compile
    and record; the cache is reset and the prompts prefilled again before the timed steps. Where the step cannot be
    one graph (torch._dynamo's Unsupported), it is compiled again with graph breaks, and a note says so."""
    notes = []
    with torch.no_grad():
        cache = _static_cache(module, rows)
        first = _greedy(module(ids, past_key_values=cache, use_cache=True).logits)  # the cache's lazy allocation

        def compiled_step(fullgraph: bool):
            compiled = torch.compile(lambda t: _greedy(module(t, past_key_values=cache, use_cache=True).logits),
                                     mode="reduce-overhead", fullgraph=fullgraph, dynamic=False)

            def step(token):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(token).clone()  # the graph's output is overwritten by its next replay
            _timed_steps(torch, step, first, min(4, steps))  # compile, record, replay
            return step

        try:
            step = compiled_step(fullgraph=True)
        except torch._dynamo.exc.Unsupported as exc:
            notes.append(f"not one graph (fullgraph: {str(exc).splitlines()[0][:160]}); compiled with graph breaks")
            torch._dynamo.reset()
            step = compiled_step(fullgraph=False)
        cache.reset()
        first = _greedy(module(ids, past_key_values=cache, use_cache=True).logits)
        ms = _timed_steps(torch, step, first, steps)
    return Outcome(ms, notes=notes)


def _outputs(out, names: tuple[str, ...], batch: int) -> dict:
    """The named outputs of a forward as float32 NumPy (batch 1's leading axis dropped, as the runtime's)."""
    got = {}
    for name in names:
        t = getattr(out, name)
        if t is None:
            continue
        t = t.float().cpu().numpy()
        got[name] = t[0] if batch == 1 else t
    return got


def forward_eager(torch, module, ids, kwargs: dict, names: tuple[str, ...], reps: int, samples: int) -> Outcome:
    """One forward, eager: its outputs (the reference) and its time."""
    with torch.no_grad():
        outputs = _outputs(module(ids, **kwargs), names, ids.shape[0])
        call = lambda: module(ids, **kwargs)  # noqa: E731
        first = events_us(torch, call, 1, 1)
        us = events_us(torch, call, reps_for(first, reps), samples)
    return Outcome(us / 1e3, outputs=outputs)


def forward_compiled(torch, module, ids, kwargs: dict, reps: int, samples: int) -> Outcome:
    """One forward under torch.compile(mode="reduce-overhead") (the module wrapped, not changed)."""
    with torch.no_grad():
        compiled = torch.compile(module, mode="reduce-overhead", dynamic=False)

        def call():
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(ids, **kwargs)
        for _ in range(3):  # compile, record, replay
            call()
        first = events_us(torch, call, 1, 1)
        us = events_us(torch, call, reps_for(first, reps), samples)
    return Outcome(us / 1e3)
