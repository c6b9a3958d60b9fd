"""Hugging Face Llama and Qwen2 (tiny configs, random weights) built as the loop kernel's prefill and decode models:
the prefill's logits and the caches it writes, and every decode step's logits and greedy token, in the float64
reference, against the module's own forward with its own cache, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the `torch` extra (PyTorch, transformers) is not installed")
transformers = pytest.importorskip("transformers", reason="the `torch` extra (PyTorch, transformers) is not installed")

from ark_runtime.frontend.hf_decode import build, caches_from  # noqa: E402
from ark_runtime.lower import lower  # noqa: E402
from ark_runtime.model import ModelError  # noqa: E402
from ark_runtime.reference import evaluate  # noqa: E402
from ark_runtime.scheduler import DeviceSpec  # noqa: E402

CAPACITY, PROMPT, STEPS = 32, 7, 6


def _module(kind: str, tied: bool = False):
    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tied)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common)).eval()


def _inputs(built, extra: dict) -> dict:
    out = {name: t.double().numpy() for name, t in built.weights.items()}
    for t in built.model.tensors:
        if t.producer is None and t.name not in out and t.name not in extra:
            out[t.name] = np.zeros(t.shape, np.int32 if t.dtype == "int32" else np.float64)
    out.update(extra)
    return out


@pytest.mark.parametrize(("kind", "tied"), [("llama", False), ("qwen2", False), ("llama", True)])
def test_prefill_and_greedy_decode_match_the_module_step_by_step(kind, tied):
    module = _module(kind, tied)
    ids = torch.randint(0, 96, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        first = module(ids, use_cache=True)
    prefill = build(module, CAPACITY, prompt=PROMPT)
    values = evaluate(prefill.model, _inputs(prefill, {"ids": ids[0].numpy().astype(np.int32)}))
    logits = values[prefill.model.outputs[0]]
    assert np.allclose(logits, first.logits[0].double().numpy(), atol=1e-4, rtol=1e-4)
    c = module.config
    d = c.hidden_size // c.num_attention_heads
    caches = caches_from(first.past_key_values, PROMPT, CAPACITY, c.num_key_value_heads, d)
    written = {t.name: values[t.id] for t in prefill.model.tensors if t.name.endswith(("cache_k", "cache_v"))}
    for name, rows in caches.items():
        assert np.allclose(written[name][:PROMPT], rows[:PROMPT], atol=1e-5), name  # the prefill wrote them

    decode = build(module, CAPACITY, ring=16)
    token = int(first.logits[0, -1].argmax())
    state = {**caches, "token": np.array([token], np.int32), "position": np.array([PROMPT], np.int32),
             "length": np.array([PROMPT], np.int32)}
    past, tokens = first.past_key_values, []
    for step in range(STEPS):
        with torch.no_grad():
            ref = module(torch.tensor([[token]]), past_key_values=past, use_cache=True)
        past = ref.past_key_values
        values = evaluate(decode.model, _inputs(decode, state))
        got = values[decode.model.outputs[0]]
        assert np.allclose(got, ref.logits[0].double().numpy(), atol=1e-4, rtol=1e-4), f"step {step}"
        token = int(ref.logits[0, -1].argmax())
        by_name = {t.name: values[t.id] for t in decode.model.tensors if t.producer is None}
        assert int(by_name["token"][0]) == token or np.isclose(np.sort(got[0])[-1], np.sort(got[0])[-2])
        tokens.append(int(by_name["token"][0]))
        state = {name: by_name[name] for name in by_name if name not in decode.weights}
    assert state["produced"][0] == STEPS and state["tokens"][:STEPS, 0].tolist() == tokens
    assert state["position"][0] == state["length"][0] == PROMPT + STEPS


def test_both_models_lower_and_compile():
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from driver.gpu import compile

    module = _module("qwen2").to(torch.bfloat16)
    for built in (build(module, CAPACITY, prompt=PROMPT), build(module, CAPACITY, ring=16)):
        lw = lower(built.model, DeviceSpec(num_sms=132))
        assert compile.cubin(lw.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_what_the_builder_cannot_map_is_refused():
    with pytest.raises(ModelError, match="BertModel is not one of LlamaForCausalLM, Qwen2ForCausalLM"):
        build(transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                             num_attention_heads=2, intermediate_size=64)), 8)
    with pytest.raises(ModelError, match="capacity=0"):
        build(_module("llama"), 0)
    with pytest.raises(ModelError, match="prompt=40: a prompt of 1 to capacity"):
        build(_module("llama"), 32, prompt=40)
