"""The PyTorch front end refusing what it cannot map, each time with one FrontendError that names the ATen op, its
graph node and its module path (or the argument at fault); what it drops without a word (ops no output needs); and
the runtime importing without PyTorch."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
pytest.importorskip("transformers", reason="the torch extra is not installed (pip install -e '.[torch]')")

import torch.nn.functional as F  # noqa: E402

import ark_runtime  # noqa: E402
from ark_runtime.frontend import FrontendError  # noqa: E402
from ark_runtime.frontend.recorder import capabilities  # noqa: E402
from tests.unit.frontend_models import ids, kwargs, tiny  # noqa: E402

nn = torch.nn


class Sorter(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return torch.sort(self.proj(x), dim=-1).values


class Wrapper(nn.Module):
    def __init__(self, inner, keep: bool = True):
        super().__init__()
        self.inner, self.keep = inner, keep
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        sorted_ = self.inner(x)
        return self.out(sorted_ if self.keep else x) + 1


class Spectrum(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


class Mlp(nn.Module):
    def __init__(self, p: float = 0.0):
        super().__init__()
        self.a, self.b, self.drop = nn.Linear(8, 16), nn.Linear(16, 8), nn.Dropout(p)

    def forward(self, x):
        return self.b(self.drop(F.relu(self.a(x))))


class MaskedAttention(nn.Module):
    """Self-attention over [B, S, 16] with the mask given (a constant the module holds)."""

    def __init__(self, mask):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, 2, 8).transpose(1, 2) for t in self.qkv(x).split(16, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask).transpose(1, 2).reshape(b, s, 16)


def _refused(match: str, fn):
    with pytest.raises(FrontendError, match=match) as info:
        fn()
    return str(info.value)


def test_an_unmapped_op_is_named_with_its_node_and_module_path():
    x = torch.randn(4, 8)
    message = _refused(r"^aten::sort ", lambda: ark_runtime.from_torch(Wrapper(Sorter()).eval(), (x,)))
    assert "node 'sort'" in message and "module 'inner'" in message and "Supported:" in message


def test_the_first_unmapped_op_is_named_not_one_after_it():
    message = _refused(r"^aten::fft_rfft ", lambda: ark_runtime.from_torch(Spectrum().eval(), (torch.randn(4, 16),)))
    assert "abs" not in message.split(":")[0]


def test_an_unmapped_op_no_output_needs_is_dropped():
    """Like torch.export's own dead code: an op whose result no output reads changes nothing, so it is not mapped."""
    model = Wrapper(Sorter(), keep=False).eval()
    x = torch.randn(4, 8)
    imported = ark_runtime.from_torch(model, (x,))
    assert {op.kind for op in imported.model.ops} == {"matmul", "binary"}
    with torch.no_grad():
        want = model(x).double().numpy()
    assert abs(imported.reference(x)[0] - want).max() < 1e-6


@pytest.mark.parametrize("module", [lambda x: x, "Mlp", None, torch.randn(2)])
def test_not_a_module_is_refused(module):
    _refused("takes a torch.nn.Module or a torch.export.ExportedProgram",
             lambda: ark_runtime.from_torch(module, (torch.randn(4, 8),)))


@pytest.mark.parametrize("inputs, match", [
    ({"x": torch.randn(4, 8)}, "example_inputs must be a tuple"),
    (3, "example_inputs must be a tuple"),
    ((torch.randn(4, 8), torch.randn(4, 8)), "torch.export could not trace Mlp .*positional"),
    ((torch.randn(4, 9),), "torch.export could not trace Mlp"),
])
def test_wrong_example_inputs_are_refused(inputs, match):
    _refused(match, lambda: ark_runtime.from_torch(Mlp().eval(), inputs))


def test_wrong_keyword_examples_and_options_are_refused():
    _refused("example_kwargs must be a dict", lambda: ark_runtime.from_torch(Mlp().eval(), (torch.randn(4, 8),),
                                                                            [("x", 1)]))
    _refused("linear_weights='copies' is not one of", lambda: ark_runtime.from_torch(
        Mlp().eval(), (torch.randn(4, 8),), linear_weights="copies"))


def test_float_ids_are_refused():
    """torch 2.13's export refuses them itself; 2.11's traces them, and the embedding refuses."""
    _refused(r"torch.export could not trace .*indices|^aten::embedding .*ids that are not integer",
             lambda: ark_runtime.from_torch(tiny("llama"), (ids(1).float(),), kwargs("llama")))


def test_float64_is_refused_naming_the_argument():
    _refused(r"argument 'x' is a torch.float64 tensor", lambda: ark_runtime.from_torch(
        Mlp().eval().double(), (torch.randn(4, 8, dtype=torch.float64),)))


def test_training_mode_dropout_is_refused():
    _refused(r"^aten::dropout .*module 'drop'.*call module.eval\(\)",
             lambda: ark_runtime.from_torch(Mlp(p=0.5), (torch.randn(4, 8),)))


