"""The arkdma device ABI, defined once: descriptor, completion word, error codes, registers.

Plain Python on purpose: no Amaranth, no CUDA, no NumPy at import. Everything else is
generated from this module: the C/CUDA header (`driver/include/arkdma/abi.h`), the NumPy
dtypes (`driver/dtypes.py`), the Amaranth layouts (`rtl/`) and the table in `docs/abi.md`.
Change a number here, run `arkdma abi generate`, and the stale-file test tells you what
else must follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum, IntFlag

ABI_VERSION_MAJOR = 1
ABI_VERSION_MINOR = 0
DEVICE_MAGIC = 0x41524B44  # "ARKD" read as a big-endian word

DESCRIPTOR_BYTES = 32
COMPLETION_BYTES = 8
COMPLETION_ERROR_BIT = 63
COMPLETION_COUNT_MASK = (1 << COMPLETION_ERROR_BIT) - 1
DOORBELL_BITS = 32
IMM_BYTES = 8

COMPLETION_DOC = (
    f"{COMPLETION_BYTES} bytes at an 8-byte-aligned bus address (region base + COMPL_OFFSET): bits "
    f"0..{COMPLETION_ERROR_BIT - 1} count the completed descriptors of the queue from START, modulo "
    f"2^{COMPLETION_ERROR_BIT} (after 2^{COMPLETION_ERROR_BIT} - 1 comes 0, so compare counts modulo "
    f"2^{COMPLETION_ERROR_BIT}); bit {COMPLETION_ERROR_BIT} is the sticky error flag."
)

REGION_ID_BITS = 16
MAX_LENGTH = (1 << 32) - 1  # the descriptor's length field is 32 bits wide


class Flag(IntFlag):
    """Descriptor flags (the `flags` field)."""

    NOTIFY = 1 << 0  # write the queue's completion word once this descriptor completes
    FENCE = 1 << 1  # start only after every earlier descriptor of the queue completed
    IMM = 1 << 2  # write the 64-bit value in src_offset to dst (length 8); implies FENCE


FLAGS_VALID = int(Flag.NOTIFY | Flag.FENCE | Flag.IMM)


class Perm(IntFlag):
    """Region permissions. A region whose permissions are zero is not registered."""

    READ = 1 << 0  # may be a descriptor's source
    WRITE = 1 << 1  # may be a descriptor's destination or hold a completion word


class ErrorCode(IntEnum):
    """Why a queue halted. Checked in this order, so every engine reports the same code."""

    NONE = 0
    INVALID_DESCRIPTOR = 1  # a flag bit outside FLAGS_VALID, or the reserved field is not zero
    BAD_LENGTH = 2  # IMM whose length is not 8
    MISALIGNED = 3  # IMM (or completion word) whose destination bus address is not a multiple of 8
    UNKNOWN_REGION = 4  # a region id beyond the table, or a region that is not registered
    PERMISSION = 5  # the source lacks READ or the destination lacks WRITE
    OUT_OF_BOUNDS = 6  # offset + length beyond the region's size (on either side)
    OVERLAP = 7  # source and destination bytes overlap inside one region
    DOORBELL_BACKWARDS = 8  # the doorbell moved back (modulo 2**32); the write is ignored
    RING_OVERFLOW = 9  # the doorbell ran more than SLOTS ahead of the completed count
    BUS_ERROR = 10  # the memory system refused an access while the data moved


ERROR_DOCS = {
    ErrorCode.NONE: "no error",
    ErrorCode.INVALID_DESCRIPTOR: "a flag bit outside NOTIFY|FENCE|IMM, or reserved field not zero",
    ErrorCode.BAD_LENGTH: "IMM descriptor whose length is not 8",
    ErrorCode.MISALIGNED: (
        "IMM descriptor (or completion word) whose destination bus address, region base + offset, is not a multiple of 8"
    ),
    ErrorCode.UNKNOWN_REGION: "region id beyond the table, or region not registered",
    ErrorCode.PERMISSION: "source region lacks READ or destination region lacks WRITE",
    ErrorCode.OUT_OF_BOUNDS: "offset + length beyond the region size, on either side",
    ErrorCode.OVERLAP: "source and destination byte ranges overlap in one region",
    ErrorCode.DOORBELL_BACKWARDS: "doorbell moved backwards (modulo 2**32); write ignored",
    ErrorCode.RING_OVERFLOW: "doorbell more than SLOTS ahead of the completed count",
    ErrorCode.BUS_ERROR: "the memory system refused a read or write of the data",
}


class Resp(IntEnum):
    """AXI response codes: what a memory or register bus answers (the engine's memory port, the board's
    register bridge). SLVERR or DECERR to an engine access ends the descriptor in BUS_ERROR."""

    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class Capability(IntFlag):
    """Bits of the CAPS register: what this engine implements."""

    NOTIFY = 1 << 0
    FENCE = 1 << 1
    IMM = 1 << 2
    ERROR_LOG = 1 << 3
    BUS_ERRORS = 1 << 4  # reports BUS_ERROR for unbacked memory instead of faulting
    PERF_COUNTERS = 1 << 5


# ---------------------------------------------------------------------------------------
# Records in memory: the descriptor (written by the GPU into a submission window)


@dataclass(frozen=True)
class Field:
    name: str
    offset: int  # bytes from the start of the record
    bits: int  # 8, 16, 32 or 64; little-endian unsigned
    doc: str
    ctype: str = ""  # the C type where it is not the unsigned integer of `bits` (a pointer)


@dataclass(frozen=True)
class Record:
    name: str
    size: int
    fields: tuple[Field, ...]
    doc: str

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


DESCRIPTOR = Record(
    "descriptor",
    DESCRIPTOR_BYTES,
    (
        Field("src_offset", 0, 64, "byte offset into the source region; for IMM, the value to write"),
        Field("dst_offset", 8, 64, "byte offset into the destination region"),
        Field("length", 16, 32, "bytes to move (0 is a valid no-op); 8 for IMM"),
        Field("src_region", 20, 16, "source region id (ignored for IMM)"),
        Field("dst_region", 22, 16, "destination region id"),
        Field("flags", 24, 16, "NOTIFY | FENCE | IMM; other bits must be zero"),
        Field("reserved", 26, 16, "must be zero"),
        Field("cookie", 28, 32, "caller's tag, reported with an error"),
    ),
    "One copy request. Slot i of a queue's submission window holds the descriptor with "
    "producer index i (modulo SLOTS).",
)


# ---------------------------------------------------------------------------------------
# The GPU device API (device.cuh): the queue handle a kernel gets by value, the producer state it keeps in
# GPU memory, the status record it reports failures in (mapped host memory), and the codes its calls return.


class DeviceCode(IntEnum):
    """What a device-API call returns (ARKDMA_DEV_*), and the status record's `code`."""

    OK = 0
    PENDING = 1
    TIMEOUT = 2
    QUEUE_ERROR = 3
    ABORTED = 4
    BAD_ARGUMENT = 5


