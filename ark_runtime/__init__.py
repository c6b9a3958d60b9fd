"""The loop-kernel runtime: a model (model.py) lowered to one resident GPU kernel (lower.py) and run by Runtime
(runtime/). `ark_runtime.from_torch` maps a PyTorch module onto the model API (frontend/); it is imported on first
use, so the runtime imports without PyTorch."""


def __getattr__(name: str):
    if name == "from_torch":
        from ark_runtime.frontend import from_torch

        return from_torch
    raise AttributeError(f"module 'ark_runtime' has no attribute {name!r}")
