"""Tiny Hugging Face models for the front end's tests: Llama (grouped-query attention, RMSNorm, rotate_half rotary),
Qwen2 (the same with q/k/v biases) and BERT (LayerNorm, erf-GELU, full attention, a pooler), random weights from a
fixed seed, in eval mode; and each one's outputs as PyTorch computes them."""

from __future__ import annotations

import torch

ARCHS = ("llama", "qwen2", "bert")
LAYERS = 2
HEADS, KV_HEADS, HIDDEN, FFN, VOCAB, SEQ = 4, 2, 64, 128, 128, 16


def tiny(arch: str, attn: str = "sdpa", dtype=torch.float32, pooler: bool = True, seed: int = 0):
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, max_position_embeddings=64, attn_implementation=attn)
    if arch == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=KV_HEADS, **common))
    elif arch == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=KV_HEADS, **common))
    elif arch == "bert":
        model = tf.BertModel(tf.BertConfig(**common), add_pooling_layer=pooler)
    else:
        raise ValueError(arch)
    return model.eval().to(dtype)


def ids(batch: int = 1, seq: int = SEQ, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def kwargs(arch: str) -> dict:
    return {} if arch == "bert" else {"use_cache": False}


def forward(model, arch: str, input_ids: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(input_ids, **kwargs(arch))
    if arch == "bert":
        return [out.last_hidden_state] + ([out.pooler_output] if out.pooler_output is not None else [])
    return [out.logits]
