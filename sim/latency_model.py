"""Modelled end-to-end latency of one GPU-driven descriptor: measured PCIe terms around the simulated engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Measured on one H100 (PCIe Gen5 x16), ../shared/BASELINES.md section "One H100 80GB HBM3",
# "Signalling and ceilings": GPU <-> CPU ping-pong through mapped pinned memory, one way 0.88 us
# (round trip 1.77 us); D2H copy ceiling 55.0 GB/s (256 MiB copies).
ONE_WAY_NS = 880.0
PCIE_D2H_GBPS = 55.0
SOURCE = "BASELINES.md, one H100 (PCIe Gen5 x16): ping-pong one way 0.88 us, D2H copy ceiling 55.0 GB/s"


@dataclass(frozen=True)
class Term:
    name: str
    ns: float
    basis: str


@dataclass(frozen=True)
class EndToEnd:
    """A model, not a measurement: only the engine term comes from the simulation."""

    bytes: int
    terms: tuple[Term, ...]

    @property
    def total_ns(self) -> float:
        return sum(t.ns for t in self.terms)

    def as_dict(self) -> dict:
        return {"label": "model", "bytes": self.bytes, "direction": "D2H", "total_ns": self.total_ns,
                "terms": [asdict(t) for t in self.terms], "source": SOURCE}


def gpu_driven_d2h(nbytes: int, engine_ns: float, engine_basis: str) -> EndToEnd:
    """GPU thread posts the descriptor and doorbell into the BAR, the engine moves the data (simulated:
    doorbell -> counter write issued), the data crosses PCIe, the counter write lands in GPU memory."""
    return EndToEnd(nbytes, (
        Term("GPU posts descriptor + doorbell into the BAR (posted PCIe write)", ONE_WAY_NS,
             "one-way GPU->host posted write, 0.88 us measured (BASELINES.md)"),
        Term("engine: doorbell -> counter write issued", engine_ns, engine_basis),
        Term("data over PCIe", nbytes / PCIE_D2H_GBPS,
             f"{nbytes} B at the 55.0 GB/s D2H ceiling measured (BASELINES.md); counted on top of the engine's "
             "own beats, so an upper bound"),
        Term("counter write lands in GPU memory (posted PCIe write)", ONE_WAY_NS,
             "one-way posted write, 0.88 us measured (BASELINES.md)"),
    ))


def gpu_driven_through_card(nbytes: int, card_ns: float, card_basis: str) -> EndToEnd:
    """The same GPU-driven descriptor with the whole card simulated: its PCIe link, the host memory's read
    round trip and the data's writes are inside the simulated term, so no separate data term is added. The
    card's term runs from the doorbell at its pins to the completion word's write request leaving them: the
    GPU polls its own memory, so the word's hop from the card is the measured one-way posted write, as the
    doorbell's hop to the card is (the simulated hop to host memory is not added on top of it)."""
    return EndToEnd(nbytes, (
        Term("GPU posts descriptor + doorbell into the BAR (posted PCIe write)", ONE_WAY_NS,
             "one-way GPU->host posted write, 0.88 us measured (BASELINES.md)"),
        Term("card: doorbell at its pins -> completion word's write request leaving them", card_ns, card_basis),
        Term("completion word reaches the GPU's memory (posted PCIe write)", ONE_WAY_NS,
             "one-way posted write, 0.88 us measured (BASELINES.md)"),
    ))
