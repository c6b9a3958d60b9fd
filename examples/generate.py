"""Generation with a Hugging Face causal LM run as resident loop kernels: the prompt's prefill, then every new token
made inside one resident kernel (the next step reads the token the last one wrote) and streamed to Python as it
lands, beside the same model's generation in PyTorch. Greedy unless a temperature is given; then each token is drawn
on the GPU (top-k / top-p with a seed: the sample op).

    python -m examples.generate                      # a Llama-3.2-1B-shaped model, random weights
    python -m examples.generate --tiny --new 16      # a small one, quick
    python -m examples.generate --checkpoint PATH    # a local checkpoint (LlamaForCausalLM, Qwen2ForCausalLM)
    python -m examples.generate --tiny --batch 8     # 8 prompts decoded together
    python -m examples.generate --tiny --temperature 0.8 --top-k 50 --top-p 0.95 --seed 1   # sampled

Prefill and decode are two loop-kernel models that share the key/value caches (bound to the same PyTorch tensors):
a prefill runtime writes each prompt's block of them, the decode runtime appends to every block at once
(ark_runtime/frontend/hf_decode.py)."""

from __future__ import annotations

import argparse
import sys
import time


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m examples.generate", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", help="a local Hugging Face checkpoint folder (default: a config, random weights)")
    p.add_argument("--tiny", action="store_true", help="a small model (2 layers, hidden 256) rather than Llama-1B's")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (random ids; default 32)")
    p.add_argument("--new", type=int, default=128, help="tokens to generate (default 128)")
    p.add_argument("--batch", type=int, default=1, help="prompts decoded together (default 1)")
    p.add_argument("--temperature", type=float, default=0.0, help="sample at this temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest tokens (default 0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample from the likeliest tokens holding this much "
                   "probability (default 1: all)")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed, 0 to 2**64 - 1 (default 0)")
    args = p.parse_args(argv)
    if args.prompt < 1 or args.new < 1 or args.batch < 1:
        p.error("--prompt, --new and --batch must be at least 1")
    if not 0 <= args.temperature <= 1e6:  # NaN too
        p.error(f"--temperature must be 0 (greedy) or a number up to 1e6, not {args.temperature}")
    if args.top_k < 0 or not 0 < args.top_p <= 1 or not 0 <= args.seed < 1 << 64:
        p.error("--top-k must be at least 0, --top-p in (0, 1], --seed in 0 .. 2**64 - 1")
    if args.temperature == 0 and (args.top_k or args.top_p < 1):
        p.error("--top-k and --top-p shape a sampled distribution: give --temperature above 0 with them (0 is greedy)")
    return args


def sampling(args) -> dict | None:
    """The decode model's sampling settings (hf_decode.build), or None for greedy."""
    if args.temperature == 0:
        return None
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def _module(args):
    import torch
    import transformers

    if args.checkpoint:
        module = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, torch_dtype=torch.bfloat16)
    else:
        torch.manual_seed(0)
        shape = (dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=4096) if args.tiny else
                 dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True))
        config = transformers.LlamaConfig(max_position_embeddings=2048, **shape)
        module = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    return module.cuda().eval()


NEAR_TIE = 0.02  # PyTorch's top two logits this close (of the top's magnitude, at least 1): either token is right


def _gaps(logits) -> list[float]:
    """Each row's top-two logit gap, of the top logit's magnitude (at least 1)."""
    top = logits.float().topk(2, dim=-1).values
    return ((top[:, 0] - top[:, 1]) / top[:, 0].abs().clamp(min=1.0)).tolist()


def torch_generate(module, ids, new: int) -> tuple[list[list[int]], float, list[list[float]]]:
    """PyTorch's greedy loop with its cache over the batch of prompts: each step's tokens, the seconds a step, and
    each step's top-two gaps (_gaps) where it chose them, worked out after the timed loop."""
    import torch

    with torch.no_grad():
        out = module(ids, use_cache=True)
        past, last, tokens, chosen_from = out.past_key_values, out.logits[:, -1], [], []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(new):
            token = last.argmax(-1)
            tokens.append(token.tolist())
            chosen_from.append(last)  # the step's logits, kept for the gaps: nothing more inside the timed loop
            out = module(token[:, None], past_key_values=past, use_cache=True)
            past, last = out.past_key_values, out.logits[:, -1]
        torch.cuda.synchronize()
        per_step = (time.perf_counter() - t0) / new
        gaps = [_gaps(logits) for logits in chosen_from]
    return tokens, per_step, gaps


