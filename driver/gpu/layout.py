"""The device API's records as NumPy dtypes (the queue handle, producer state, status record) and its codes.

device.cuh declares them in C; `layout_assertions()` writes static_asserts from these dtypes so a
compile of the header with nvcc (tests/driver, no GPU needed) fails when the two disagree. (NVRTC has
no offsetof, so the offsets are checked with nvcc; the codes and sizes with either.)
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class DeviceCode(IntEnum):
    """What a device-API call returns (ARKDMA_DEV_* in device.cuh)."""

    OK = 0
    PENDING = 1
    TIMEOUT = 2
    QUEUE_ERROR = 3
    ABORTED = 4
    BAD_ARGUMENT = 5


class Site(IntEnum):
    """Where a failure was met (ARKDMA_DEV_SITE_* in device.cuh); 0 when none was."""

    NONE = 0
    POST = 1
    WAIT = 2
    SIGNAL = 3


def _struct(fields: list[tuple[str, str, int]], itemsize: int) -> np.dtype:
    return np.dtype({
        "names": [f[0] for f in fields],
        "formats": [np.dtype(f[1]) for f in fields],
        "offsets": [f[2] for f in fields],
        "itemsize": itemsize,
    })


# (C type name, dtype, fields as (name, format, offset))
QUEUE_DTYPE = _struct([
    ("window", "<u8", 0),
    ("doorbell", "<u8", 8),
    ("completion", "<u8", 16),
    ("producer", "<u8", 24),
    ("status", "<u8", 32),
    ("budget_ns", "<u8", 40),
    ("slots", "<u4", 48),
    ("id", "<u4", 52),
], 56)

PRODUCER_DTYPE = _struct([
    ("posted", "<u8", 0),
    ("completed", "<u8", 8),
    ("claim", "<u4", 16),
    ("reserved", "<u4", 20),
], 24)

STATUS_DTYPE = _struct([
    ("code", "<u4", 0),
    ("site", "<u4", 4),
    ("queue", "<u4", 8),
    ("abort", "<u4", 12),
    ("expected", "<u8", 16),
    ("observed", "<u8", 24),
    ("waited_ns", "<u8", 32),
    ("failures", "<u4", 40),
    ("reserved", "<u4", 44),
], 48)

C_STRUCTS = {"arkdma_queue": QUEUE_DTYPE, "arkdma_producer": PRODUCER_DTYPE, "arkdma_status": STATUS_DTYPE}
C_CODES = {
    **{f"ARKDMA_DEV_{c.name}": c.value for c in DeviceCode},
    **{f"ARKDMA_DEV_SITE_{s.name}": s.value for s in Site if s is not Site.NONE},
}


def layout_assertions(offsets: bool = True) -> str:
    """C++ static_asserts that every struct size, field size and code in device.cuh (and, with `offsets`,
    every field offset: nvcc only) matches these dtypes."""
    lines = ['#include "arkdma/device.cuh"']
    for cname, dt in C_STRUCTS.items():
        lines.append(f'static_assert(sizeof({cname}) == {dt.itemsize}, "{cname} is {dt.itemsize} bytes");')
        for name in dt.names:
            fmt, off = dt.fields[name][:2]
            if offsets:
                lines.append(f'static_assert(offsetof({cname}, {name}) == {off}, "{cname}.{name} at +{off}");')
            lines.append(
                f'static_assert(sizeof((({cname}*)0)->{name}) == {fmt.itemsize}, "{cname}.{name} is {fmt.itemsize} bytes");'
            )
    for name, value in C_CODES.items():
        lines.append(f'static_assert({name} == {value}u, "{name} is {value}");')
    return "\n".join(lines) + "\n"