DEVICE_CODE_DOCS = {
    DeviceCode.OK: "done",
    DeviceCode.PENDING: "poll(): not completed yet",
    DeviceCode.TIMEOUT: "a wait ran past the handle's budget",
    DeviceCode.QUEUE_ERROR: "the completion word carries the error bit: the queue halted",
    DeviceCode.ABORTED: "the host wrote the status record's abort word",
    DeviceCode.BAD_ARGUMENT: "a null handle, or post_stream sizes out of range (batch 0 or over 64, "
                             "in flight below batch)",
}


class Site(IntEnum):
    """Where a device-API failure was met (ARKDMA_DEV_SITE_*, the status record's `site`); 0 when none was."""

    NONE = 0
    POST = 1
    WAIT = 2
    SIGNAL = 3


SITE_DOCS = {
    Site.NONE: "no failure",
    Site.POST: "waiting for room in the window (flow control)",
    Site.WAIT: "wait() for a ticket",
    Site.SIGNAL: "wait_signal() on a flag",
}

STATUS = Record(
    "status",
    48,
    (
        Field("code", 0, 32, "ARKDMA_DEV_* of the first failure; 0 while all is well"),
        Field("site", 4, 32, "ARKDMA_DEV_SITE_*"),
        Field("queue", 8, 32, "the queue id"),
        Field("abort", 12, 32, "written by the host: non-zero makes every wait return ABORTED"),
        Field("expected", 16, 64, "the ticket or flag value awaited"),
        Field("observed", 24, 64, "the completion word or flag value last read"),
        Field("waited_ns", 32, 64, "how long the wait had spun"),
        Field("failures", 40, 32, "failures reported on this queue"),
        Field("reserved", 44, 32, "zero"),
    ),
    "The host-visible status record of one queue, in mapped pinned host memory. `code` is written last, "
    "after a system fence: once the host reads it non-zero, the other fields are complete. The first "
    "failure is recorded; `failures` counts them all.",
)

