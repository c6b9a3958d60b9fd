"""What a peer GPU sends this rank (send.py's other half): a tensor of this rank's memory, written by the peer's
copy; in a World each tile that reads it waits for the rows it reads to land, and the peer's next copy waits for
this rank's last reads."""

from __future__ import annotations

from ark_runtime.graph import DTYPE_BYTES, ModelError, Tensor
from ark_runtime.ops.peers import WorldOnly, peer_of, rank_attrs, tag_of
from ark_runtime.ops.spec import Built, no_attrs


class Recv(WorldOnly):
    kind = "recv"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if inputs:
            raise ModelError(f"recv takes no tensors (its shape and dtype, the peer and the tag), not {len(inputs)}")
        no_attrs("recv", attrs, ("shape", "dtype", "peer", "tag", "rank", "world"))
        where = rank_attrs(attrs)
        shape, dtype = attrs.get("shape"), attrs.get("dtype")
        if not isinstance(shape, tuple) or not shape or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0
                                                            for s in shape):
            raise ModelError(f"recv: shape={shape!r} must be one or more positive ints (the sent tensor's shape)")
        if dtype not in DTYPE_BYTES:
            raise ModelError(f"recv: dtype={dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        peer = peer_of("recv", attrs, where["rank"], where["world"])
        return Built(shape, dtype, {"peer": peer, "tag": tag_of("recv", attrs), **where})


SPEC = Recv()
