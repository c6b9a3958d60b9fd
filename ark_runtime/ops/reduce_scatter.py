"""Each rank's share of the sum of every rank's tensor: rows [rank * n, (rank + 1) * n) of the first axis (n = the
first axis / world). In a World, each rank's reduce_peers reads that share of every rank's tensor."""

from __future__ import annotations

from ark_runtime.graph import Tensor
from ark_runtime.ops.peers import WorldOnly, device_tensor, first_axis_share, rank_attrs
from ark_runtime.ops.spec import Built, arity, no_attrs, require_float


class ReduceScatter(WorldOnly):
    kind = "reduce_scatter"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("reduce_scatter", inputs, 1)
        no_attrs("reduce_scatter", attrs, ("rank", "world"))
        where = rank_attrs(attrs)
        x = inputs[0]
        require_float("reduce_scatter", x)
        device_tensor("reduce_scatter", x)
        n = first_axis_share("reduce_scatter", x, where["world"])
        return Built((n, *x.shape[1:]), x.dtype, where)


SPEC = ReduceScatter()