PRODUCER = Record(
    "producer",
    24,
    (
        Field("posted", 0, 64, "producer index after the last posted descriptor"),
        Field("completed", 8, 64, "the completed count last read (flow control)"),
        Field("claim", 16, 32, "first-failure claim (device-scope atomic)"),
        Field("reserved", 20, 32, "zero"),
    ),
    "The producer's state of one queue, in GPU memory; persists across kernel launches.",
)

QUEUE_HANDLE = Record(
    "queue",
    56,
    (
        Field("window", 0, 64, "slot 0 of the submission window", "arkdma_descriptor*"),
        Field("doorbell", 8, 64, "the queue's doorbell", "uint32_t*"),
        Field("completion", 16, 64, "the completion word the engine writes", "const uint64_t*"),
        Field("producer", 24, 64, "producer state (GPU memory)", "arkdma_producer*"),
        Field("status", 32, 64, "status record (mapped host memory)", "arkdma_status*"),
        Field("budget_ns", 40, 64, "how long one wait may spin"),
        Field("slots", 48, 32, "window slots, a power of two"),
        Field("id", 52, 32, "queue id (for reports)"),
    ),
    "The device handle of one queue: trivially copyable, passed to kernels by value.",
)

DEVICE_RECORDS = (STATUS, PRODUCER, QUEUE_HANDLE)  # in declaration order (the handle points at the others)


# ---------------------------------------------------------------------------------------
# Registers: 32-bit words in the engine's BAR (AXI4-Lite behind a PCIe bridge)


class Access(str, Enum):
    R = "R"  # read-only
    RW = "RW"
    W = "W"  # write-only (reads return the last value written, or 0)
    RW1C = "RW1C"  # a sticky flag: reads as set until 1 is written to it; writing 0 leaves it


@dataclass(frozen=True)
class Bits:
    name: str
    lsb: int
    width: int
    doc: str
    access: Access | None = None  # where it differs from its register's (a RW1C flag in a read-only register)

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int  # bytes within its block
    access: str
    doc: str
    bits: tuple[Bits, ...] = ()


@dataclass(frozen=True)
class Block:
    """A run of registers; repeated blocks (regions, queues) have a count and a stride."""

    name: str
    base: int
    stride: int  # 0 for a block that appears once
    registers: tuple[Register, ...]
    doc: str

    def register(self, name: str) -> Register:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name} has no register {name!r}")

    def address(self, name: str, index: int = 0) -> int:
        return self.base + index * self.stride + self.register(name).offset


