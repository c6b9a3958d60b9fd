"""Hugging Face Llama and Qwen2 (tiny configs, random weights) built as the loop kernel's prefill and decode models:
the prefill's logits and the caches it writes, and every decode step's logits and greedy token, in the float64
reference, against the module's own forward with its own cache, on the CPU; a sampling decode's tokens against the
NumPy sampler (ops/sample.py) on the module's logits with the same seed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the `torch` extra (PyTorch, transformers) is not installed")
transformers = pytest.importorskip("transformers", reason="the `torch` extra (PyTorch, transformers) is not installed")

from ark_runtime.frontend.hf_decode import build, caches_from  # noqa: E402
from ark_runtime.lower import lower  # noqa: E402
from ark_runtime.model import ModelError  # noqa: E402
from ark_runtime.ops.sample import boundary_margin, sample_rows  # noqa: E402
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


def _prompted(module, batch: int, length: int, seed: int):
    """The module run on `batch` random prompts of `length` tokens: the ids, its output, and its caches laid out as
    the decode model's (CAPACITY rows a sequence)."""
    ids = torch.randint(0, 96, (batch, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = module(ids, use_cache=True)
    c = module.config
    d = c.hidden_size // c.num_attention_heads
    return ids, out, caches_from(out.past_key_values, length, CAPACITY, c.num_key_value_heads, d)


@pytest.mark.parametrize(("kind", "tied"), [("llama", False), ("qwen2", False), ("llama", True)])
def test_prefill_and_greedy_decode_match_the_module_step_by_step(kind, tied):
    module = _module(kind, tied)
    ids, first, caches = _prompted(module, 1, PROMPT, seed=1)
    prefill = build(module, CAPACITY, prompt=PROMPT)
    values = evaluate(prefill.model, _inputs(prefill, {"ids": ids[0].numpy().astype(np.int32)}))
    logits = values[prefill.model.outputs[0]]
    assert np.allclose(logits, first.logits[0].double().numpy(), atol=1e-4, rtol=1e-4)
    written = {t.name: values[t.id] for t in prefill.model.tensors if t.name.endswith(("cache_k", "cache_v"))}
    for name, rows in caches.items():
        assert np.allclose(written[name][0, :PROMPT], rows[0, :PROMPT], atol=1e-5), name  # the prefill wrote them
    _decode_alongside(module, first, caches, np.full(1, PROMPT))


def _decode_alongside(module, first, caches, positions):
    """STEPS greedy decode steps of the batch the module's cache holds, in the reference and in the module: the
    logits and the token of each sequence at each step, the ring's rows, the positions counted."""
    batch = len(positions)
    decode = build(module, CAPACITY, ring=16, batch=batch)
    tokens_now = first.logits[:, -1].argmax(-1)
    state = {**caches, "token": tokens_now.numpy().astype(np.int32).reshape(batch, 1),
             "position": positions.astype(np.int32), "length": positions.astype(np.int32)}
    past, made = first.past_key_values, []
    for step in range(STEPS):
        with torch.no_grad():
            ref = module(tokens_now[:, None], past_key_values=past, use_cache=True)
        past = ref.past_key_values
        values = evaluate(decode.model, _inputs(decode, state))
        got = values[decode.model.outputs[0]].reshape(batch, -1)
        assert np.allclose(got, ref.logits[:, 0].double().numpy(), atol=1e-4, rtol=1e-4), f"step {step}"
        tokens_now = ref.logits[:, -1].argmax(-1)
        by_name = {t.name: values[t.id] for t in decode.model.tensors if t.producer is None}
        for b in range(batch):
            top = np.sort(got[b])[-2:]
            assert int(by_name["token"][b, 0]) == int(tokens_now[b]) or np.isclose(top[0], top[1])
        made.append(by_name["token"][:, 0].tolist())
        state = {name: by_name[name] for name in by_name if name not in decode.weights}
    assert state["produced"][0] == STEPS * batch
    assert state["tokens"][:STEPS * batch, 0].reshape(STEPS, batch).tolist() == made
    assert state["position"].tolist() == state["length"].tolist() == (positions + STEPS).tolist()


def test_a_batch_decodes_as_the_module_does_its_batch():
    """Three prompts of one length through the module at once; the decode model of batch 3 takes its cache."""
    module = _module("qwen2")
    _, first, caches = _prompted(module, 3, PROMPT, seed=2)
    c = module.config
    assert caches["l0_cache_k"].shape == (3, CAPACITY, c.num_key_value_heads * c.hidden_size // c.num_attention_heads)
    _decode_alongside(module, first, caches, np.full(3, PROMPT))


def test_sequences_at_different_positions_each_decode_as_if_alone():
    """Two sequences whose prompts differ in length, prefilled one by one into their blocks: each decode step of
    the batch gives each sequence the logits its own batch-1 step gives it."""
    module = _module("llama")
    c = module.config
    kv, d = c.num_key_value_heads, c.hidden_size // c.num_attention_heads
    lengths, caches, tokens, alone = (5, 11), {}, [], []
    for b, n in enumerate(lengths):
        _, out, one = _prompted(module, 1, n, seed=10 + b)
        alone.append(one)
        for name, rows in one.items():
            caches.setdefault(name, np.zeros((len(lengths), CAPACITY, kv * d)))[b] = rows[0]
        tokens.append(int(out.logits[0, -1].argmax()))
    batched = build(module, CAPACITY, batch=2)
    single = build(module, CAPACITY)
    state = {**caches, "token": np.array(tokens, np.int32)[:, None], "position": np.array(lengths, np.int32),
             "length": np.array(lengths, np.int32)}
    got = evaluate(batched.model, _inputs(batched, state), iterations=3)[batched.model.outputs[0]]
    for b, n in enumerate(lengths):
        one = {**alone[b], "token": np.array([[tokens[b]]], np.int32), "position": np.array([n], np.int32),
               "length": np.array([n], np.int32)}
        want = evaluate(single.model, _inputs(single, one), iterations=3)[single.model.outputs[0]]
        assert np.allclose(got[b], want[0], atol=1e-9), b


def test_a_sampling_decode_draws_what_the_numpy_sampler_draws_from_the_modules_logits():
    """Two sequences decoded with top-k / top-p sampling: each step's token, in the reference, is the NumPy sampler's
    draw from the module's own logits at that step (step = the position, row = the sequence), but where the draw lies
    within rounding of a boundary; the first token is drawn on the host alike (step = the prompt's last position)."""
    module = _module("llama")
    cfg = dict(temperature=0.9, top_k=20, top_p=0.9, seed=(1 << 64) - 5)
    _, first, caches = _prompted(module, 2, PROMPT, seed=3)
    decode = build(module, CAPACITY, ring=16, batch=2, sampling=cfg)
    assert [op.kind for op in decode.model.ops].count("sample") == 1
    assert "argmax" not in [op.kind for op in decode.model.ops]
    tokens = sample_rows(first.logits[:, -1].double().numpy(), [PROMPT - 1], **cfg)
    positions = np.full(2, PROMPT)
    state = {**caches, "token": tokens.astype(np.int32)[:, None], "position": positions.astype(np.int32),
             "length": positions.astype(np.int32)}
    past, not_argmax = first.past_key_values, 0
    for step in range(STEPS):
        with torch.no_grad():
            ref = module(torch.tensor(tokens)[:, None], past_key_values=past, use_cache=True)
        past = ref.past_key_values
        values = evaluate(decode.model, _inputs(decode, state))
        logits = ref.logits[:, 0].double().numpy()
        by_name = {t.name: values[t.id] for t in decode.model.tensors if t.producer is None}
        got = by_name["token"][:, 0].astype(np.int64)
        want = sample_rows(logits, positions + step, **cfg)
        near = boundary_margin(logits, positions + step, **cfg) < 1e-6
        assert ((got == want) | near).all(), f"step {step}: {got} against {want}"
        not_argmax += int((got != logits.argmax(-1)).sum())
        tokens = got
        state = {name: by_name[name] for name in by_name if name not in decode.weights}
    assert state["tokens"][:STEPS * 2, 0].reshape(STEPS, 2)[-1].tolist() == tokens.tolist()
    assert not_argmax > 0  # a draw, not the argmax


def test_sampling_settings_are_checked():
    module = _module("llama")
    for bad in (0.5, dict(temperature=0.5), dict(seed=1, top_n=3), [("seed", 1)]):
        with pytest.raises(ModelError, match="sampling=.*: give None \\(greedy\\) or a dict of seed"):
            build(module, CAPACITY, sampling=bad)
    with pytest.raises(ModelError, match="sampling goes with a decode step"):
        build(module, CAPACITY, prompt=4, sampling=dict(seed=1))
    with pytest.raises(ModelError, match="sample: top_p=2 must be a number in \\(0, 1\\]"):
        build(module, CAPACITY, sampling=dict(seed=1, top_p=2))
    with pytest.raises(ModelError, match="sample: top_k=97 must be an int in 0 .. 96"):
        build(module, CAPACITY, sampling=dict(seed=1, top_k=97))


def test_both_models_lower_and_compile():
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from driver.gpu import compile

    module = _module("qwen2").to(torch.bfloat16)
    for built in (build(module, CAPACITY, prompt=PROMPT), build(module, CAPACITY, ring=16),
                  build(module, CAPACITY, ring=16, batch=4),
                  build(module, CAPACITY, ring=16, batch=4, sampling=dict(top_k=40, top_p=0.9, seed=7))):
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
    for batch, prompt in ((0, None), (2.0, None), (True, None), (2, 5)):
        with pytest.raises(ModelError, match=f"batch={batch!r}: a decode step takes 1 or more sequences"):
            build(_module("llama"), 32, prompt=prompt, batch=batch)
