"""The CPU-free copy paths' native library (bench/native/cpu_free_paths.cu) builds with nvcc without a GPU, so
a broken edit fails here and not on the first GPU run."""

from __future__ import annotations

import shutil

import pytest

from bench import native_paths


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_native_paths_build_for_sm90(tmp_path, monkeypatch):
    monkeypatch.setattr(native_paths, "BUILD_DIR", tmp_path)
    lib = native_paths.build("sm_90")
    assert lib.parent == tmp_path and lib.read_bytes()[:4] == b"\x7fELF"
