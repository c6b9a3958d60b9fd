"""`arkdma bench models`'s models on the CPU: the shapes are Llama-3.2-1B's and BERT-Large's (their parameter counts),
the quick config's Hugging Face modules build in bf16, every case's loop-kernel models (prefill and decode, prefill,
BERT through the front end) are made by the benchmark's own functions and lowered for a 132-SM GPU, and PyTorch's
greedy decode (dynamic cache, static cache) gives Hugging Face's generate() tokens; the benchmark's own measurer, its
PyTorch side run on the CPU (CUDA events stood in for by the host's clock), fills every PyTorch column and records the
runtime's refusal to start without a GPU while the run goes on. No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the `torch` extra (PyTorch, transformers) is not installed")
pytest.importorskip("transformers", reason="the `torch` extra (PyTorch, transformers) is not installed")

from ark_runtime.lower import lower  # noqa: E402
from ark_runtime.scheduler import DeviceSpec  # noqa: E402
from bench import model_shapes, model_torch  # noqa: E402
from bench.models import CASES, Kind, ModelsConfig, quick_config  # noqa: E402

H200 = DeviceSpec(num_sms=132)


def llama_parameters(s: model_shapes.LlamaShape) -> int:
    kv = s.kv_heads * s.head_dim
    layer = 2 * s.hidden * s.hidden + 2 * s.hidden * kv + 3 * s.hidden * s.intermediate + 2 * s.hidden
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.layers * layer + s.hidden


def bert_parameters(s: model_shapes.BertShape) -> int:  # without the pooler
    embeddings = (s.vocab + s.max_positions + 2) * s.hidden + 2 * s.hidden
    layer = 4 * (s.hidden * s.hidden + s.hidden) + 2 * (s.hidden * s.intermediate) + s.intermediate + s.hidden
    return embeddings + s.layers * (layer + 4 * s.hidden)


def test_the_full_shapes_are_llama_3_2_1b_and_bert_large():
    assert llama_parameters(model_shapes.LLAMA_1B) == 1_235_814_400  # Llama-3.2-1B's count
    assert bert_parameters(model_shapes.BERT_LARGE) + 1024 * 1024 + 1024 == 335_141_888  # BERT-Large, with pooler
    s = model_shapes.LLAMA_1B
    assert (s.rope_theta, s.tied, s.kv_heads, s.head_dim) == (500000.0, True, 8, 64)


@pytest.fixture(scope="module")
def quick():
    llama_shape, bert_shape = model_shapes.shapes(quick=True)
    return model_shapes.llama(torch, llama_shape), model_shapes.bert(torch, bert_shape)


def test_the_quick_modules_are_bf16_with_the_parameters_their_shapes_say(quick):
    llama, bert = quick
    for module in quick:
        assert {p.dtype for p in module.parameters()} == {torch.bfloat16} and not module.training
    assert llama.lm_head.weight.data_ptr() == llama.model.embed_tokens.weight.data_ptr()  # tied: counted once
    assert model_shapes.parameter_bytes(llama) == 2 * llama_parameters(model_shapes.LLAMA_QUICK)
    assert model_shapes.parameter_bytes(bert) == 2 * bert_parameters(model_shapes.BERT_QUICK)


def _loop_models(case, llama, bert, config: ModelsConfig):
    """Every loop-kernel model the benchmark makes for a case, by its own functions."""
    if case.kind is Kind.DECODE:
        prefill, step = model_shapes.decode_models(llama, case.batch, case.tokens, config.new_tokens)
        assert step.batch == case.batch and step.ring == config.new_tokens
        assert step.capacity == model_shapes.capacity(case.tokens, config.new_tokens)
        return [prefill.model, step.model]
    if case.kind is Kind.PREFILL:
        return [model_shapes.prefill_model(llama, case.tokens).model]
    ids = model_shapes.token_ids(torch, model_shapes.BERT_QUICK.vocab, case.batch, case.tokens)
    imported = model_shapes.bert_import(bert, ids)
    assert [o.shape for o in imported.outputs] == [(case.batch, case.tokens, model_shapes.BERT_QUICK.hidden)]
    return [imported.model]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_cases_loop_kernel_models_build_and_lower_for_132_sms(quick, case):
    llama, bert = quick
    for model in _loop_models(case, llama, bert, quick_config(ModelsConfig())):
        lowered = lower(model, H200, cache=False)
        assert lowered.plan.tiles and lowered.source.text
        assert {t.dtype for t in model.tensors} <= {"bf16", "int32"}


def test_the_decode_caches_are_each_sequences_block(quick):
    llama, _ = quick
    _, step = model_shapes.decode_models(llama, 8, 32, 64)
    caches = model_shapes.cache_tensors(torch, step.model, "cpu", torch.bfloat16)
    s = model_shapes.LLAMA_QUICK
    assert len(caches) == 2 * s.layers
    assert {tuple(c.shape) for c in caches.values()} == {(8, 32 + 64 + 1, s.kv_heads * s.head_dim)}


@pytest.fixture
def cpu_sync(monkeypatch):
    """PyTorch's decode loops synchronize the GPU around the timed steps; on the CPU there is nothing to wait for."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def test_pytorchs_greedy_decode_gives_generates_tokens(cpu_sync):
    module = model_shapes.llama(torch, model_shapes.LLAMA_QUICK, dtype=torch.float32, seed=3)
    ids = model_shapes.token_ids(torch, model_shapes.LLAMA_QUICK.vocab, 2, 9, seed=4)
    steps = 7
    eager = model_torch.decode_eager(torch, module, ids, steps)
    with torch.no_grad():
        want = module.generate(ids, max_new_tokens=steps, do_sample=False, min_new_tokens=steps)[:, ids.shape[1]:]
    assert eager.tokens == want.tolist()
    assert np.array(eager.margins).shape == (2, steps) and (np.array(eager.margins) >= 0).all() and eager.ms > 0
    static = model_torch.decode_static(torch, module, ids, steps, model_shapes.capacity(9, steps))
    assert static.ms > 0 and static.tokens is None


