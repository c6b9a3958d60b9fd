"""The PyTorch front end on tiny Hugging Face models (tests/unit/frontend_models.py): Llama, Qwen2 and BERT, eager and
SDPA attention, batch 1 and 2, fp32 and bf16. Each imported model, run in float64 by reference.evaluate, against the
module's own forward on the CPU; the patterns mapped whole (RMSNorm, attention, rotary); where every model input comes
from; every model tensor's graph node; lowering and the kernel compiled by NVRTC for sm_90.

Tolerances: fp32 outputs within 1e-5 of the output's largest magnitude; bf16 outputs (the module's forward rounds
each op to bf16, 8 bits of mantissa: 0.4% a rounding) within 2%."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
pytest.importorskip("transformers", reason="the torch extra is not installed (pip install -e '.[torch]')")

import ark_runtime  # noqa: E402
from ark_runtime.frontend import FrontendError, Source  # noqa: E402
from tests.unit.frontend_models import ARCHS, HEADS, LAYERS, SEQ, forward, ids, kwargs, tiny  # noqa: E402

FP32_TOL, BF16_TOL = 1e-5, 2e-2


def _worst(imported, model, arch, input_ids) -> float:
    """The largest error over the outputs, relative to each output's largest magnitude."""
    got = imported.reference(input_ids, **kwargs(arch))
    want = forward(model, arch, input_ids)
    assert len(got) == len(want) == len(imported.outputs)
    worst = 0.0
    for g, w, o in zip(got, want, imported.outputs):
        w = w.double().numpy()
        assert g.shape == w.shape == o.shape
        worst = max(worst, float(np.abs(g - w).max() / max(1.0, np.abs(w).max())))
    return worst


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHS)
def test_fp32_matches_the_module(arch, attn, batch):
    model = tiny(arch, attn, pooler=batch == 1)
    x = ids(batch)
    imported = ark_runtime.from_torch(model, (x,), kwargs(arch))
    assert _worst(imported, model, arch, x) < FP32_TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_matches_the_module(arch):
    model = tiny(arch, "sdpa", torch.bfloat16)
    x = ids(1)
    imported = ark_runtime.from_torch(model, (x,), kwargs(arch))
    assert {t.dtype for t in imported.model.tensors} <= {"bf16", "int32"}
    assert _worst(imported, model, arch, x) < BF16_TOL


def _kinds(model) -> list[tuple[str, str]]:
    return [(op.kind, op.fn) for op in model.ops]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_decoders_map_norms_attention_and_rotary_whole(arch, attn):
    imported = ark_runtime.from_torch(tiny(arch, attn), (ids(1),), kwargs(arch))
    kinds = _kinds(imported.model)
    assert kinds.count(("rmsnorm", "rmsnorm")) == 2 * LAYERS + 1
    assert not any(k == "reduce" for k, _ in kinds)  # the mean of squares went into the RMSNorms
    attention = [op for op in imported.model.ops if op.kind == "attention"]
    assert len(attention) == LAYERS and all(op.attr("heads") == HEADS and op.attr("causal") for op in attention)
    q = imported.model.tensors[attention[0].inputs[0]]
    assert q.shape == (SEQ, 64)  # batch 1: [S, heads * D], the leading axis of 1 dropped
    from ark_runtime.frontend.recorder import capabilities

    if capabilities().rope_half:
        assert kinds.count(("rope", "rope")) == 2 * LAYERS
    else:  # rotate_half as a matmul by a signed permutation: q and k of every layer
        assert sum(b.name.startswith("rotate_half") for b in imported.inputs) >= 2


def test_bert_maps_layernorm_gelu_and_full_attention():
    imported = ark_runtime.from_torch(tiny("bert", "eager"), (ids(1),), {})
    kinds = _kinds(imported.model)
    assert kinds.count(("layernorm", "layernorm")) == 2 * LAYERS + 1
    assert kinds.count(("unary", "gelu_erf")) == LAYERS and kinds.count(("unary", "tanh")) == 1
    assert [op.attr("causal") for op in imported.model.ops if op.kind == "attention"] == [False] * LAYERS
    assert [o.path for o in imported.outputs] == ["last_hidden_state", "pooler_output"]
    assert [o.name for o in imported.outputs] == ["last_hidden_state", "pooler_output"]


def test_qwen2_binds_the_projection_biases_where_pytorch_holds_them():
    model = tiny("qwen2")
    imported = ark_runtime.from_torch(model, (ids(1),), kwargs("qwen2"))
    bias = next(b for b in imported.inputs if b.target == "model.layers.0.self_attn.q_proj.bias")
    assert bias.source is Source.PARAMETER and not bias.copied and bias.shape == (64,)
    bound = imported.bind(ids(1), use_cache=False)
    assert bound[bias.name].data_ptr() == model.model.layers[0].self_attn.q_proj.bias.data_ptr()


