"""Every op kind the runtime runs, one module each (ark_runtime/ops/<kind>.py, holding `SPEC`, an OpSpec); `spec(kind)`
finds the one for an op. Modules are found by listing this package, so adding an op adds its module, its CUDA
template and its test, and nothing else (docs/adding-an-op.md)."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from ark_runtime.graph import ModelError
from ark_runtime.ops.spec import OpSpec

HELPERS = ("spec", "blocks", "measured", "peers")  # modules of this package that hold no op


@functools.cache
def specs() -> dict[str, OpSpec]:
    """Every registered spec by kind."""
    out: dict[str, OpSpec] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in HELPERS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, OpSpec):
            raise TypeError(f"ark_runtime.ops.{info.name} holds no SPEC (an OpSpec); helpers belong in HELPERS")
        if spec.kind in out:
            raise TypeError(f"op kind {spec.kind!r} is registered twice ({info.name} and another module)")
        out[spec.kind] = spec
    return out


def spec(kind: str) -> OpSpec:
    found = specs().get(kind)
    if found is None:
        raise ModelError(f"op kind {kind!r} is not one of {', '.join(sorted(specs()))}")
    return found
