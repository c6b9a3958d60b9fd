"""What GPU code can reach is part of the Backend contract: engines without GPU-writable queues or GPU
addresses say so with NotGpuReachable (no attribute probing, no engine-name checks)."""

from __future__ import annotations

import pytest

from driver.backend import NotGpuReachable, QueuePointers
from driver.reference_engine import ReferenceEngine


def test_the_reference_engine_says_gpu_code_cannot_reach_it():
    with ReferenceEngine(2, 16, 8) as engine:
        buf = engine.alloc(64)
        with pytest.raises(NotGpuReachable, match="no GPU-writable queues; use software-cuda"):
            engine.queue_pointers(0)
        with pytest.raises(NotGpuReachable, match="has no GPU address"):
            engine.gpu_address(buf)


def test_the_host_executor_has_host_pointers_only():
    from host.engine import SoftwareEngine

    with SoftwareEngine(num_queues=2, slots=16, num_regions=8, executor="host") as engine:
        p = engine.queue_pointers(1)
        assert isinstance(p, QueuePointers) and p.slots == 16
        assert p.window_host and p.doorbell_host and not p.window_device and not p.doorbell_device
        with pytest.raises(NotGpuReachable):
            engine.gpu_address(engine.alloc(64))
        with pytest.raises(ValueError, match="queue 2 does not exist"):
            engine.queue_pointers(2)