def test_bindings_say_where_each_input_comes_from():
    model = tiny("llama")
    x = ids(2)
    imported = ark_runtime.from_torch(model, (x,), kwargs("llama"))
    by_target = {b.target: b for b in imported.inputs}
    assert {b.name for b in imported.inputs} == {t.name for t in imported.model.tensors if t.producer is None}

    user = by_target["input_ids"]
    assert (user.source, user.shape, user.dtype, user.torch_shape) == (Source.USER_INPUT, (2, SEQ), "int32", (2, SEQ))
    norm = by_target["model.layers.1.input_layernorm.weight"]
    assert norm.source is Source.PARAMETER and not norm.copied and norm.steps == ()
    q = by_target["model.layers.0.self_attn.q_proj.weight"]  # [N, K] in PyTorch, [K, N] for the runtime's matmul
    assert q.copied and q.shape == (64, 64) and ("transpose",) in q.steps
    assert all(b.tensor is not None for b in imported.inputs if b.source is Source.CONSTANT)

    bound = imported.bind(x, use_cache=False)
    assert set(bound) == {b.name for b in imported.inputs}
    assert bound[user.name].dtype == torch.int32 and torch.equal(bound[user.name].long(), x)
    assert bound[norm.name].data_ptr() == model.model.layers[1].input_layernorm.weight.data_ptr()
    assert torch.equal(bound[q.name], model.model.layers[0].self_attn.q_proj.weight.t())
    for b in imported.inputs:
        assert tuple(bound[b.name].shape) == b.shape and not bound[b.name].requires_grad


def test_every_model_tensor_names_the_node_and_module_it_came_from():
    imported = ark_runtime.from_torch(tiny("llama"), (ids(1),), kwargs("llama"))
    names = {t.name for t in imported.model.tensors}
    assert set(imported.origins) == names
    ops = {imported.model.tensors[op.output].name: op for op in imported.model.ops}
    attention = [n for n, op in ops.items() if op.kind == "attention"]
    assert [imported.origins[n].module_path for n in attention] == [f"model.layers.{i}.self_attn"
                                                                    for i in range(LAYERS)]
    rms = [n for n, op in ops.items() if op.kind == "rmsnorm"]
    assert imported.origins[rms[0]].module_path == "model.layers.0.input_layernorm"
    assert imported.origins[rms[-1]].module_path == "model.norm"
    logits = imported.outputs[0].name
    assert logits == "logits" and imported.origins[logits].module_path == "lm_head"
    assert imported.origins["input_ids"].node == "input_ids"


def test_without_the_newer_ops_the_fallbacks_compute_the_same(monkeypatch):
    """rotate_half by a signed permutation matmul where the model has no half-style rope: the same numbers."""
    from ark_runtime.frontend import recorder

    model, x = tiny("llama"), ids(1)
    monkeypatch.setattr(recorder, "capabilities", lambda: recorder.Capabilities(False, False, False, False))
    imported = ark_runtime.from_torch(model, (x,), kwargs("llama"))
    assert not any(op.kind in ("rope", "cast", "transpose", "concat") for op in imported.model.ops)
    assert _worst(imported, model, "llama", x) < FP32_TOL


def test_linear_weights_by_transpose_needs_the_transpose_op():
    from ark_runtime.frontend.recorder import capabilities

    model, x = tiny("llama"), ids(1)
    if not capabilities().transpose:
        with pytest.raises(FrontendError, match=r"not supported yet: .*Model\.transpose"):
            ark_runtime.from_torch(model, (x,), kwargs("llama"), linear_weights="transpose")
        return
    imported = ark_runtime.from_torch(model, (x,), kwargs("llama"), linear_weights="transpose")
    assert not any(b.copied for b in imported.inputs if b.source is Source.PARAMETER)
    assert _worst(imported, model, "llama", x) < FP32_TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_lowers_and_the_kernel_compiles_for_sm90(arch):
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from ark_runtime.lower import lower
    from ark_runtime.reference import evaluate, run_plan
    from ark_runtime.scheduler import DeviceSpec
    from driver.gpu import compile

    x = ids(1)
    imported = ark_runtime.from_torch(tiny(arch, "sdpa", torch.bfloat16), (x,), kwargs(arch))
    small = lower(imported.model, DeviceSpec(num_sms=8))
    inputs = imported.reference_inputs(x, **kwargs(arch))
    want, got = evaluate(imported.model, inputs), run_plan(small.plan, small.model, inputs)
    for src, dst in zip(imported.model.outputs, small.model.outputs):
        assert np.allclose(got[dst], want[src], rtol=1e-9, atol=1e-9)
    lowered = lower(imported.model, DeviceSpec(num_sms=132))
    assert compile.cubin(lowered.source.text, "sm_90", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
