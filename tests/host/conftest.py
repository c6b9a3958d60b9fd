"""Fixtures for the software engine's tests: skip when the native library is not built."""

from __future__ import annotations

import pytest

from host import native


@pytest.fixture(autouse=True)
def _native_library() -> None:
    reason = native.unavailable_reason()
    if reason:
        pytest.skip(reason)
