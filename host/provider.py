"""Engine providers for the software engine: "software-host" (memcpy, runs anywhere the native
library is built) and "software-cuda" (the GPU's copy engines; needs an NVIDIA driver and a GPU)."""

from __future__ import annotations

from driver.backend import Backend
from driver.errors import EngineUnavailable
from driver.provider import EngineProvider


class HostProvider(EngineProvider):
    name = "software-host"
    summary = "software engine: a C++ thread polls the queues and copies with memcpy (host memory)"

    def unavailable_reason(self) -> str | None:
        from host import native

        return native.unavailable_reason()

    def open(self, **params) -> Backend:
        reason = self.unavailable_reason()
        if reason:
            raise EngineUnavailable(f"engine {self.name} cannot run here: {reason}")
        from host.engine import SoftwareEngine

        return SoftwareEngine("host", **params)


class CudaProvider(EngineProvider):
    name = "software-cuda"
    summary = "software engine: a C++ thread polls the queues and copies with the GPU's copy engines"
    workload_placements = ("device", "host")  # the demo copies as a GPU offloads: GPU to pinned host memory

    def unavailable_reason(self) -> str | None:
        from host import native

        reason = native.unavailable_reason()
        if reason:
            return reason
        try:
            native.cuda_probe()
        except EngineUnavailable as exc:
            return str(exc).removeprefix("CUDA probe: ")
        return None

    def open(self, **params) -> Backend:
        reason = self.unavailable_reason()
        if reason:
            raise EngineUnavailable(f"engine {self.name} cannot run here: {reason}")
        from host.engine import SoftwareEngine

        return SoftwareEngine("cuda", **params)
