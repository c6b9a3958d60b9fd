"""EngineParams: the build-time parameters of the hardware engine, checked before any gateware is made."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from driver.abi import MAX_LENGTH, WINDOW_BASE, bar_bytes, check_geometry

DATA_WIDTHS = (64, 128, 256, 512)
ADDR_WIDTH = 64  # host bus addresses are 64-bit in the ABI
PAGE_BYTES = 4096  # AXI bursts never cross a 4 KiB boundary
CSR_ADDR_WIDTH = (WINDOW_BASE - 1).bit_length()  # the register block's port: everything below the windows


def index_bits(count: int) -> int:
    """Bits of an index into `count` things (at least one)."""
    return max(1, (count - 1).bit_length())


def _power_of_two(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi or value & (value - 1):
        raise ValueError(f"{name} must be a power of two in {lo}..{hi}, not {value}")


@dataclass(frozen=True)
class EngineParams:
    """What one engine is built with. Defaults are the 512-bit engine the benchmark measures."""

    data_width: int = 512  # bits of the host-memory and window datapaths
    num_queues: int = 4
    # 128 slots: one descriptor waits about two memory round trips (read, then the write response) before
    # its slot is free again, so at 1 KiB the window must hold ~60 descriptors at line rate, plus the
    # producer's slack between completion-word updates.
    slots: int = 128  # submission window slots per queue
    num_regions: int = 16
    reads_outstanding: int = 64  # read bursts in flight (one AXI ID each)
    writes_outstanding: int = 256  # write bursts awaiting their response
    # A buffer row is held from its read request until its write beat: the memory round trip plus about
    # two maximal bursts (a write burst starts once all its data is in). 64 KiB covers 1.77 us at 512 bits
    # and 250 MHz (16 GB/s x 2.3 us = 37 KB) with margin; 32 KiB capped the engine at 90% of line rate.
    buffer_bytes: int = 65536  # data buffer between the read and the write engine
    max_burst_beats: int = 64  # longest AXI burst, in beats (bursts also stop at 4 KiB)
    # 0: write bursts are cut as reads are (at 4 KiB and max_burst_beats, from the destination's start). Else a power
    # of two of bytes (raised to the host's max payload size): write bursts are that long from the copy's start and
    # stop at 4 KiB, so a PCIe front end sends each as one write, and a burst waits for fewer rows before it goes
    # out (the card: 128 bytes)
    write_burst_bytes: int = 0
    # The job queue and the write entries show an entry in the cycle it arrives while empty, and the buffer's read
    # port sees the tracker's write of that cycle: 3 cycles off a copy's latency (the PCIe card), but on the ECP5
    # board's 64-bit engine those paths set fmax (93.55 MHz against 108.4 without, seeds 1-3): off by default.
    # With it the write mux also lets a burst's first W beat go in its address's cycle (the card's write sender
    # takes it there); on the board that path, the write mux's grant through W into the write data, was critical
    # (without it 103.67, 109.27, 105.51 MHz on seeds 1-3 against 102.23, 108.60, 103.52).
    fall_through: bool = False
    # Register stages that cost a cycle of latency each for a faster clock on a slow fabric (the ECP5 board; its
    # engine takes them, the card and the sim bench's engine do not): a write burst decided from a registered
    # compare of the rows filled (a cycle on each copy that waits for its data), and the completion writer's pick
    # registered before its region lookup (a cycle on each completion-word write), and in the write planner a spare
    # register before its first stage and a cycle between one job's end and the next's start (a cycle between jobs
    # back to back).
    extra_stages: bool = False
    errlog_depth: int = 16
    window_id_width: int = 4  # AXI ID bits of the submission-window port

    def __post_init__(self) -> None:
        if self.data_width not in DATA_WIDTHS:
            raise ValueError(f"data_width must be one of {DATA_WIDTHS}, not {self.data_width}")
        check_geometry(self.num_queues, self.slots, self.num_regions)
        _power_of_two("reads_outstanding", self.reads_outstanding, 2, 1024)
        _power_of_two("writes_outstanding", self.writes_outstanding, 4, 4096)
        if not 1 <= self.max_burst_beats <= 256:
            raise ValueError(f"max_burst_beats must be 1..256 (AXI4), not {self.max_burst_beats}")
        if self.max_burst_beats * self.data_bytes > PAGE_BYTES:
            raise ValueError(
                f"max_burst_beats={self.max_burst_beats} at {self.data_width} bits is "
                f"{self.max_burst_beats * self.data_bytes} bytes; a burst cannot exceed {PAGE_BYTES} bytes: "
                f"use at most {PAGE_BYTES // self.data_bytes}"
            )
        if self.write_burst_bytes:
            _power_of_two("write_burst_bytes", self.write_burst_bytes, self.data_bytes,
                          min(PAGE_BYTES, self.max_burst_beats * self.data_bytes))
        _power_of_two("buffer_bytes", self.buffer_bytes, 1024, 1 << 24)
        if self.buffer_bytes < 2 * self.max_burst_beats * self.data_bytes:
            raise ValueError(
                f"buffer_bytes={self.buffer_bytes} must hold at least two maximal bursts "
                f"({2 * self.max_burst_beats * self.data_bytes} bytes) or reads would stall"
            )
        if not 1 <= self.errlog_depth <= 256:
            raise ValueError(f"errlog_depth must be 1..256, not {self.errlog_depth}")
        if not 1 <= self.window_id_width <= 16:
            raise ValueError(f"window_id_width must be 1..16, not {self.window_id_width}")

    # --- derived sizes -----------------------------------------------------------------
    @property
    def data_bytes(self) -> int:
        return self.data_width // 8

    @property
    def buffer_rows(self) -> int:
        return self.buffer_bytes // self.data_bytes

    @property
    def write_burst_beats(self) -> int:
        """The longest write burst, in beats."""
        return self.write_burst_bytes // self.data_bytes if self.write_burst_bytes else self.max_burst_beats

    @property
    def read_id_width(self) -> int:
        return index_bits(self.reads_outstanding)

    @property
    def queue_bits(self) -> int:
        return index_bits(self.num_queues)

    @property
    def region_bits(self) -> int:
        return index_bits(self.num_regions)

    @property
    def bar_bytes(self) -> int:
        return bar_bytes(self.num_queues, self.slots)

    @property
    def bar_addr_width(self) -> int:
        return (self.bar_bytes - 1).bit_length()

    @property
    def csr_addr_width(self) -> int:
        return CSR_ADDR_WIDTH

    @property
    def row_ptr_width(self) -> int:
        """Bits of the free-running buffer row pointers: enough to tell apart any two rows of the
        longest descriptor plus the whole buffer, so differences never wrap."""
        longest = (MAX_LENGTH + 2 * self.data_bytes) // self.data_bytes + self.buffer_rows
        return longest.bit_length() + 1

    def as_dict(self) -> dict:
        return asdict(self)

    def tag(self) -> str:
        """A short name for build folders: one build per parameter set."""
        return (
            f"dw{self.data_width}_q{self.num_queues}_s{self.slots}_r{self.num_regions}_ro{self.reads_outstanding}"
            f"_wo{self.writes_outstanding}_b{self.buffer_bytes}_mb{self.max_burst_beats}_e{self.errlog_depth}"
            f"_wi{self.window_id_width}" + (f"_wb{self.write_burst_bytes}" if self.write_burst_bytes else "")
            + ("_ft" if self.fall_through else "") + ("_xs" if self.extra_stages else "")
        )
