"""The ctypes binding of the software engine's native library (host/libarkdma_engine.so): its C API,
status codes mapped to exceptions, and the probe that says whether the library and CUDA are here."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from driver.abi import version_word
from driver.errors import ArkdmaError, EngineTimeout, EngineUnavailable

LIBRARY = Path(__file__).with_name("libarkdma_engine.so")
BUILD_HINT = "build it with `pip install -e .` (or ./dev) in the checkout; it needs only a C++17 compiler"


class Status(IntEnum):
    """Result codes of the C API (host/native/engine.h)."""

    OK = 0
    BAD_ARGUMENT = 1
    TIMED_OUT = 2
    UNAVAILABLE = 3
    DRIVER_FAILURE = 4


class EngineArgumentError(ArkdmaError, ValueError):
    """The native engine refused an argument; the message says which and why."""


class CudaFailure(ArkdmaError):
    """A CUDA driver call failed; the message names the call and the CUDA error."""


class Executor(IntEnum):
    HOST = 0
    CUDA = 1


class Config(ctypes.Structure):
    _fields_ = [
        ("num_queues", ctypes.c_uint32),
        ("slots", ctypes.c_uint32),
        ("num_regions", ctypes.c_uint32),
        ("errlog_depth", ctypes.c_uint32),
        ("streams_per_queue", ctypes.c_uint32),
        ("batch_copies", ctypes.c_uint32),
        ("merge", ctypes.c_uint32),
        ("stop_check_every", ctypes.c_uint32),
        ("spin_before_sleep", ctypes.c_int64),
        ("sleep_us", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("ncpus", ctypes.c_uint32),
        ("cpus", ctypes.POINTER(ctypes.c_int32)),
    ]


class QueueInfo(ctypes.Structure):
    _fields_ = [
        ("enabled", ctypes.c_uint32),
        ("halted", ctypes.c_uint32),
        ("busy", ctypes.c_uint32),
        ("error", ctypes.c_uint32),
        ("error_cookie", ctypes.c_uint32),
        ("error_index", ctypes.c_uint32),
        ("completion_word", ctypes.c_uint64),
    ]


class ErrlogEntry(ctypes.Structure):
    _fields_ = [("queue", ctypes.c_uint32), ("code", ctypes.c_uint32), ("cookie", ctypes.c_uint32), ("index", ctypes.c_uint32)]


# Engine::stats() order (host/native/engine.h, enum Stat).
STAT_NAMES = ("polls", "drains", "issued", "drain_ns", "copies", "api_calls", "completions",
              "ns_copy", "ns_write", "ns_record", "ns_join", "ns_query")

_E = ctypes.c_void_p
_U32, _U64, _I32, _D = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_double
_INT = ctypes.c_int
_P = ctypes.POINTER
# name -> (result type, [(parameter, C type)]): every integer and timeout is checked against its C type
# before the call, since ctypes would silently wrap 2**64 to 0 or pass a NaN timeout.
_SIGNATURES = {
    "arkdma_sw_last_error": (ctypes.c_char_p, []),
    "arkdma_sw_abi_version": (_INT, []),
    "arkdma_sw_create": (_INT, [("config", _P(Config)), ("executor", _INT), ("engine_out", _P(_E))]),
    "arkdma_sw_destroy": (None, [("engine", _E)]),
    "arkdma_sw_start": (_INT, [("engine", _E)]),
    "arkdma_sw_stop": (_INT, [("engine", _E), ("timeout", _D)]),
    "arkdma_sw_running": (_INT, [("engine", _E)]),
    "arkdma_sw_set_region": (_INT, [("engine", _E), ("region", _U32), ("addr", _U64), ("size", _U64),
                                    ("perms", _U32), ("timeout", _D)]),
    "arkdma_sw_configure_queue": (_INT, [("engine", _E), ("queue", _U32), ("completion_region", _U32),
                                         ("completion_offset", _U64), ("start", _U64), ("timeout", _D)]),
    "arkdma_sw_enable_queue": (_INT, [("engine", _E), ("queue", _U32), ("timeout", _D)]),
    "arkdma_sw_disable_queue": (_INT, [("engine", _E), ("queue", _U32), ("timeout", _D)]),
    "arkdma_sw_reset": (_INT, [("engine", _E), ("timeout", _D)]),
    "arkdma_sw_ring": (_INT, [("engine", _E), ("queue", _U32), ("doorbell", _U32), ("timeout", _D)]),
    "arkdma_sw_queue_pointers": (_INT, [("engine", _E), ("queue", _U32), ("out", _P(_U64))]),
    "arkdma_sw_queue_state": (_INT, [("engine", _E), ("queue", _U32), ("out", _P(QueueInfo)), ("timeout", _D)]),
    "arkdma_sw_error_log": (_INT, [("engine", _E), ("entries", _P(ErrlogEntry)), ("capacity", _U32),
                                   ("count_out", _P(_U32)), ("timeout", _D)]),
    "arkdma_sw_errlog_overflow": (_INT, [("engine", _E), ("overflow_out", _P(_U32)), ("timeout", _D)]),
    "arkdma_sw_clear_errlog_overflow": (_INT, [("engine", _E), ("timeout", _D)]),
    "arkdma_sw_counters": (_INT, [("engine", _E), ("descriptors_out", _P(_U64)), ("bytes_out", _P(_U64)),
                                  ("timeout", _D)]),
    "arkdma_sw_busy": (_INT, [("engine", _E), ("busy_out", _P(_INT)), ("timeout", _D)]),
    "arkdma_sw_stats": (_INT, [("engine", _E), ("out", _P(_U64)), ("count", _INT)]),
    "arkdma_sw_take_note": (_INT, [("engine", _E), ("text", ctypes.c_char_p), ("capacity", _U32)]),
    "arkdma_sw_mem_alloc": (_INT, [("engine", _E), ("size", _U64), ("placement", _INT), ("host_out", _P(_U64)),
                                   ("bus_out", _P(_U64))]),
    "arkdma_sw_mem_free": (_INT, [("engine", _E), ("host", _U64), ("bus", _U64), ("placement", _INT)]),
    "arkdma_sw_mem_read": (_INT, [("engine", _E), ("bus", _U64), ("dst", ctypes.c_void_p), ("size", _U64)]),
    "arkdma_sw_mem_write": (_INT, [("engine", _E), ("bus", _U64), ("src", ctypes.c_void_p), ("size", _U64)]),
    "arkdma_sw_cuda_probe": (_INT, [("device", _I32), ("count_out", _P(_I32)), ("name", ctypes.c_char_p),
                                    ("name_capacity", _U32), ("pci_bus_id", ctypes.c_char_p),
                                    ("pci_capacity", _U32)]),
}
_INTEGER_RANGES = {
    _U32: (0, (1 << 32) - 1),
    _U64: (0, (1 << 64) - 1),
    _I32: (-(1 << 31), (1 << 31) - 1),
    _INT: (-(1 << 31), (1 << 31) - 1),
}
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer is a mistake (and would overflow the engine's clock)


def check_argument(function: str, name: str, ctype, value) -> None:
    """Raise EngineArgumentError unless `value` fits the C type `ctype` of parameter `name`."""
    if ctype in _INTEGER_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise EngineArgumentError(f"{function}: {name} must be an int, not {type(value).__name__} {value!r}")
        lo, hi = _INTEGER_RANGES[ctype]
        if not lo <= value <= hi:
            raise EngineArgumentError(f"{function}: {name}={value} does not fit in {ctype.__name__} ({lo}..{hi})")
    elif ctype is _D:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_TIMEOUT_S:
            raise EngineArgumentError(f"{function}: {name} must be a number of seconds in 0..{MAX_TIMEOUT_S:.0f}, "
                                      f"not {value!r}")


class _CheckedFunction:
    """A C API function whose integer and timeout arguments are checked before the call."""

    def __init__(self, name: str, fn, params: list[tuple[str, object]]):
        self._name, self._fn, self._params = name, fn, params

    def __call__(self, *args):
        if len(args) != len(self._params):
            raise TypeError(f"{self._name} takes {len(self._params)} arguments, not {len(args)}")
        for (name, ctype), value in zip(self._params, args):
            check_argument(self._name, name, ctype, value)
        return self._fn(*args)


class Library:
    """The native library with checked entry points (`lib.arkdma_sw_ring(...)`, as on the CDLL)."""

    def __init__(self, cdll: ctypes.CDLL):
        self.cdll = cdll
        for name, (restype, params) in _SIGNATURES.items():
            fn = getattr(cdll, name)
            fn.restype, fn.argtypes = restype, [ctype for _, ctype in params]
            setattr(self, name, _CheckedFunction(name, fn, params))


def unavailable_reason() -> str | None:
    """None when the native library is built and loads, else what is missing and how to build it."""
    if not LIBRARY.exists():
        return f"the software engine's native library is not built ({LIBRARY.name} missing); {BUILD_HINT}"
    try:
        load()
    except OSError as exc:
        return f"the native library {LIBRARY.name} does not load ({exc}); rebuild it: {BUILD_HINT}"
    except EngineUnavailable as exc:
        return str(exc)
    return None


@functools.cache
def load() -> Library:
    lib = Library(ctypes.CDLL(str(LIBRARY)))
    if lib.arkdma_sw_abi_version() != version_word():
        raise EngineUnavailable(
            f"{LIBRARY.name} was built for ABI {lib.arkdma_sw_abi_version():#x}, this checkout defines "
            f"{version_word():#x}; rebuild it: {BUILD_HINT}"
        )
    return lib


def check(status: int, what: str) -> None:
    """Raise the exception for a C API status, with the library's message."""
    if status == Status.OK:
        return
    message = f"{what}: {load().arkdma_sw_last_error().decode(errors='replace')}"
    if status == Status.BAD_ARGUMENT:
        raise EngineArgumentError(message)
    if status == Status.TIMED_OUT:
        raise EngineTimeout(message)
    if status == Status.UNAVAILABLE:
        raise EngineUnavailable(message)
    raise CudaFailure(message)


@dataclass(frozen=True)
class CudaDevice:
    ordinal: int
    count: int  # GPUs this machine has
    name: str
    pci_bus_id: str  # as CUDA spells it, e.g. "0000:1A:00.0"


def cuda_probe(device: int = 0) -> CudaDevice:
    """The CUDA device the CUDA executor would use; EngineUnavailable saying why when there is none."""
    lib = load()
    count = ctypes.c_int32(0)
    name = ctypes.create_string_buffer(256)
    bus = ctypes.create_string_buffer(64)
    check(lib.arkdma_sw_cuda_probe(device, ctypes.byref(count), name, len(name), bus, len(bus)), "CUDA probe")
    return CudaDevice(device, count.value, name.value.decode(), bus.value.decode())
