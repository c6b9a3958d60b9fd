"""A tensor sent to a peer GPU (one rank's half of a message; recv.py is the other): in a World the send becomes a
copy into the receiver's memory, run by this rank, whose tiles signal the receiver's readers (put with signal), and
each iteration's copy waits for the receiver's last reads of the buffer. The output names the message: it is the
receiver's tensor, which nothing on this rank reads."""

from __future__ import annotations

from ark_runtime.graph import Tensor
from ark_runtime.ops.peers import WorldOnly, device_tensor, peer_of, rank_attrs, tag_of
from ark_runtime.ops.spec import Built, arity, no_attrs


class Send(WorldOnly):
    kind = "send"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("send", inputs, 1)
        no_attrs("send", attrs, ("peer", "tag", "rank", "world"))
        where = rank_attrs(attrs)
        x = inputs[0]
        device_tensor("send", x)
        peer = peer_of("send", attrs, where["rank"], where["world"])
        return Built(x.shape, x.dtype, {"peer": peer, "tag": tag_of("send", attrs), **where})


SPEC = Send()
