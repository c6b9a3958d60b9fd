"""The cocotb module of peer-to-peer DMA through the PCIe model: the card (sim/card.py) and a second endpoint
standing in for a GPU's memory (sim/peer_memory.py), each on its own root port of one root complex. The card's
regions name bus addresses in the peer's 64-bit prefetchable BAR as well as in host memory, and the engine
copies host -> peer, peer -> host and peer -> peer, and writes an immediate signal into the peer; every
destination is checked byte for byte with guard bytes around it, and the completion word in host memory.

Peer requests must go endpoint to endpoint: the root complex routes them between its root ports by the bridge
windows, so none may reach the root complex's own memory handlers, and every request the peer receives carries
the card's requester ID. A read of the hole after the peer's memory BAR (inside its root port's window, in no
BAR) is answered Unsupported Request by the peer, ends in BUS_ERROR and writes nothing. The checker is shown to
catch a byte planted wrong in the peer's memory, in the data and in a guard. The result goes to
ARKDMA_SIM_RESULT as JSON."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import cocotb
from cocotbext.pcie.core.tlp import TlpType

from driver import register_program as rp
from driver.abi import QUEUE, Flag, Perm
from driver.descriptor import Descriptor
from sim.card import bar0_bytes, session_params
from sim.card_session import PERIOD_NS, Card, CardTB
from sim.driver_model import SimDriver
from sim.peer_memory import PeerMemory

GUARD = 0xA5
GUARD_BYTES = 64
ERROR_BIT = 1 << 63
SIGNAL = 0x5157_4E41_4C00_0001  # the immediate value written into the peer after the data


def guarded_mismatches(image: bytes, at: int, data: bytes, guard: int = GUARD, around: int = GUARD_BYTES) -> list[int]:
    """Offsets (relative to `at`) where image[at - around : at + len(data) + around] differs from guard bytes,
    then `data`, then guard bytes: empty when the copy landed exactly there and touched nothing around it."""
    want = bytes([guard]) * around + data + bytes([guard]) * around
    got = image[at - around:at + len(data) + around]
    if len(got) != len(want):
        raise ValueError(f"the image ends before the guarded span [{at - around}, {at + len(data) + around})")
    return [i - around for i in range(len(want)) if got[i] != want[i]]


class RootComplexWatch:
    """The root complex's own memory-request handlers, wrapped to keep every address they see: a peer request
    that went up to the root complex instead of across to the peer's root port shows here."""

    def __init__(self, rc):
        self.addresses: list[int] = []
        for kind in (TlpType.MEM_READ, TlpType.MEM_READ_64, TlpType.MEM_WRITE, TlpType.MEM_WRITE_64):
            rc.register_rx_tlp_handler(kind, self._wrap(rc.rx_tlp_handler[kind]))

    def _wrap(self, serve):
        async def handle(tlp):
            self.addresses.append(tlp.address)
            await serve(tlp)
        return handle


