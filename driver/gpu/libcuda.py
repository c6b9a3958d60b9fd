"""The CUDA driver library (libcuda.so.1) through ctypes, for the driver API calls CuPy does not wrap: graphs
instantiated for device launch (device_graphs.py) and tensor maps (tensor_maps.py)."""

from __future__ import annotations

import ctypes
import functools

from driver.errors import ArkdmaError


class DriverLibraryError(ArkdmaError):
    """libcuda.so.1 cannot be loaded (no NVIDIA driver on this machine)."""


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DriverLibraryError(f"the CUDA driver library (libcuda.so.1) cannot be loaded: {exc}") from None
    lib.cuGetErrorName.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
    lib.cuGetErrorName.restype = ctypes.c_int
    return lib


def functions(**signatures: tuple[tuple, type]) -> ctypes.CDLL:
    """The library, with each named function's (argtypes, restype) set; DriverLibraryError without a driver."""
    lib = _library()
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def error_name(code: int) -> str:
    """CUDA_ERROR_... for a CUresult, or the number where the driver does not know it."""
    name = ctypes.c_char_p()
    if _library().cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {code}"
