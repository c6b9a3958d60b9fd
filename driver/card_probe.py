"""`arkdma fpga probe --pcie` as plain steps: find the card in sysfs, check its link, open BAR0, read the identity
and capability registers, copy host memory to host memory through the engine, then (where a CUDA GPU is)
map the BAR for GPU threads and copy into GPU memory. Each step ends ok, FAILED (with what to check next),
skipped (an earlier step failed, or nothing to test) or unsupported (this driver cannot do it: said, not faked).

Nothing here prints: `probe` hands each finished step to a callback and returns them all (the CLI formats them,
tests look at them). Every wait is bounded by `timeout`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from driver import register_program as rp
from driver.abi import (ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DEVICE_MAGIC, ERROR_DOCS, GLOBAL, QUEUE, Access,
                        Capability, ErrorCode, Flag, Perm, bar_bytes)
from driver.bar import Bar, BarError, Vfio, open_sysfs
from driver.card import CardBackend, CardError, CardMemory, NoDma, VfioMemory
from driver.card_sysfs import CardInfo, CardSelectionError, describe, select
from driver.descriptor import Descriptor
from driver.device import Device
from driver.discovery import SYSFS_PCI, Gpu, PciCard, cards, gpus
from driver.errors import ArkdmaError, EngineTimeout, QueueError

OK, FAILED, SKIPPED, UNSUPPORTED = "ok", "FAILED", "skipped", "unsupported"
GUARD = 0xA5
SRC_OFFSET, DST_OFFSET = 3, 5  # off the bus word at both ends, so the engine realigns
GUARD_BYTES = 11  # after the copy in the destination
SMALL_COPY = 61  # the latency copy: less than one 64-byte line, odd


@dataclass
class Step:
    name: str
    status: str
    summary: str
    hint: str = ""  # what to check next (FAILED, unsupported)
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "summary": self.summary, "hint": self.hint or None,
                "data": self.data}


@dataclass
class OpenedCard:
    """BAR0 of a card and the memory its DMA can reach; `close` releases what `bar`/`memory` do not (VFIO)."""

    bar: Bar
    memory: CardMemory
    method: str  # "vfio" or "sysfs"
    close: Callable[[], None] = lambda: None


@dataclass
class ProbeReport:
    cards: list[CardInfo] = field(default_factory=list)
    selected: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.status != FAILED for s in self.steps)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "cards": [c.as_dict() for c in self.cards], "selected": self.selected,
                "steps": [s.as_dict() for s in self.steps]}


def open_bar(card: PciCard, method: str = "auto") -> OpenedCard:
    """BAR0 through VFIO (DMA memory mapped through the IOMMU) when the card is bound to vfio-pci or `method` is
    "vfio", else through sysfs (registers only). BarError saying what to do when it cannot be opened."""
    if method not in ("auto", "vfio", "sysfs"):
        raise ValueError(f"method must be auto, vfio or sysfs, not {method!r}")
    driver = card.sysfs / "driver"
    bound_vfio = driver.is_symlink() and os.path.basename(os.readlink(driver)) == "vfio-pci"
    if method == "vfio" or (method == "auto" and bound_vfio):
        vfio = Vfio(card.sysfs)
        try:
            return OpenedCard(vfio.bar(0), VfioMemory(vfio), "vfio", vfio.close)
        except BaseException:
            vfio.close()
            raise
    return OpenedCard(open_sysfs(card.sysfs, 0), NoDma(), "sysfs")


def probe(device: str | None = None, *, sysfs: Path = SYSFS_PCI, method: str = "auto", timeout: float = 5.0,
          nbytes: int = 1 << 20, opener: Callable[[PciCard, str], OpenedCard] | None = None,
          find_gpus: Callable[[], tuple[list[Gpu], str]] | None = None,
          on_step: Callable[[Step], None] = lambda step: None) -> ProbeReport:
    """Run every step on the card `device` names (or the only one); steps after a failure that needs it are
    skipped. `opener` maps BAR0 (default `open_bar`), `find_gpus` lists CUDA GPUs (default CuPy's)."""
    report = ProbeReport()

    def record(step: Step) -> Step:
        report.steps.append(step)
        on_step(step)
        return step

    def skip_rest(names: list[str], why: str) -> ProbeReport:
        for name in names:
            record(Step(name, SKIPPED, why))
        return report

    later = ["link", "open", "registers", "loopback", "gpu-bar", "peer"]
    try:
        found, card = select(sysfs, device)
    except (CardSelectionError, ValueError) as exc:
        report.cards = [describe(c) for c in cards(sysfs)[0]]
        record(Step("find", FAILED, str(exc), _find_hint(str(exc)),
                    data={"cards": [c.as_dict() for c in report.cards]}))
        return skip_rest(later, "no card chosen")
    report.cards = [describe(c) for c in found]
    report.selected = card.address
    info = next(i for i in report.cards if i.address == card.address)
    record(Step("find", OK, f"{len(found)} arkdma card{'s' if len(found) > 1 else ''}; probing {card.address} "
                            f"({info.ids})", data={"cards": [c.as_dict() for c in report.cards],
                                                   "selected": card.address}))
    link = record(_link_step(info))
    if link.status == FAILED:
        return skip_rest(later[1:], "the link is down")
    try:
        opened = (opener or open_bar)(card, method)
    except (BarError, ArkdmaError, OSError) as exc:
        record(Step("open", FAILED, f"BAR0 of {card.address} could not be opened: {exc}", _open_hint(str(exc), info),
                    data={"error": str(exc)}))
        return skip_rest(later[2:], "BAR0 is not open")
    backend = None
    try:
        record(Step("open", OK, f"BAR0 of {card.address} mapped through {opened.method} ({opened.bar.size:#x} bytes)"
                                + ("; registers only: no DMA without vfio-pci" if opened.method == "sysfs" else ""),
                    data={"method": opened.method, "bar_bytes": opened.bar.size}))
        regs = record(_registers_step(opened.bar))
        if regs.status == FAILED:
            return skip_rest(later[3:], "the registers are not an engine this driver drives")
        backend = CardBackend(opened.bar, opened.memory, timeout=timeout, on_close=opened.close)
        loop = record(_loopback_step(backend, nbytes, timeout))
        gpu_list, why = (find_gpus or gpus)()
        if not gpu_list:
            return skip_rest(["gpu-bar", "peer"], f"no CUDA GPU here ({why})")
        record(_gpu_bar_step(backend, gpu_list))
        if loop.status != OK:
            return skip_rest(["peer"], "the loopback DMA did not pass; fix that first")
        record(_peer_step(backend, gpu_list, nbytes, timeout))
        return report
    finally:
        _close(backend, opened)


def _close(backend: CardBackend | None, opened: OpenedCard) -> None:
    if backend is not None:
        backend.close()  # closes the memory, the BAR and the VFIO container
        return
    close = getattr(opened.memory, "close", None)
    if close:
        close()
    opened.bar.close()
    opened.close()


# --- the steps --------------------------------------------------------------------------------------

def _find_hint(message: str) -> str:
    if "--device" in message:
        return "pick one of the listed addresses with --device"
    if "other ids" in message or "not an arkdma card" in message:
        return "wrong ids: load arkdma.bit (arkdma fpga flash --board alveo-u250), then remove and rescan the device"
    return ("`lspci -D -d 10ee:` should list the card; if it does not: LEDs (0 blinks: configured; 1 lit: link up), "
            "reload the bitstream, rescan or warm-reboot (docs/card-bringup.md, steps 2 and 3)")


def _link_step(info: CardInfo) -> Step:
    data = info.as_dict()["link"]
    if info.link.down:
        return Step("link", FAILED, f"link down: {info.link.describe()}",
                    "no link training: reseat the card, check LED 1 (link up), reload the bitstream, then remove and "
                    "rescan the device or warm-reboot", data)
    if info.link.below_max:
        return Step("link", OK, f"{info.link.describe()}: below the maximum",
                    "the link trained narrower or slower than the card can: another slot, a riser, BIOS bifurcation "
                    "or speed settings", data)
    return Step("link", OK, info.link.describe(), data=data)


def _open_hint(message: str, info: CardInfo) -> str:
    if "permission" in message:
        return "permission: run as root, or `sudo chown $USER` the file named (resource0, or /dev/vfio/N for VFIO)"
    if "IOMMU" in message or "viable" in message:
        return ("IOMMU: intel_iommu=on or amd_iommu=on and VT-d/AMD-Vi in the BIOS; every device of the group on "
                "vfio-pci")
    if "vfio" in message.lower():
        return "VFIO: `sudo modprobe vfio-pci`, bind the card to it (docs/card-bringup.md, step 4)"
    if "disabled" in message or "not assigned" in message or info.bar0_problem:
        return ("BAR disabled or unassigned: `lspci -vv` should show Region 0 with an address and Control: Mem+; "
                "enable the device, rescan, turn on Above 4G decoding, or warm-reboot")
    return "check `lspci -vv -s " + info.address + "` (Region 0, Control: Mem+) and `dmesg`"


def _registers_step(bar: Bar) -> Step:
    values = {r.name: bar.read32(GLOBAL.address(r.name)) for r in GLOBAL.registers if r.access != Access.W}
    ident = values["ID"]
    major, minor = (_field(GLOBAL, "VERSION", f, values["VERSION"]) for f in ("MAJOR", "MINOR"))
    caps = Capability(values["CAPS"] & sum(int(c) for c in Capability))
    unknown_caps = values["CAPS"] & ~int(caps)
    data = {"registers": values, "abi": f"{major}.{minor}", "driver_abi": f"{ABI_VERSION_MAJOR}.{ABI_VERSION_MINOR}",
            "caps": [c.name for c in Capability if c in caps], "unknown_caps": unknown_caps}
    if ident == 0xFFFF_FFFF:
        return Step("registers", FAILED, "ID reads 0xffffffff: BAR reads do not reach the card",
                    "the card left the bus or its BAR is disabled (link down, reloaded without remove and rescan): "
                    "remove and rescan the device, or warm-reboot", data)
    try:
        geometry = rp.decode_identity([values[n] for n in rp.IDENTITY])
    except ValueError as exc:
        if ident != DEVICE_MAGIC:
            hint = "BAR0 does not hold the arkdma engine: the wrong bitstream, or a BAR other than the engine's"
        else:
            what = "wrong ABI version" if major != ABI_VERSION_MAJOR else "a window layout not this ABI's"
            hint = f"{what}: rebuild the bitstream from this tree (arkdma fpga build) or use the driver that matches it"
        return Step("registers", FAILED, str(exc), hint, data)
    need = bar_bytes(geometry.num_queues, geometry.slots)
    if bar.size < need:
        return Step("registers", FAILED, f"BAR0 is {bar.size:#x} bytes; {geometry.num_queues} queues of "
                                         f"{geometry.slots} slots need {need:#x}",
                    "the PCIe IP's BAR0 size does not match the engine: rebuild with the same parameters", data)
    data["geometry"] = {"num_queues": geometry.num_queues, "slots": geometry.slots,
                        "num_regions": geometry.num_regions, "data_bytes": geometry.data_bytes}
    return Step("registers", OK, f"ID {ident:#010x}, ABI {major}.{minor} (driver {ABI_VERSION_MAJOR}."
                                 f"{ABI_VERSION_MINOR}), CAPS {values['CAPS']:#x} "
                                 f"({'|'.join(data['caps']) or 'none'}), {geometry.num_queues} queues x "
                                 f"{geometry.slots} slots, {geometry.num_regions} regions, "
                                 + (f"{geometry.data_bytes * 8}-bit datapath" if geometry.data_bytes
                                    else "no datapath width given (DATA_BYTES 0)"), data=data)


def _field(block, register: str, field_name: str, value: int) -> int:
    bits = next(b for b in block.register(register).bits if b.name == field_name)
    return value >> bits.lsb & ((1 << bits.width) - 1)


def _pattern(n: int, seed: int) -> bytes:
    return bytes((i * 37 + seed) & 0xFF for i in range(n))


class CopyMismatch(ArkdmaError):
    pass


def _copy(dev: Device, q, src, dst, nbytes: int, seed: int, timeout: float) -> float:
    """One descriptor from src+SRC_OFFSET to dst+DST_OFFSET between guard bytes; seconds from post to completion.
    CopyMismatch names the first wrong byte."""
    pattern = _pattern(nbytes, seed)
    src.write(SRC_OFFSET, pattern)
    dst.write(0, bytes([GUARD]) * dst.size)
    rs = dev.register(src, perms=Perm.READ)
    rd = dev.register(dst, perms=Perm.WRITE)
    try:
        t0 = time.perf_counter()
        ticket = q.post(Descriptor(rs.id, SRC_OFFSET, rd.id, DST_OFFSET, nbytes, flags=Flag.NOTIFY, cookie=seed),
                        timeout=timeout)
        q.wait(ticket, timeout=timeout)
        seconds = time.perf_counter() - t0
    finally:
        dev.regions.unregister(rs)
        dev.regions.unregister(rd)
    end = DST_OFFSET + nbytes
    want = bytes([GUARD]) * DST_OFFSET + pattern + bytes([GUARD]) * GUARD_BYTES
    got = dst.read(0, end + GUARD_BYTES)
    if got != want:
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        first = bad[0]
        where = ("the guard before the copy" if first < DST_OFFSET else "the guard after the copy" if first >= end
                 else f"byte {first - DST_OFFSET} of the copy")
        raise CopyMismatch(f"{len(bad)} wrong byte(s); first: {where} (destination offset {first}) is "
                           f"{got[first]:#04x}, not {want[first]:#04x}")
    return seconds


def _queue_registers(bar: Bar, queue: int) -> dict[str, int]:
    regs = {f"queue{queue}.{r.name}": bar.read32(QUEUE.address(r.name, queue)) for r in QUEUE.registers}
    for name in ("STATUS", "CONTROL", "DESCRIPTORS_LO", "BYTES_LO"):
        regs[name] = bar.read32(GLOBAL.address(name))
    return regs


def _copies(backend: CardBackend, dst_placement: str, nbytes: int, timeout: float, name: str) -> Step:
    """The small copy, then `nbytes`, from host memory into `dst_placement` memory, each byte and guard checked."""
    dev = Device(backend)
    q = None
    sizes = sorted({min(SMALL_COPY, nbytes), nbytes})
    data: dict = {"copies": []}
    try:
        # memory first: where the card has none (a sysfs mapping), say so before touching the engine
        pairs = [(dev.alloc(n + SRC_OFFSET, "host"), dev.alloc(DST_OFFSET + n + GUARD_BYTES, dst_placement))
                 for n in sizes]
        given = {dst.placement for _, dst in pairs}
        if given != {dst_placement}:
            return Step(name, UNSUPPORTED, "", data={"placement_given": ", ".join(sorted(given))})
        backend.reset()
        q = dev.queue()
        for i, (n, (src, dst)) in enumerate(zip(sizes, pairs)):
            seconds = _copy(dev, q, src, dst, n, 11 + i, timeout)
            data["copies"].append({"bytes": n, "seconds": seconds, "gbps": n / seconds / 1e9 if seconds else None})
    except EngineTimeout as exc:
        queue = q.id if q is not None else 0
        regs = _queue_registers(backend.bar, queue)
        data["registers"] = regs
        posted = q.posted if q is not None else None
        return Step(name, FAILED, f"no completion: {exc}", _timeout_hint(regs, queue, posted), data)
    except QueueError as exc:
        data["error"] = exc.code.name
        return Step(name, FAILED, str(exc), _queue_error_hint(exc.code), data)
    except CopyMismatch as exc:
        return Step(name, FAILED, f"the copy is wrong: {exc}",
                    "the engine moved the wrong bytes: compare with `arkdma sim` on the same build, check the "
                    "requester's byte enables and alignment", data)
    except (CardError, ArkdmaError) as exc:
        hint = ("no DMA through the sysfs mapping: bind the card to vfio-pci (docs/card-bringup.md, step 4)"
                if "vfio-pci" in str(exc) else "see the message; `dmesg` for IOMMU (DMAR/AMD-Vi) faults")
        return Step(name, FAILED, str(exc), hint, data)
    finally:
        _stop(dev, q)
    timing = "; ".join(f"{c['bytes']:,} B in {c['seconds'] * 1e6:.1f} us"
                       + (f" ({c['gbps']:.2f} GB/s)" if c["gbps"] and c["bytes"] >= 4096 else "")
                       for c in data["copies"])
    return Step(name, OK, f"{len(sizes)} copies checked byte for byte with guard bytes around them; {timing}",
                data=data)


def _stop(dev: Device, q) -> None:
    """Stop the queue and forget the regions, leaving the backend open; a stuck engine does not hide the result."""
    try:
        if q is not None and not q.stopped:
            q.stop()
    except ArkdmaError:
        pass
    dev.regions.forget_all()


def _timeout_hint(regs: dict[str, int], queue: int, posted: int | None) -> str:
    state = rp.decode_queue_state([regs[f"queue{queue}.{n}"] for n in rp.QUEUE_STATE])
    doorbell = regs[f"queue{queue}.DOORBELL"]
    if posted is None:
        return ("the queue never started (STATUS.ENABLED did not rise): is CONTROL.ENABLE set and the engine clocked? "
                "Reload the bitstream")
    if state.busy:
        return ("the queue is BUSY: the engine took the doorbell and waits for host memory; its reads got no answer "
                "(IOMMU mapping, MaxReadReq in `lspci -vv`, `dmesg` for AER or DMAR/AMD-Vi faults)")
    if doorbell != posted & 0xFFFF_FFFF:
        return (f"DOORBELL reads {doorbell:#x}, not the {posted:#x} written: BAR writes do not reach the engine "
                "(the card left the bus, or the BAR mapping is not the card's)")
    if state.completed >= posted:
        return ("the engine completed the copy (COMPLETED) but its completion word never reached host memory: the "
                "write was lost (IOMMU mapping, `dmesg` for DMAR/AMD-Vi faults)")
    return ("the queue is idle with the doorbell written and nothing completed: the engine ignores doorbells; is "
            "CONTROL.ENABLE set, STATUS.ENABLED of the queue, the engine clocked? Reload the bitstream")


def _queue_error_hint(code: ErrorCode) -> str:
    if code == ErrorCode.BUS_ERROR:
        return ("the host refused the engine's reads or writes: IOMMU mappings (`dmesg` for DMAR/AMD-Vi faults), "
                "MaxReadReq in `lspci -vv` at least the engine's read burst")
    return f"{code.name} ({ERROR_DOCS[code]}) on the probe's own descriptor: the engine or this driver is wrong"


def _loopback_step(backend: CardBackend, nbytes: int, timeout: float) -> Step:
    return _copies(backend, "host", nbytes, timeout, "loopback")


def _gpu_names(gpu_list: list[Gpu]) -> str:
    return ", ".join(f"GPU {g.index} {g.name} ({g.pci_bus_id})" for g in gpu_list)


def _gpu_bar_step(backend: CardBackend, gpu_list: list[Gpu]) -> Step:
    """The card's queue 0 window and doorbell mapped for GPU threads (cudaHostRegister of the BAR as I/O memory)."""
    try:
        ptrs = backend.queue_pointers(0)
    except ArkdmaError as exc:
        return Step("gpu-bar", FAILED, f"the BAR could not be mapped for GPU threads: {exc}",
                    "peer-to-peer from the GPU to the card: same root complex or switch, ACS not blocking it, the "
                    "BAR memory-mapped (sysfs resource0 or VFIO)", {"gpus": _gpu_names(gpu_list)})
    return Step("gpu-bar", OK, f"BAR registered with CUDA for {_gpu_names(gpu_list)}: queue 0's doorbell at GPU "
                               f"address {ptrs.doorbell_device:#x}",
                data={"doorbell_device": ptrs.doorbell_device, "window_device": ptrs.window_device})


def _peer_step(backend: CardBackend, gpu_list: list[Gpu], nbytes: int, timeout: float) -> Step:
    step = _copies(backend, "device", nbytes, timeout, "peer")
    if step.status == UNSUPPORTED:
        step.summary = (f"not run: {_gpu_names(gpu_list)} is here, but this driver cannot register GPU memory for "
                        f"the card: asked for GPU memory, its {backend.memory.__class__.__name__} gave "
                        f"{step.data['placement_given']} memory")
        step.hint = ("the card reaches only host memory mapped through VFIO; a bus address of GPU memory needs "
                     "GPUDirect RDMA (nvidia-peermem or dma-buf export), which the card backend does not have yet. "
                     "GPU threads can still post to the card (gpu-bar) with data in host memory")
    return step
