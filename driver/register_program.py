"""Register programs: the exact register sequences the driver makes to an engine's BAR, as plain data.

Sans-IO: each function returns the writes (and the polls that must follow) for one driver action;
whoever holds the BAR runs them (the card backend through a mapped BAR, the simulator's driver model
through its AXI-Lite master). Decoders turn register values back into the driver's records.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.abi import (
    COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, DESCRIPTOR_BYTES, DEVICE_MAGIC, DOORBELL_BITS, GLOBAL, QUEUE,
    REGION, WINDOW_BASE, ABI_VERSION_MAJOR, Capability, ErrorCode, window_stride,
)
from driver.backend import Counters, ErrorLogEntry, Geometry, QueueState

WORD_MASK = (1 << 32) - 1


@dataclass(frozen=True)
class Write:
    addr: int
    value: int


@dataclass(frozen=True)
class Poll:
    """Read `addr` until (value & mask) == expect; `what` names the wait in timeout errors."""

    addr: int
    mask: int
    expect: int
    what: str


Step = Write | Poll


def _bit(block, register: str, field: str) -> int:
    for b in block.register(register).bits:
        if b.name == field:
            return ((1 << b.width) - 1) << b.lsb
    raise KeyError(f"{register} has no field {field}")


def _field(block, register: str, field: str, value: int) -> int:
    for b in block.register(register).bits:
        if b.name == field:
            return (value >> b.lsb) & ((1 << b.width) - 1)
    raise KeyError(f"{register} has no field {field}")


# --- engine -------------------------------------------------------------------------------

def start_engine() -> list[Step]:
    return [Write(GLOBAL.address("CONTROL"), _bit(GLOBAL, "CONTROL", "ENABLE"))]


def reset_engine() -> list[Step]:
    """Drop everything (queues, regions, error log); the engine stays enabled. Waits for the flush."""
    control = GLOBAL.address("CONTROL")
    reset = _bit(GLOBAL, "CONTROL", "RESET")
    return [Write(control, reset | _bit(GLOBAL, "CONTROL", "ENABLE")),
            Poll(control, reset, 0, "the engine to finish its reset (CONTROL.RESET to clear)")]


def status_address() -> int:
    return GLOBAL.address("STATUS")


def status_idle(status: int) -> bool:
    return bool(_field(GLOBAL, "STATUS", "IDLE", status))


def wait_idle() -> list[Step]:
    idle = _bit(GLOBAL, "STATUS", "IDLE")
    return [Poll(GLOBAL.address("STATUS"), idle, idle, "the engine to go idle (STATUS.IDLE)")]


IDENTITY = ("ID", "VERSION", "CAPS", "NUM_QUEUES", "SLOTS", "NUM_REGIONS", "DATA_BYTES", "WINDOW_BASE",
            "WINDOW_STRIDE")


def identity_addresses() -> list[int]:
    return [GLOBAL.address(name) for name in IDENTITY]


def decode_identity(values: list[int]) -> Geometry:
    """The geometry from the identity registers; ValueError when the BAR is not a compatible arkdma engine."""
    v = dict(zip(IDENTITY, values))
    if v["ID"] != DEVICE_MAGIC:
        raise ValueError(f"ID register reads {v['ID']:#010x}, not arkdma's {DEVICE_MAGIC:#010x}: not an arkdma engine")
    major = _field(GLOBAL, "VERSION", "MAJOR", v["VERSION"])
    if major != ABI_VERSION_MAJOR:
        raise ValueError(f"engine speaks ABI {major}.x, this driver {ABI_VERSION_MAJOR}.x: rebuild one of them")
    if v["WINDOW_BASE"] != WINDOW_BASE or v["WINDOW_STRIDE"] != window_stride(v["SLOTS"]):
        raise ValueError(f"window layout {v['WINDOW_BASE']:#x}+{v['WINDOW_STRIDE']:#x} is not the ABI's")
    return Geometry(v["NUM_QUEUES"], v["SLOTS"], v["NUM_REGIONS"], Capability(v["CAPS"]), v["DATA_BYTES"])


# --- regions --------------------------------------------------------------------------------

def set_region(region: int, addr: int, size: int, perms: int) -> list[Step]:
    """ADDR and SIZE go to the engine's shadow; PERMS commits them to `region` at once."""
    a = lambda name: REGION.address(name, region)  # noqa: E731
    return [
        Write(a("ADDR_LO"), addr & WORD_MASK), Write(a("ADDR_HI"), addr >> 32 & WORD_MASK),
        Write(a("SIZE_LO"), size & WORD_MASK), Write(a("SIZE_HI"), size >> 32 & WORD_MASK),
        Write(a("PERMS"), int(perms)),
    ]


def clear_region(region: int) -> list[Step]:
    return [Write(REGION.address("PERMS", region), 0)]


# --- queues ---------------------------------------------------------------------------------

def configure_queue(queue: int, completion_region: int, completion_offset: int, start: int = 0) -> list[Step]:
    a = lambda name: QUEUE.address(name, queue)  # noqa: E731
    return [
        Write(a("COMPL_REGION"), completion_region),
        Write(a("COMPL_OFFSET_LO"), completion_offset & WORD_MASK),
        Write(a("COMPL_OFFSET_HI"), completion_offset >> 32 & WORD_MASK),
        Write(a("START_LO"), start & WORD_MASK), Write(a("START_HI"), start >> 32 & WORD_MASK),
    ]


