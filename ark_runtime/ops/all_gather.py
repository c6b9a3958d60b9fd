"""Every rank's tensor stacked along the first axis in rank order, on every rank: in a World, each rank's
gather_peers copies each rank's rows into its place (its own by a local copy)."""

from __future__ import annotations

from ark_runtime.graph import Tensor
from ark_runtime.ops.peers import WorldOnly, device_tensor, rank_attrs
from ark_runtime.ops.spec import Built, arity, no_attrs


class AllGather(WorldOnly):
    kind = "all_gather"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("all_gather", inputs, 1)
        no_attrs("all_gather", attrs, ("rank", "world"))
        where = rank_attrs(attrs)
        x = inputs[0]
        device_tensor("all_gather", x)
        return Built((where["world"] * x.shape[0], *x.shape[1:]), x.dtype, where)


SPEC = AllGather()