@cocotb.test()
async def card_peer_to_peer(dut):
    params = session_params()
    card = Card(dut)
    peer = PeerMemory(card.rc)  # on the root complex's second port
    await card.open(bar0_bytes(params))
    peer.open()
    watch = RootComplexWatch(card.rc)
    card_id = str(card.dev.functions[0].pcie_id)
    tb = CardTB(card)
    driver = SimDriver(tb, budget_cycles=int(2_000_000 / PERIOD_NS))  # 2 ms per poll
    await driver.open()
    await driver.reset()
    result = {"peer_base": peer.base, "peer_hole": peer.hole}

    # host memory above 4 GiB (RootComplexMemory), the peer's memory at its BAR
    host = tb.memory
    src_size = 0x8000
    host_src, host_dst, words = host.alloc(src_size), host.alloc(0x10000), host.alloc(64)
    src = bytes((i * 29 + 7) & 0xFF for i in range(src_size))
    host.write(host_src, src)
    host.write(host_dst, bytes([GUARD]) * 0x10000)
    peer_src_at, peer_dst_at = 0x10000, 0x40000
    peer_src = bytes((i * 53 + 3) & 0xFF for i in range(0x8000))
    peer.write(peer_src_at, peer_src)
    peer.write(peer_dst_at, bytes([GUARD]) * 0x40000)
    regions = {"host_src": 0, "host_dst": 1, "words": 2, "peer": 3, "hole": 4}
    await driver.set_region(regions["host_src"], host_src, src_size, int(Perm.READ))
    await driver.set_region(regions["host_dst"], host_dst, 0x10000, int(Perm.WRITE))
    await driver.set_region(regions["words"], words, 64, int(Perm.WRITE))
    await driver.set_region(regions["peer"], peer.base, peer.memory_bytes, int(Perm.READ | Perm.WRITE))
    await driver.set_region(regions["hole"], peer.hole, 0x1000, int(Perm.READ | Perm.WRITE))
    await driver.configure_queue(0, regions["words"], 0, 0)
    await driver.enable_queue(0)

    # (kind, descriptor, where its bytes must land: ("host"|"peer", offset in the destination buffer), bytes)
    plan: list[tuple[str, Descriptor, tuple[str, int], bytes]] = []
    host_at, peer_at = GUARD_BYTES + 3, peer_dst_at + GUARD_BYTES + 5
    s_at = 1
    for n in (1021, 4096 + 77, 8):  # off the 8-byte word, across 4 KiB and the payload size
        plan.append(("host->peer", Descriptor(regions["host_src"], s_at, regions["peer"], peer_at, n),
                     ("peer", peer_at), src[s_at:s_at + n]))
        s_at, peer_at = s_at + n + 3, peer_at + n + 2 * GUARD_BYTES + 7
    p_at = 5
    for n in (3000, 64):
        plan.append(("peer->host", Descriptor(regions["peer"], peer_src_at + p_at, regions["host_dst"], host_at, n),
                     ("host", host_at), peer_src[p_at:p_at + n]))
        p_at, host_at = p_at + n + 11, host_at + n + 2 * GUARD_BYTES + 1
    for n in (4096 + 333, 17):
        plan.append(("peer->peer", Descriptor(regions["peer"], peer_src_at + p_at, regions["peer"], peer_at, n),
                     ("peer", peer_at), peer_src[p_at:p_at + n]))
        p_at, peer_at = p_at + n + 11, peer_at + n + 2 * GUARD_BYTES + 7
    peer_at = (peer_at + 7) & ~7
    plan.append(("signal->peer", Descriptor.immediate(regions["peer"], peer_at, SIGNAL, flags=Flag.NOTIFY),
                 ("peer", peer_at), SIGNAL.to_bytes(8, "little")))
    descs = [replace(d, cookie=k) for k, (_, d, _, _) in enumerate(plan)]
    requests_before = len(peer.device.requests)
    await driver.write_slots(0, 0, b"".join(d.pack() for d in descs))
    await driver.ring(0, len(descs))
    await driver.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, len(descs), "the copies to complete")])
    word = await _word(tb, words, len(descs))
    assert word == len(descs), f"completion word {word:#x} in host memory, not {len(descs)}"

    checked: dict[str, int] = {}
    for kind, _, (side, at), data in plan:
        image = peer.read(0, peer.memory_bytes) if side == "peer" else host.read(host_dst, 0x10000)
        wrong = guarded_mismatches(image, at, data)
        assert not wrong, f"{kind}, {len(data)} bytes at {side} {at:#x}: differs at offsets {wrong[:8]}"
        checked[kind] = checked.get(kind, 0) + len(data)
    result["copies"] = {"bytes": checked, "descriptors": len(descs), "completion_word": word}

    # the routing: the peer saw only the card's requests, the root complex none for the peer's addresses
    seen = peer.device.requests[requests_before:]
    result["peer_requests"] = {"read": sum(r.kind == "read" for r in seen),
                               "write": sum(r.kind == "write" for r in seen),
                               "from": sorted({r.requester for r in seen})}
    assert result["peer_requests"]["from"] == [card_id], result["peer_requests"]
    result["root_complex_saw_peer_addresses"] = sum(peer.contains(a) for a in watch.addresses)
    assert result["root_complex_saw_peer_addresses"] == 0, "peer traffic went through the root complex's memory"
    result["root_complex_requests"] = len(watch.addresses)  # the completion word's write, at least

    # the checker catches one wrong byte in the peer's memory, in the data and in the guard before it
    kind, _, (_, at), data = plan[0]
    planted = {}
    for name, where in (("data", at + 17), ("guard", at - 1)):
        peer.memory[where] ^= 0xFF
        planted[name] = guarded_mismatches(peer.read(0, peer.memory_bytes), at, data)
        peer.memory[where] ^= 0xFF
    assert planted == {"data": [17], "guard": [-1]}, planted
    result["planted"] = planted

    # a read of the hole after the peer's memory BAR: Unsupported Request from the peer, BUS_ERROR, no write
    index = len(descs)
    fail_at = peer_at + 256
    urs_before = peer.device.completions.get("UR", 0)
    await driver.write_slots(0, index, Descriptor(regions["hole"], 0x100, regions["peer"], fail_at, 512,
                                                  flags=Flag.NOTIFY, cookie=0x99).pack())
    await driver.ring(0, index + 1)
    await driver.run([rp.Poll(QUEUE.address("STATUS", 0), 0x4, 0x4, "the queue to halt on the hole's read")])
    state = await driver.queue_state(0)
    assert state.halted and state.error.name == "BUS_ERROR" and state.error_cookie == 0x99, state
    word = await _word(tb, words, index | ERROR_BIT)
    assert word == index | ERROR_BIT, f"completion word {word:#x}, not {index | ERROR_BIT:#x}"
    wrong = guarded_mismatches(peer.read(0, peer.memory_bytes), fail_at, bytes([GUARD]) * 512)
    assert not wrong, f"the failed copy wrote the peer's memory at offsets {wrong[:8]}"
    result["hole_read"] = {"error": state.error.name, "completion_word_error": bool(word & ERROR_BIT),
                           "peer_ur_completions": peer.device.completions.get("UR", 0) - urs_before}
    assert result["hole_read"]["peer_ur_completions"] >= 1, "the peer did not answer the hole's read UR"

    # recovered as a driver does, the queue copies peer -> peer again
    await driver.disable_queue(0)
    index += 1
    await driver.configure_queue(0, regions["words"], 0, index)
    await driver.enable_queue(0)
    after_at, n = fail_at + 512 + 2 * GUARD_BYTES, 2048 + 3
    await driver.write_slots(0, index, Descriptor(regions["peer"], peer_src_at + 1, regions["peer"], after_at, n,
                                                  flags=Flag.NOTIFY, cookie=index).pack())
    await driver.ring(0, index + 1)
    index += 1
    await driver.run([rp.Poll(QUEUE.address("COMPLETED_LO", 0), 0xFFFFFFFF, index, "the copy after the error")])
    assert await _word(tb, words, index) == index
    wrong = guarded_mismatches(peer.read(0, peer.memory_bytes), after_at, peer_src[1:1 + n])
    assert not wrong, f"the copy after the error differs at offsets {wrong[:8]}"
    result["after_error"] = n

    # the host's destination outside the checked copies is untouched
    image = host.read(host_dst, 0x10000)
    inside = set()
    for _, _, (side, at), data in plan:
        if side == "host":
            inside.update(range(at, at + len(data)))
    stray = [i for i in range(len(image)) if i not in inside and image[i] != GUARD]
    assert not stray, f"host bytes outside every destination were written, first at {stray[0]:#x}"

    out = os.environ.get("ARKDMA_SIM_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)


async def _word(tb: CardTB, addr: int, expect: int, bound_cycles: int = 20_000) -> int:
    """The completion word in host memory once it reads `expect` (its write is posted: it may land after the
    registers say so) or the bound has passed."""
    deadline = tb.now_cycles() + bound_cycles
    while True:
        value = int.from_bytes(tb.memory.read(addr, 8), "little")
        if value == expect or tb.now_cycles() > deadline:
            return value
        await tb.cycles(16)
