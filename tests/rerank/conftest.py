from __future__ import annotations

import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


def scored(specs: list[tuple[str, str | None]], scores: list[float] | None = None) -> list[ScoredTool]:
    scores = scores or [1.0 / (i + 1) for i in range(len(specs))]
    return [
        ScoredTool(ToolSpec(id=i, name=i, tool=t), s, r) for r, ((i, t), s) in enumerate(zip(specs, scores), start=1)
    ]


@pytest.fixture
def make_scored():  # noqa: ANN201 - returns the helper
    return scored


@pytest.fixture
def engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", depth=10), embedder=FakeEmbedder(64))


@pytest.fixture
def flat_engine() -> Engine:
    specs = [
        ToolSpec(id="weather_now", name="weather_now", description="current weather in a city"),
        ToolSpec(id="weather_week", name="weather_week", description="weather forecast for the week in a city"),
        ToolSpec(id="send_mail", name="send_mail", description="send an email message"),
        ToolSpec(id="stock_quote", name="stock_quote", description="latest stock price quote"),
    ]
    return Engine.build(Catalog(specs), EngineConfig(retriever="bm25", depth=10), embedder=FakeEmbedder(64))
