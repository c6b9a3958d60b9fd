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
_P = ctypes.POINTER
_SIGNATURES = {
    "arkdma_sw_last_error": (ctypes.c_char_p, []),
    "arkdma_sw_abi_version": (ctypes.c_int, []),
    "arkdma_sw_create": (ctypes.c_int, [_P(Config), ctypes.c_int, _P(_E)]),
    "arkdma_sw_destroy": (None, [_E]),
    "arkdma_sw_start": (ctypes.c_int, [_E]),
    "arkdma_sw_stop": (ctypes.c_int, [_E, _D]),
    "arkdma_sw_running": (ctypes.c_int, [_E]),
    "arkdma_sw_set_region": (ctypes.c_int, [_E, _U32, _U64, _U64, _U32, _D]),
    "arkdma_sw_configure_queue": (ctypes.c_int, [_E, _U32, _U32, _U64, _U64, _D]),
    "arkdma_sw_enable_queue": (ctypes.c_int, [_E, _U32, _D]),
    "arkdma_sw_disable_queue": (ctypes.c_int, [_E, _U32, _D]),
    "arkdma_sw_reset": (ctypes.c_int, [_E, _D]),
    "arkdma_sw_ring": (ctypes.c_int, [_E, _U32, _U32, _D]),
    "arkdma_sw_queue_pointers": (ctypes.c_int, [_E, _U32, _P(_U64)]),
    "arkdma_sw_queue_state": (ctypes.c_int, [_E, _U32, _P(QueueInfo), _D]),
    "arkdma_sw_error_log": (ctypes.c_int, [_E, _P(ErrlogEntry), _U32, _P(_U32), _P(_U32), _D]),
    "arkdma_sw_counters": (ctypes.c_int, [_E, _P(_U64), _P(_U64), _D]),
    "arkdma_sw_busy": (ctypes.c_int, [_E, _P(ctypes.c_int), _D]),
    "arkdma_sw_stats": (ctypes.c_int, [_E, _P(_U64), ctypes.c_int]),
    "arkdma_sw_take_note": (ctypes.c_int, [_E, ctypes.c_char_p, _U32]),
    "arkdma_sw_mem_alloc": (ctypes.c_int, [_E, _U64, ctypes.c_int, _P(_U64), _P(_U64)]),
    "arkdma_sw_mem_free": (ctypes.c_int, [_E, _U64, _U64, ctypes.c_int]),
    "arkdma_sw_mem_read": (ctypes.c_int, [_E, _U64, ctypes.c_void_p, _U64]),
    "arkdma_sw_mem_write": (ctypes.c_int, [_E, _U64, ctypes.c_void_p, _U64]),
    "arkdma_sw_cuda_probe": (ctypes.c_int, [_I32, _P(_I32), ctypes.c_char_p, _U32, ctypes.c_char_p, _U32]),
}


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
def load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(LIBRARY))
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
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
