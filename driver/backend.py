"""The contract every engine backend fulfils: what the runtime, the driver and the conformance suite use.

A backend is an engine plus the memory it can reach. The host side programs regions and
queues; the producer side (a GPU thread in production, the CPU in tests) writes descriptors
into a queue's submission window and rings its doorbell. Every engine — reference model,
software engine, RTL in simulation, FPGA card — is reached through this one interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, Capability, ErrorCode
from driver.errors import ArkdmaError


@dataclass(frozen=True)
class Geometry:
    """What an engine was built with (read from its ID/CAPS registers on a card)."""

    num_queues: int
    slots: int
    num_regions: int
    caps: Capability
    data_bytes: int = 0  # datapath width; 0 for software engines


@dataclass(frozen=True)
class QueueState:
    enabled: bool
    halted: bool
    busy: bool
    error: ErrorCode
    error_cookie: int
    error_index: int  # producer index (low 32 bits) that halted the queue
    completion_word: int  # the engine's own copy: completed count | error bit

    @property
    def completed(self) -> int:
        return self.completion_word & COMPLETION_COUNT_MASK


@dataclass(frozen=True)
class ErrorLogEntry:
    queue: int
    code: ErrorCode
    cookie: int
    index: int


@dataclass(frozen=True)
class Counters:
    descriptors: int = 0
    bytes: int = 0
    cycles: int = 0


@dataclass(frozen=True)
class QueuePointers:
    """Where a queue's submission window and doorbell live: the host addresses, and the addresses GPU code
    writes (the card's BAR mapped for the GPU, or the software engine's window in mapped pinned memory)."""

    window_host: int
    window_device: int
    doorbell_host: int
    doorbell_device: int
    slots: int


class NotGpuReachable(ArkdmaError):
    """GPU code cannot reach this engine's queues or memory; the message names the engines that it can."""


PLACEMENTS = ("host", "device")
# Far above any real buffer, and well inside the native engine's uint64 sizes: a larger size is a mistake.
MAX_BUFFER_BYTES = 1 << 48


def check_size(size) -> int:
    """A buffer size as an int in 1..MAX_BUFFER_BYTES, or TypeError/ValueError saying what was wrong."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"a buffer size must be an int, not {type(size).__name__} {size!r}")
    if not 0 < size <= MAX_BUFFER_BYTES:
        raise ValueError(f"a buffer size must be 1..{MAX_BUFFER_BYTES} bytes (256 TiB), not {size}")
    return size


def completion_word(completed: int, error: bool) -> int:
    return (completed & COMPLETION_COUNT_MASK) | (int(error) << COMPLETION_ERROR_BIT)


class Buffer(ABC):
    """Memory the engine can reach, at a bus address, with host-side access for set-up and checks."""

    addr: int
    size: int
    placement: str  # "host" (host or pinned host memory) or "device" (GPU memory)

    @abstractmethod
    def read(self, offset: int, length: int) -> bytes: ...

    @abstractmethod
    def write(self, offset: int, data: bytes) -> None: ...

    def _check(self, offset: int, length: int) -> None:
        for what, value in (("offset", offset), ("length", length)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"buffer {what} must be an int, not {type(value).__name__} {value!r}")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError(f"access [{offset}, {offset + length}) outside a buffer of {self.size} bytes")


class Backend(ABC):
    """One engine. Methods are grouped by who calls them on real hardware."""

    name: str
    geometry: Geometry
    completion_placement = "host"  # where GPU producers' completion words live (CPU producers use host memory)
    # True where bus memory is a model (reference engine, simulation): a region over an address no buffer
    # backs is harmless there (the access ends in BUS_ERROR), so registration by address is allowed.
    modelled_memory = False
    # True where the engine can read and write ordinary host memory of this process through its pointer
    # (the software engine's host executor), so a Python buffer may be registered with a reference kept.
    host_pointers = False

    # --- memory -------------------------------------------------------------------
    @abstractmethod
    def alloc(self, size: int, placement: str = "host") -> Buffer:
        """Memory the engine can reach. `placement` is a wish: engines without GPU memory give host memory."""

    def owns(self, buffer: Buffer) -> bool:
        """Whether `buffer` is memory this engine gave out (so it can keep it alive under a region)."""
        return False

    def buffer_at(self, addr: int, size: int) -> Buffer | None:
        """The buffer this engine gave out that holds [addr, addr + size), if any."""
        return None

    # --- host: region table and queue set-up (privileged) ---------------------------
    @abstractmethod
    def set_region(self, region: int, addr: int, size: int, perms: int) -> None: ...

    @abstractmethod
    def clear_region(self, region: int) -> None: ...

    @abstractmethod
    def configure_queue(self, queue: int, completion_region: int, completion_offset: int, start: int = 0) -> None:
        """Where the completion word goes and the first producer index; takes effect at enable."""

    @abstractmethod
    def enable_queue(self, queue: int) -> None: ...

    @abstractmethod
    def disable_queue(self, queue: int, timeout: float = 5.0) -> None:
        """Stop: drop what has not started, finish the rest, write the completion word; returns once stopped."""

    @abstractmethod
    def reset(self) -> None:
        """Drop everything: queues disabled and cleared, region table emptied, error log emptied."""

    # --- producer: submission window and doorbell (a GPU thread in production) -------
    @abstractmethod
    def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        """Write consecutive 32-byte descriptors starting at producer index `index` (wrapping the window)."""

    @abstractmethod
    def ring(self, queue: int, producer_index: int) -> None:
        """Write the doorbell: the low 32 bits of the producer index."""

    # --- observation ----------------------------------------------------------------
    @abstractmethod
    def queue_state(self, queue: int) -> QueueState: ...

    @abstractmethod
    def error_log(self) -> list[ErrorLogEntry]:
        """Entries not yet popped, oldest first; pops them."""

    @abstractmethod
    def errlog_overflow(self) -> bool:
        """STATUS.ERRLOG_OVERFLOW: whether an error was dropped because the log was full."""

    @abstractmethod
    def clear_errlog_overflow(self) -> None:
        """Write 1 to STATUS.ERRLOG_OVERFLOW."""

    @abstractmethod
    def counters(self) -> Counters: ...

    @abstractmethod
    def wait_idle(self, timeout: float = 10.0) -> None:
        """Return when no enabled queue has work left (each idle or halted); TimeoutError otherwise."""

    def queue_pointers(self, queue: int) -> QueuePointers:
        """The queue's window and doorbell for GPU producers (device.cuh). Engines whose queues GPU code
        cannot write raise NotGpuReachable."""
        raise NotGpuReachable(f"engine {self.name} has no GPU-writable queues; use software-cuda (a GPU machine) "
                              "or the card")

    def gpu_address(self, buffer: Buffer) -> int:
        """The address GPU code uses for one of this engine's buffers; NotGpuReachable where there is none."""
        raise NotGpuReachable(f"memory of engine {self.name} has no GPU address; GPU queues need software-cuda "
                              "or the card")

    def unbacked_address(self, size: int) -> int:
        """A bus address range of `size` bytes that no memory backs, for BUS_ERROR checks.
        Only engines with Capability.BUS_ERRORS need it."""
        raise NotImplementedError(f"engine {self.name} cannot model unbacked memory")

    def advance(self, descriptors: int) -> None:
        """Let the engine execute about `descriptors` more. Engines that run by themselves ignore this;
        the reference model, which only moves when stepped, executes exactly that many."""

    def close(self) -> None:
        """Release threads, mappings and memory."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
