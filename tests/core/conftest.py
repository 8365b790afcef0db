"""Fixtures shared by the core tests."""

from __future__ import annotations

import pytest

from toolrerank_plugins import _workers
from toolrerank_plugins._workers import SpareThreads


@pytest.fixture
def one_spare(monkeypatch: pytest.MonkeyPatch) -> SpareThreads:
    """One spare thread, whatever the machine's CPU count (CI may have one CPU)."""
    spare = SpareThreads(1)
    monkeypatch.setattr(_workers, "_SPARE", spare)
    return spare
