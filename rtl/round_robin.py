"""RoundRobin: grants one of n requests, starting after the last one granted."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class RoundRobin(wiring.Component):
    """Combinational grant, as an index and one-hot; `advance` (the grant was used) moves the start past it.

    Each one-hot bit is its request and no request ahead of it from the start: a function of the
    requests and the start alone, so a user that acts on the bit of its own requester (a queue's
    counters) does not wait on the index being encoded and compared back.
    """

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"a round robin needs at least one requester, not {n}")
        self.n = n
        super().__init__({"requests": In(n), "valid": Out(1), "grant": Out(range(n)), "grant_onehot": Out(n),
                          "advance": In(1)})

    def elaborate(self, platform):
        m = Module()
        n, req = self.n, self.requests
        start = Signal(range(n))
        for i in range(n):
            # for each start s, the requests from s up to i (cyclic, i excluded) must all be clear
            hit = [(start == s) & ~Cat(req[(s + k) % n] for k in range((i - s) % n)).any() for s in range(n)]
            m.d.comb += self.grant_onehot[i].eq(req[i] & Cat(hit).any())
        for b in range(len(self.grant)):  # the index: each bit an OR of the one-hot bits that have it
            m.d.comb += self.grant[b].eq(Cat(self.grant_onehot[i] for i in range(n) if i >> b & 1).any())
        m.d.comb += self.valid.eq(req.any())
        with m.If(self.valid & self.advance):
            m.d.sync += start.eq(Mux(self.grant == n - 1, 0, self.grant + 1))
        return m


def round_robin_model(requests: list[bool], start: int) -> int | None:
    n = len(requests)
    for k in range(n):
        if requests[(start + k) % n]:
            return (start + k) % n
    return None
