"""The sum of every rank's tensor, on every rank. In a World: "one_shot", each rank's reduce_peers reads every
rank's whole tensor; "two_shot", each rank's reduce_peers sums its share of the rows (peers.shares) and its
gather_peers copies the others' sums in. "auto" picks by size and world (world.all_reduce_algorithm)."""

from __future__ import annotations

from ark_runtime.graph import ModelError, Tensor
from ark_runtime.ops.peers import WorldOnly, device_tensor, rank_attrs
from ark_runtime.ops.spec import Built, arity, no_attrs, require_float

ALGORITHMS = ("auto", "one_shot", "two_shot")


class AllReduce(WorldOnly):
    kind = "all_reduce"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("all_reduce", inputs, 1)
        no_attrs("all_reduce", attrs, ("algorithm", "rank", "world"))
        where = rank_attrs(attrs)
        x = inputs[0]
        require_float("all_reduce", x)
        device_tensor("all_reduce", x)
        algorithm = attrs.get("algorithm", "auto")
        if algorithm not in ALGORITHMS:
            raise ModelError(f"all_reduce: algorithm={algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        return Built(x.shape, x.dtype, {"algorithm": algorithm, **where})


SPEC = AllReduce()