def test_dynamic_shapes_are_refused():
    x = torch.randn(4, 8)
    exported = torch.export.export(Mlp().eval(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("rows", min=2)}})
    _refused("a dynamic shape .*fixed shapes", lambda: ark_runtime.from_torch(exported))


def test_a_padding_mask_argument_is_refused():
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :3] = 0
    message = _refused(r"attention mask computed from the inputs", lambda: ark_runtime.from_torch(
        tiny("llama"), (ids(2),), {"attention_mask": mask, "use_cache": False}))
    assert "module 'model.layers.0.self_attn'" in message


@pytest.mark.parametrize("kind", ["band", "bias"])
def test_masks_other_than_causal_or_full_are_refused(kind):
    s = 6
    if kind == "band":  # a sliding window of 2
        i = torch.arange(s)
        mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 2)
        match = "neither causal nor full"
    else:
        mask = -0.5 * torch.arange(s).float().expand(s, s)
        match = "entries other than 0 and large negatives"
    _refused(match, lambda: ark_runtime.from_torch(MaskedAttention(mask).eval(), (torch.randn(1, s, 16),)))


def test_a_full_or_causal_constant_mask_maps():
    s = 6
    for mask, causal in ((torch.ones(s, s, dtype=torch.bool), False), (torch.ones(s, s, dtype=torch.bool).tril(),
                                                                        True)):
        model, x = MaskedAttention(mask).eval(), torch.randn(2, s, 16)
        imported = ark_runtime.from_torch(model, (x,))
        assert [op.attr("causal") for op in imported.model.ops if op.kind == "attention"] == [causal]
        with torch.no_grad():
            assert abs(imported.reference(x)[0] - model(x).double().numpy()).max() < 1e-5


def test_rows_picked_from_a_batch_are_refused():
    """BERT's pooler takes token 0 of each sequence: rows of a [B, S, E] tensor, which batch 1 gathers with an
    embedding of a 2-D tensor but a batch cannot without a reshape op."""
    _refused(r"^aten::linear .*module 'pooler.dense'.*rows picked from a batched",
             lambda: ark_runtime.from_torch(tiny("bert"), (ids(2),), {}))


class Upcast(nn.Module):
    def forward(self, x):
        return x.float() * 2


def test_a_cast_maps_only_where_the_model_has_one():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    if not capabilities().cast:
        _refused(r"^aten::_to_copy|^aten::to.*not supported yet: .*Model\.cast|not supported yet: .*Model\.cast",
                 lambda: ark_runtime.from_torch(Upcast().eval(), (x,)))
        return
    imported = ark_runtime.from_torch(Upcast().eval(), (x,))
    assert "cast" in {op.kind for op in imported.model.ops}
    assert abs(imported.reference(x)[0] - (x.double() * 2).numpy()).max() == 0


class Stack(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj, self.dim = nn.Linear(8, 8), dim

    def forward(self, x):
        y = self.proj(x)
        return torch.cat([y, y * 2], dim=self.dim)


def test_cat_off_the_last_axis_is_refused_and_on_it_needs_concat():
    x = torch.randn(4, 8)
    _refused(r"^aten::cat .*along axis 0", lambda: ark_runtime.from_torch(Stack(0).eval(), (x,)))
    if not capabilities().concat:
        _refused(r"^aten::cat .*not supported yet: .*Model\.concat",
                 lambda: ark_runtime.from_torch(Stack(-1).eval(), (x,)))
        return
    module = Stack(-1).eval()
    imported = ark_runtime.from_torch(module, (x,))
    assert "concat" in {op.kind for op in imported.model.ops}
    with torch.no_grad():
        assert abs(imported.reference(x)[0] - module(x).double().numpy()).max() < 1e-5


def test_bind_checks_the_arguments():
    imported = ark_runtime.from_torch(tiny("llama"), (ids(2),), kwargs("llama"))
    _refused(r"argument 'input_ids' has shape \(2, 8\); the model was imported for \(2, 16\)",
             lambda: imported.bind(ids(2)[:, :8], use_cache=False))
    _refused(r"argument 'input_ids' is torch.float32", lambda: imported.bind(ids(2).float(), use_cache=False))
    _refused(r"argument 'use_cache' is True, but the export fixed it at False",
             lambda: imported.bind(ids(2), use_cache=True))
    _refused(r"keyword arguments \['foo'\] were not in the example", lambda: imported.bind(ids(2), foo=1))
    _refused(r"do not have the structure of the example", lambda: imported.bind())
    _refused(r"a list, tuple or dict where the example had a tensor", lambda: imported.bind([[1, 2]], use_cache=False))
    _refused(r"argument 'input_ids' must be a torch.Tensor, not str", lambda: imported.bind("ids", use_cache=False))


def test_the_runtime_imports_without_torch_and_from_torch_says_what_to_install():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ark_runtime, ark_runtime.frontend, ark_runtime.lower\n"
            "from ark_runtime.frontend import FrontendError\n"
            "try:\n    ark_runtime.from_torch(object(), ())\n"
            "except FrontendError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: from_torch needs PyTorch: install the project's torch extra" in out.stdout
