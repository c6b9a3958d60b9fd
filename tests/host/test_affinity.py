"""CPU lists from sysfs, for pinning the engine thread near its GPU."""

from __future__ import annotations

import os

import pytest

from host.affinity import cpus_near, parse_cpulist


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("5") == [5]
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpulist("0-x")


def test_cpus_near_reads_the_devices_local_cpulist(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    dev = tmp_path / "0000:1a:00.0"
    dev.mkdir()
    (dev / "local_cpulist").write_text(f"{allowed[-1]}-{allowed[-1] + 64}\n")
    assert cpus_near("0000:1A:00.0", tmp_path) == [allowed[-1]]
    assert cpus_near("0000:ff:00.0", tmp_path) == allowed  # sysfs says nothing: any allowed CPU