class HostClockEvent:
    """torch.cuda.Event's timing calls, by perf_counter (the CPU runs each op before it returns)."""

    def __init__(self, enable_timing: bool = True):
        self.at = None

    def record(self):
        import time

        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end) -> float:
        return (end.at - self.at) * 1e3


def test_the_measurer_runs_pytorchs_side_on_the_cpu_and_records_what_cannot_run(cpu_sync, monkeypatch):
    from driver.gpu.launch import gpu_unavailable_reason

    from bench import models
    from bench.model_measure import TorchMeasurer

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here: the runtime would start and read tensors on the CPU")
    monkeypatch.setattr(torch.cuda, "Event", HostClockEvent)
    config = quick_config(ModelsConfig(cases=models.pick_cases("decode-b8,prefill-128,bert-b1-s128"), compile=False,
                                       row_timeout_s=120))
    result = models.run(config, TorchMeasurer(config, device="cpu", dtype=torch.float32))
    assert result.complete and result.device == "cpu" and result.read_gbps is None
    assert "read bandwidth not measured" in result.notes[0]
    decode, prefill, bert = result.rows
    for r in result.rows:
        assert set(r.errors) == {"arkdma"} and "GPU" in r.errors["arkdma"], r.errors
        assert r.eager_ms > 0 and r.compiled_ms is None and r.ok is None and r.pct_hbm is None
    llama_bytes = 4 * llama_parameters(model_shapes.LLAMA_QUICK)  # float32 here
    assert prefill.bytes_read == llama_bytes and bert.bytes_read == 4 * bert_parameters(model_shapes.BERT_QUICK)
    kv = model_shapes.kv_bytes_per_step(model_shapes.LLAMA_QUICK, 8, 32, config.new_tokens)
    assert decode.static_ms > 0 and decode.bytes_read == llama_bytes + kv and decode.new_tokens == 64
