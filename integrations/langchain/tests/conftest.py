"""Shared fixtures: FakeEmbedder engines over the tiny catalog, with the core's test stages."""

from __future__ import annotations

import pytest

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing.stages import PREFER, PREFER_ASYNC, fake_engine, register_test_stages

register_test_stages()


@pytest.fixture(scope="session")
def engine() -> Engine:
    return fake_engine()


@pytest.fixture(scope="session")
def staged_engine() -> Engine:
    return fake_engine([StageSpec(type=PREFER, name="prefer", params={"category": "Mail"})])


@pytest.fixture(scope="session")
def async_staged_engine() -> Engine:
    return fake_engine([StageSpec(type=PREFER_ASYNC, name="prefer", params={"category": "Mail"})])
