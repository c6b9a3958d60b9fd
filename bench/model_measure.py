"""The measurer `arkdma bench models` runs on a GPU: for each case the Hugging Face module (built once and kept while
the next case uses the same one), the inputs, and each method's measuring function (bench/model_torch.py,
bench/model_arkdma.py); after each case the compiled graphs and cached GPU memory are let go."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from bench import model_arkdma, model_shapes, model_torch
from bench.models import Case, Kind, Method, ModelsConfig, Work

LOGITS = ("logits",)
BERT_OUTPUTS = ("last_hidden_state",)


class TorchMeasurer:
    def __init__(self, config: ModelsConfig, device: str = "cuda", dtype=None):
        """`device` and `dtype` (default bfloat16): where and how the modules and inputs are made (a test runs the
        PyTorch side on the CPU)."""
        import torch

        self.torch = torch
        self.config = config
        self.where, self.dtype = device, dtype or torch.bfloat16
        self.llama_shape, self.bert_shape = model_shapes.shapes(config.quick)
        self._held: tuple[object, object] | None = None  # (shape, module)

    def device(self) -> str:
        return self.torch.cuda.get_device_name() if self.where != "cpu" else "cpu"

    def versions(self) -> dict[str, str]:
        import transformers

        return {"torch": self.torch.__version__, "transformers": transformers.__version__,
                "cuda": str(self.torch.version.cuda)}

    def read_bandwidth(self) -> float:
        return model_torch.read_bandwidth(self.torch)

    def model(self, case: Case) -> str:
        return (self.bert_shape if case.kind is Kind.BERT else self.llama_shape).name

    def _module(self, shape):
        if self._held is not None and self._held[0] == shape:
            return self._held[1]
        self._held = None
        self._free()
        build = model_shapes.bert if isinstance(shape, model_shapes.BertShape) else model_shapes.llama
        module = build(self.torch, shape, device=self.where, dtype=self.dtype)
        self._held = (shape, module)
        return module

    def _free(self) -> None:
        self.torch._dynamo.reset()  # compiled code and its CUDA graphs' memory pools
        gc.collect()
        self.torch.cuda.empty_cache()

    @contextlib.contextmanager
    def prepare(self, case: Case) -> Iterator[Work]:
        torch = self.torch
        shape = self.bert_shape if case.kind is Kind.BERT else self.llama_shape
        module = self._module(shape)
        ids = model_shapes.token_ids(torch, shape.vocab, case.batch, case.tokens, device=self.where)
        weights = model_shapes.parameter_bytes(module)
        try:
            if case.kind is Kind.DECODE:
                yield self._decode(module, ids, weights)
            elif case.kind is Kind.PREFILL:
                yield self._prefill(module, ids, weights)
            else:
                yield self._bert(module, ids, weights)
        finally:
            del ids
            self._free()

    def _decode(self, module, ids, weights: int) -> Work:
        torch, config = self.torch, self.config
        batch, prompt = ids.shape
        steps = config.new_tokens
        rows = model_shapes.capacity(prompt, steps)
        kv = model_shapes.kv_bytes_per_step(self.llama_shape, batch, prompt, steps)
        return Work(weights + kv, {
            Method.EAGER: lambda: model_torch.decode_eager(torch, module, ids, steps),
            Method.STATIC: lambda: model_torch.decode_static(torch, module, ids, steps, rows),
            Method.ARKDMA: lambda: model_arkdma.decode(torch, module, ids, config),
            Method.COMPILED: lambda: model_torch.decode_compiled(torch, module, ids, steps, rows),
        })

    def _prefill(self, module, ids, weights: int) -> Work:
        torch, config = self.torch, self.config
        kwargs = {"use_cache": False}

        def arkdma():
            built = model_shapes.prefill_model(module, ids.shape[1])
            caches = model_shapes.cache_tensors(torch, built.model, ids.device, next(module.parameters()).dtype)
            bind = {**built.weights, **caches, "ids": ids[0].to(torch.int32).contiguous()}
            shape = (ids.shape[1], module.config.vocab_size)
            return model_arkdma.forward(torch, built.model, bind, {"logits": (built.logits, shape)}, config)

        return Work(weights, {
            Method.EAGER: lambda: model_torch.forward_eager(torch, module, ids, kwargs, LOGITS, config.reps,
                                                            config.samples),
            Method.ARKDMA: arkdma,
            Method.COMPILED: lambda: model_torch.forward_compiled(torch, module, ids, kwargs, config.reps,
                                                                  config.samples),
        })

    def _bert(self, module, ids, weights: int) -> Work:
        torch, config = self.torch, self.config

        def arkdma():
            imported = model_shapes.bert_import(module, ids)
            outputs = {o.path: (o.name, o.shape) for o in imported.outputs}
            return model_arkdma.forward(torch, imported.model, imported.bind(ids), outputs, config)

        return Work(weights, {
            Method.EAGER: lambda: model_torch.forward_eager(torch, module, ids, {}, BERT_OUTPUTS, config.reps,
                                                            config.samples),
            Method.ARKDMA: arkdma,
            Method.COMPILED: lambda: model_torch.forward_compiled(torch, module, ids, {}, config.reps,
                                                                  config.samples),
        })