def parting(ours: list[list[int]], theirs: list[list[int]], gaps: list[list[float]],
            near: float = NEAR_TIE) -> tuple[list[int | None], int, int]:
    """Where each sequence's greedy text parts from PyTorch's (steps[s][b] is sequence b's token at step s): the step
    (None: never), how many part at a near tie (PyTorch's top two logits within `near` there: bf16 rounding may pick
    either) and how many part elsewhere (a wrong token). After a text parts the two continue different texts, so
    only the first parting of each sequence is judged."""
    at: list[int | None] = []
    ties = wrong = 0
    for b in range(len(theirs[0])):
        step = next((s for s in range(min(len(ours), len(theirs))) if ours[s][b] != theirs[s][b]), None)
        at.append(step)
        if step is not None:
            if gaps[step][b] <= near:
                ties += 1
            else:
                wrong += 1
    return at, ties, wrong


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    from ark_runtime.frontend.hf_decode import build
    from ark_runtime.ops.sample import sample_rows
    from ark_runtime.runtime import Runtime

    module = _module(args)
    capacity, batch, draw = args.prompt + args.new + 1, args.batch, sampling(args)
    ids = torch.randint(0, module.config.vocab_size, (batch, args.prompt), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(1))
    prefill = build(module, capacity, prompt=args.prompt)
    decode = build(module, capacity, ring=args.new, batch=batch, sampling=draw)
    caches = {t.name: torch.zeros(t.shape, dtype=torch.bfloat16, device="cuda")
              for t in decode.model.tensors if t.name.endswith(("cache_k", "cache_v"))}
    t0 = time.perf_counter()
    first = []
    for b in range(batch):  # each prompt into its sequence's block of the caches
        blocks = {name: cache[b:b + 1] for name, cache in caches.items()}
        with Runtime(prefill.model, bind={**prefill.weights, **blocks, "ids": ids[b].int().contiguous()}) as rt:
            rt.run(1)
            rt.wait(timeout=120)
            last = rt.get(prefill.logits)[-1]
            # the first token as the decode steps draw theirs: step = its input's position, row = the sequence
            first.append(int(last.argmax()) if draw is None else
                         int(sample_rows(last[None], [args.prompt - 1], rows=[b], **draw)[0]))
    start = {"token": [[t] for t in first], "position": [args.prompt] * batch, "length": [args.prompt] * batch}
    tokens, stamps = [], []
    with Runtime(decode.model, bind={**decode.weights, **caches}) as rt:
        started = time.perf_counter() - t0
        for name, value in start.items():
            rt.set(name, value)
        t1 = time.perf_counter()
        rt.run(args.new)  # every step inside the resident kernel; each step's tokens streamed to pinned memory
        for row in rt.stream("tokens", "produced", timeout=120):
            tokens.append(int(row[0]))
            if len(tokens) % batch == 0:
                stamps.append(time.perf_counter())
        per_step = (stamps[-1] - t1) / len(stamps)
    steps = [first] + [tokens[i:i + batch] for i in range(0, len(tokens) - batch, batch)]
    ref, torch_per_step, gaps = torch_generate(module, ids, args.new)
    print(f"arkdma: {batch / per_step:,.0f} tokens/s ({per_step * 1e3:.3f} ms a step of {batch}; ready in "
          f"{started:.1f} s)")
    print(f"PyTorch (HF, its cache): {batch / torch_per_step:,.0f} tokens/s ({torch_per_step * 1e3:.3f} ms a step)")
    if draw is None:
        agree = sum(a == b for ours, theirs in zip(steps, ref) for a, b in zip(ours, theirs))
        print(f"greedy tokens equal to PyTorch's: {agree} of {batch * len(ref)} (bf16: a near-tie may go either way)")
        at, ties, wrong = parting(steps, ref, gaps)
        parted = sorted(s for s in at if s is not None)
        print(f"texts that part from PyTorch's: {len(parted)} of {batch}" + (
            f" (at steps {', '.join(map(str, parted))}): {ties} at a near tie (PyTorch's top two logits within "
            f"{NEAR_TIE:.0%} of the top), {wrong} elsewhere" if parted else ""))
    else:
        print(f"sampled (temperature {args.temperature:g}, top-k {args.top_k}, top-p {args.top_p:g}, seed "
              f"{args.seed}): no comparison with PyTorch's greedy tokens; the first of sequence 0: "
              f"{[s[0] for s in steps[:8]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