GLOBAL = Block(
    "global",
    0x0000,
    0,
    (
        Register("ID", 0x000, Access.R, "DEVICE_MAGIC, 'ARKD'"),
        Register(
            "VERSION",
            0x004,
            Access.R,
            "ABI version",
            (Bits("MINOR", 0, 16, "minor version"), Bits("MAJOR", 16, 16, "major version")),
        ),
        Register("CAPS", 0x008, Access.R, "Capability bits"),
        Register("NUM_QUEUES", 0x00C, Access.R, "queues this engine serves"),
        Register("SLOTS", 0x010, Access.R, "submission window slots per queue (power of two)"),
        Register("NUM_REGIONS", 0x014, Access.R, "entries in the region table"),
        Register("DATA_BYTES", 0x018, Access.R, "datapath width in bytes (0 for software engines)"),
        Register("WINDOW_BASE", 0x01C, Access.R, "BAR offset of queue 0's submission window"),
        Register("WINDOW_STRIDE", 0x020, Access.R, "bytes between two queues' windows"),
        Register(
            "CONTROL",
            0x024,
            Access.RW,
            "engine control",
            (
                Bits("ENABLE", 0, 1, "the engine serves enabled queues"),
                Bits("RESET", 1, 1, "write 1: drop everything, clear every queue and region; self-clearing"),
            ),
        ),
        Register(
            "STATUS",
            0x028,
            Access.R,
            "engine status; writes change only its RW1C bits",
            (
                Bits("ENABLED", 0, 1, "CONTROL.ENABLE as seen by the engine"),
                Bits("IDLE", 1, 1, "no descriptor in flight on any queue"),
                Bits("HALTED", 2, 1, "at least one queue halted on an error"),
                Bits("ERRLOG_VALID", 3, 1, "the error log holds an entry"),
                Bits(
                    "ERRLOG_OVERFLOW",
                    4,
                    1,
                    "an error was dropped because the log was full; stays set until 1 is written here or the "
                    "engine resets (reading the log leaves it set)",
                    Access.RW1C,
                ),
            ),
        ),
        Register(
            "ERRLOG_HEAD",
            0x02C,
            Access.R,
            "oldest error log entry (valid when STATUS.ERRLOG_VALID)",
            (Bits("CODE", 0, 8, "ErrorCode"), Bits("QUEUE", 16, 16, "queue that halted")),
        ),
        Register("ERRLOG_COOKIE", 0x030, Access.R, "cookie of the oldest entry's descriptor"),
        Register("ERRLOG_INDEX", 0x034, Access.R, "producer index (low 32 bits) of the oldest entry"),
        Register("ERRLOG_POP", 0x038, Access.W,
                 "write any value: drop the oldest entry (STATUS.ERRLOG_OVERFLOW stays as it is)"),
        Register("CYCLES_LO", 0x040, Access.R, "clock cycles since reset, low word"),
        Register("CYCLES_HI", 0x044, Access.R, "clock cycles since reset, high word"),
        Register("DESCRIPTORS_LO", 0x048, Access.R, "descriptors completed, low word"),
        Register("DESCRIPTORS_HI", 0x04C, Access.R, "descriptors completed, high word"),
        Register("BYTES_LO", 0x050, Access.R, "payload bytes written, low word"),
        Register("BYTES_HI", 0x054, Access.R, "payload bytes written, high word"),
        Register("READS_INFLIGHT", 0x058, Access.R, "read bursts issued and not yet answered"),
        Register("STALL_READ", 0x05C, Access.R, "cycles a read burst waited for the bus"),
        Register("STALL_WRITE", 0x060, Access.R, "cycles a write burst waited for the bus"),
        Register("STALL_BUFFER", 0x064, Access.R, "cycles the read engine waited for buffer space"),
    ),
    "Identity, capabilities, engine control and the error log.",
)

REGION = Block(
    "region",
    0x1000,
    0x20,
    (
        Register("ADDR_LO", 0x00, Access.RW, "bus address, low word (shadow until PERMS is written)"),
        Register("ADDR_HI", 0x04, Access.RW, "bus address, high word (shadow)"),
        Register("SIZE_LO", 0x08, Access.RW, "size in bytes, low word (shadow)"),
        Register("SIZE_HI", 0x0C, Access.RW, "size in bytes, high word (shadow)"),
        Register(
            "PERMS",
            0x10,
            Access.RW,
            "writing commits ADDR/SIZE and the permissions at once; 0 unregisters",
            (Bits("READ", 0, 1, "Perm.READ"), Bits("WRITE", 1, 1, "Perm.WRITE")),
        ),
    ),
    "The region table, one block per region id. Programmed by the host only.",
)

