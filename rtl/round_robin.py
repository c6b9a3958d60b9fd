"""RoundRobin: grants one of n requests, starting after the last one granted."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class RoundRobin(wiring.Component):
    """Combinational grant; `advance` (the grant was used) moves the start past it."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"a round robin needs at least one requester, not {n}")
        self.n = n
        super().__init__({"requests": In(n), "valid": Out(1), "grant": Out(range(n)), "advance": In(1)})

    def elaborate(self, platform):
        m = Module()
        n = self.n
        start = Signal(range(n))
        for k in reversed(range(n)):  # the lowest k (nearest the start) is assigned last and wins
            idx = Signal(range(n), name=f"idx{k}")
            m.d.comb += idx.eq(Mux(start + k >= n, start + k - n, start + k))
            with m.If(self.requests.bit_select(idx, 1)):
                m.d.comb += [self.grant.eq(idx), self.valid.eq(1)]
        with m.If(self.valid & self.advance):
            m.d.sync += start.eq(Mux(self.grant == n - 1, 0, self.grant + 1))
        return m


def round_robin_model(requests: list[bool], start: int) -> int | None:
    n = len(requests)
    for k in range(n):
        if requests[(start + k) % n]:
            return (start + k) % n
    return None
