"""The models `arkdma bench models` runs, and the loop-kernel models made from them: Hugging Face `LlamaForCausalLM`
and `BertModel` built from a config with random weights (a fixed seed), Llama-3.2-1B and BERT-Large shaped or, for a
quick run, two layers with a small hidden size; the bytes a step reads; the prefill and decode models
(ark_runtime.frontend.hf_decode) and BERT through `ark_runtime.from_torch`.

Nothing here needs a GPU: tests build the quick models on the CPU and lower what the benchmark would run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaShape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    rope_theta: float = 500000.0
    tied: bool = True  # the output weight is the embedding's (Llama-3.2-1B ties them)
    max_positions: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class BertShape:
    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int = 30522
    max_positions: int = 512


LLAMA_1B = LlamaShape("llama-3.2-1b", hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, vocab=128256)
LLAMA_QUICK = LlamaShape("llama-quick", hidden=256, intermediate=512, layers=2, heads=8, kv_heads=2, vocab=4096)
BERT_LARGE = BertShape("bert-large", hidden=1024, layers=24, heads=16, intermediate=4096)
BERT_QUICK = BertShape("bert-quick", hidden=256, layers=2, heads=4, intermediate=1024, vocab=1024)


def shapes(quick: bool) -> tuple[LlamaShape, BertShape]:
    return (LLAMA_QUICK, BERT_QUICK) if quick else (LLAMA_1B, BERT_LARGE)


@contextlib.contextmanager
def _made_as(torch, device, dtype):
    """Modules built inside are made on `device` in `dtype` (no float32 copy on the host first: Llama-1B's random
    initialisation on the CPU alone takes seconds)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(before)


def llama(torch, shape: LlamaShape, device="cpu", dtype=None, seed: int = 0):
    """HF LlamaForCausalLM of `shape`, random weights from `seed`, in eval mode (default dtype bfloat16)."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=shape.hidden, intermediate_size=shape.intermediate, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, vocab_size=shape.vocab,
        rope_theta=shape.rope_theta, tie_word_embeddings=shape.tied, max_position_embeddings=shape.max_positions)
    torch.manual_seed(seed)
    with _made_as(torch, device, dtype or torch.bfloat16):
        module = transformers.LlamaForCausalLM(config)
    return module.eval()


def bert(torch, shape: BertShape, device="cpu", dtype=None, seed: int = 0):
    """HF BertModel of `shape`, the encoder without the pooler, random weights from `seed`, in eval mode (default
    bfloat16). The pooler is left out at every batch: the PyTorch front end cannot yet lay out its input, the first
    token of each sequence, as rows when the batch is above 1 (rows picked from a 3-D tensor)."""
    import transformers

    config = transformers.BertConfig(
        hidden_size=shape.hidden, num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate, vocab_size=shape.vocab, max_position_embeddings=shape.max_positions)
    torch.manual_seed(seed)
    with _made_as(torch, device, dtype or torch.bfloat16):
        module = transformers.BertModel(config, add_pooling_layer=False)
    return module.eval()


def token_ids(torch, vocab: int, batch: int, tokens: int, device="cpu", seed: int = 1):
    """[batch, tokens] random token ids (int64, as HF takes them), the same for every method of a case."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, vocab, (batch, tokens), generator=g).to(device)


def parameter_bytes(module) -> int:
    """Bytes of the module's parameters, each storage once (a tied output weight is the embedding)."""
    seen = {}
    for p in module.parameters():
        seen[p.data_ptr()] = max(seen.get(p.data_ptr(), 0), p.numel() * p.element_size())
    return sum(seen.values())


def kv_bytes_per_step(shape: LlamaShape, batch: int, prompt: int, steps: int, element_bytes: int = 2) -> int:
    """Key and value bytes a decode step reads on average over `steps` steps after a `prompt`-token prompt: step i
    (from 0) of each sequence attends over prompt + i + 1 rows of keys and of values in every layer."""
    if min(batch, prompt, steps) < 1:
        raise ValueError(f"batch, prompt and steps must be at least 1, not {batch}, {prompt}, {steps}")
    row = shape.kv_heads * shape.head_dim * element_bytes
    # the mean of prompt + i + 1 over i in [0, steps), times 2 to keep it an integer
    rows_twice = 2 * prompt + steps + 1
    return batch * 2 * shape.layers * row * rows_twice // 2


def capacity(prompt: int, new_tokens: int) -> int:
    """Cache rows a decode case needs: the prompt and every step run from it (each phase starts again at the
    prompt's end)."""
    return prompt + new_tokens + 1


def decode_models(module, batch: int, prompt: int, new_tokens: int):
    """The loop kernel's prefill (one `prompt`-token prompt) and decode step (`batch` sequences, a ring of
    `new_tokens` steps of tokens on the host) of a causal LM, sharing caches of capacity(prompt, new_tokens) rows."""
    from ark_runtime.frontend.hf_decode import build

    rows = capacity(prompt, new_tokens)
    return build(module, rows, prompt=prompt), build(module, rows, ring=new_tokens, batch=batch)


def prefill_model(module, tokens: int):
    """The loop kernel's prefill of `tokens` tokens: the logits of every position, the caches written."""
    from ark_runtime.frontend.hf_decode import build

    return build(module, tokens, prompt=tokens)


def bert_import(module, ids):
    """BertModel through the PyTorch front end for ids of this shape: the Imported (model, bindings, outputs)."""
    import ark_runtime

    return ark_runtime.from_torch(module, (ids,), {})


def cache_tensors(torch, model, device, dtype) -> dict:
    """Zeroed tensors for a loop-kernel model's key/value cache states, by name."""
    return {t.name: torch.zeros(t.shape, dtype=dtype, device=device)
            for t in model.tensors if t.name.endswith(("cache_k", "cache_v"))}