QUEUE = Block(
    "queue",
    0x2000,
    0x40,
    (
        Register(
            "CONTROL",
            0x00,
            Access.RW,
            "queue control",
            (
                Bits(
                    "ENABLE",
                    0,
                    1,
                    "0->1: load START and the completion location, clear the error; "
                    "1->0: drop descriptors not yet started, finish the rest, write the completion word",
                ),
            ),
        ),
        Register(
            "STATUS",
            0x04,
            Access.R,
            "queue status",
            (
                Bits("ENABLED", 0, 1, "the queue accepts doorbells"),
                Bits("BUSY", 1, 1, "descriptors of this queue are in flight"),
                Bits("HALTED", 2, 1, "stopped on an error; disable and enable to restart"),
                Bits("CODE", 8, 8, "ErrorCode of the halt"),
            ),
        ),
        Register("DOORBELL", 0x08, Access.RW, "producer index, low 32 bits: slots below it are posted"),
        Register("START_LO", 0x10, Access.RW, "index of the first descriptor after enable, low word"),
        Register("START_HI", 0x14, Access.RW, "index of the first descriptor after enable, high word"),
        Register("COMPLETED_LO", 0x18, Access.R, "completion word as the engine holds it, low word"),
        Register("COMPLETED_HI", 0x1C, Access.R, "completion word, high word (bit 31 = error)"),
        Register("COMPL_REGION", 0x20, Access.RW, "region that receives the completion word"),
        Register(
            "COMPL_OFFSET_LO",
            0x24,
            Access.RW,
            "offset of the completion word in its region, low word (region base + offset must be a multiple of 8)",
        ),
        Register("COMPL_OFFSET_HI", 0x28, Access.RW, "offset of the completion word in its region, high word"),
        Register("ERROR_COOKIE", 0x2C, Access.R, "cookie of the descriptor that halted the queue"),
        Register("ERROR_INDEX", 0x30, Access.R, "producer index (low 32 bits) that halted the queue"),
    ),
    "One block per queue. The doorbell is the only register the GPU writes.",
)

BLOCKS = (GLOBAL, REGION, QUEUE)

# The submission windows follow the queue blocks; WINDOW_BASE tells the driver where.
WINDOW_BASE = 0x10000
MAX_QUEUES = (WINDOW_BASE - QUEUE.base) // QUEUE.stride  # 896: the queue blocks must fit
MAX_REGIONS = (QUEUE.base - REGION.base) // REGION.stride  # 128
QUEUE_BLOCK_BYTES = QUEUE.stride  # doorbells of two queues never share a 64-byte line


def window_stride(slots: int) -> int:
    return slots * DESCRIPTOR_BYTES


def bar_bytes(num_queues: int, slots: int) -> int:
    """Size of the BAR an engine with these parameters decodes, rounded to a power of two."""
    end = WINDOW_BASE + num_queues * window_stride(slots)
    return 1 << (end - 1).bit_length()


def check_geometry(num_queues: int, slots: int, num_regions: int) -> None:
    """Raise ValueError for engine parameters the ABI cannot express."""
    if not 1 <= num_queues <= MAX_QUEUES:
        raise ValueError(f"num_queues must be 1..{MAX_QUEUES}, not {num_queues}")
    if slots < 2 or slots & (slots - 1) or slots > 1 << 16:
        raise ValueError(f"slots must be a power of two in 2..65536, not {slots}")
    if not 1 <= num_regions <= MAX_REGIONS:
        raise ValueError(f"num_regions must be 1..{MAX_REGIONS}, not {num_regions}")


def version_word() -> int:
    return ABI_VERSION_MAJOR << 16 | ABI_VERSION_MINOR