def enable_queue(queue: int) -> list[Step]:
    """Enable, then wait until the engine has taken it: START loaded and its completion word written
    (or the queue halted on a bad completion location), so a producer polling the word sees the new count."""
    enabled, busy = _bit(QUEUE, "STATUS", "ENABLED"), _bit(QUEUE, "STATUS", "BUSY")
    return [Write(QUEUE.address("CONTROL", queue), _bit(QUEUE, "CONTROL", "ENABLE")),
            Poll(QUEUE.address("STATUS", queue), enabled | busy, enabled,
                 f"queue {queue} to start (STATUS.ENABLED set, BUSY clear)")]


def disable_queue(queue: int) -> list[Step]:
    """Disable, then wait until the queue has stopped (descriptors started have finished)."""
    busy = _bit(QUEUE, "STATUS", "BUSY")
    return [Write(QUEUE.address("CONTROL", queue), 0),
            Poll(QUEUE.address("STATUS", queue), busy, 0, f"queue {queue} to stop (STATUS.BUSY to fall)")]


def ring(queue: int, producer_index: int) -> list[Step]:
    return [Write(QUEUE.address("DOORBELL", queue), producer_index & ((1 << DOORBELL_BITS) - 1))]


def window_writes(queue: int, index: int, raw: bytes, slots: int) -> list[tuple[int, bytes]]:
    """(BAR offset, bytes) writes that put consecutive descriptors from producer index `index` into the
    queue's window, split where the ring wraps."""
    if len(raw) % DESCRIPTOR_BYTES:
        raise ValueError(f"descriptors are {DESCRIPTOR_BYTES} bytes; got {len(raw)} bytes")
    if len(raw) > slots * DESCRIPTOR_BYTES:
        raise ValueError(f"{len(raw) // DESCRIPTOR_BYTES} descriptors do not fit a window of {slots} slots")
    base = WINDOW_BASE + queue * window_stride(slots)
    out, done = [], 0
    count = len(raw) // DESCRIPTOR_BYTES
    while done < count:
        slot = (index + done) % slots
        n = min(count - done, slots - slot)
        out.append((base + slot * DESCRIPTOR_BYTES, raw[done * DESCRIPTOR_BYTES : (done + n) * DESCRIPTOR_BYTES]))
        done += n
    return out


QUEUE_STATE = ("STATUS", "COMPLETED_LO", "COMPLETED_HI", "ERROR_COOKIE", "ERROR_INDEX")


def queue_state_addresses(queue: int) -> list[int]:
    """Read in this order (COMPLETED_LO before COMPLETED_HI: the low read latches the high word)."""
    return [QUEUE.address(name, queue) for name in QUEUE_STATE]


def decode_queue_state(values: list[int]) -> QueueState:
    v = dict(zip(QUEUE_STATE, values))
    status = v["STATUS"]
    word = v["COMPLETED_HI"] << 32 | v["COMPLETED_LO"]
    return QueueState(
        enabled=bool(_field(QUEUE, "STATUS", "ENABLED", status)),
        halted=bool(_field(QUEUE, "STATUS", "HALTED", status)),
        busy=bool(_field(QUEUE, "STATUS", "BUSY", status)),
        error=ErrorCode(_field(QUEUE, "STATUS", "CODE", status)),
        error_cookie=v["ERROR_COOKIE"],
        error_index=v["ERROR_INDEX"],
        completion_word=word,
    )


# --- error log and counters ------------------------------------------------------------------------

def errlog_valid(status: int) -> bool:
    return bool(_field(GLOBAL, "STATUS", "ERRLOG_VALID", status))


ERRLOG_ENTRY = ("ERRLOG_HEAD", "ERRLOG_COOKIE", "ERRLOG_INDEX")


def errlog_addresses() -> list[int]:
    return [GLOBAL.address(name) for name in ERRLOG_ENTRY]


def decode_errlog(values: list[int]) -> ErrorLogEntry:
    head, cookie, index = values
    return ErrorLogEntry(_field(GLOBAL, "ERRLOG_HEAD", "QUEUE", head),
                         ErrorCode(_field(GLOBAL, "ERRLOG_HEAD", "CODE", head)), cookie, index)


def pop_errlog() -> list[Step]:
    return [Write(GLOBAL.address("ERRLOG_POP"), 1)]


def errlog_overflow(status: int) -> bool:
    return bool(_field(GLOBAL, "STATUS", "ERRLOG_OVERFLOW", status))


def clear_errlog_overflow() -> list[Step]:
    """Write 1 to STATUS.ERRLOG_OVERFLOW (the other STATUS bits ignore writes)."""
    return [Write(GLOBAL.address("STATUS"), _bit(GLOBAL, "STATUS", "ERRLOG_OVERFLOW"))]


COUNTERS = ("DESCRIPTORS_LO", "DESCRIPTORS_HI", "BYTES_LO", "BYTES_HI", "CYCLES_LO", "CYCLES_HI")


def counter_addresses() -> list[int]:
    return [GLOBAL.address(name) for name in COUNTERS]


def decode_counters(values: list[int]) -> Counters:
    v = dict(zip(COUNTERS, values))
    return Counters(v["DESCRIPTORS_HI"] << 32 | v["DESCRIPTORS_LO"], v["BYTES_HI"] << 32 | v["BYTES_LO"],
                    v["CYCLES_HI"] << 32 | v["CYCLES_LO"])


def completed(word: int) -> tuple[int, bool]:
    """(count, error flag) of a completion word."""
    return word & COMPLETION_COUNT_MASK, bool(word >> COMPLETION_ERROR_BIT)
