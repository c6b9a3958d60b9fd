"""NumPy dtypes generated from the ABI records, for bulk descriptor and counter work."""

from __future__ import annotations

import numpy as np

from driver.abi import COMPLETION_BYTES, DESCRIPTOR, PRODUCER, QUEUE_HANDLE, STATUS, Record


def record_dtype(record: Record) -> np.dtype:
    """A little-endian structured dtype with the record's exact offsets and size."""
    return np.dtype(
        {
            "names": [f.name for f in record.fields],
            "formats": [np.dtype(f"<u{f.bits // 8}") for f in record.fields],
            "offsets": [f.offset for f in record.fields],
            "itemsize": record.size,
        }
    )


DESCRIPTOR_DTYPE = record_dtype(DESCRIPTOR)
QUEUE_DTYPE = record_dtype(QUEUE_HANDLE)  # the device API's records (abi.h declares the same, generated)
PRODUCER_DTYPE = record_dtype(PRODUCER)
STATUS_DTYPE = record_dtype(STATUS)
COMPLETION_DTYPE = np.dtype("<u8")
assert COMPLETION_DTYPE.itemsize == COMPLETION_BYTES
