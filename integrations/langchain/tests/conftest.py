"""Shared fixtures: FakeEmbedder engines over the tiny catalog and test-only stages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.stages import StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


class PreferCategoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str


class PreferCategory:
    """Moves the APIs of one category to the front (a visible, predictable reordering)."""

    name = "prefer"

    def __init__(self, category: str) -> None:
        self.category = category

    def run(self, query: str, candidates: list[ScoredTool], engine: Any, trace: dict) -> list[ScoredTool]:
        scored = [c.with_stage(self.name, 1.0 if c.tool.category == self.category else 0.0) for c in candidates]
        return sorted(scored, key=lambda c: -c.score)


class AsyncPreferCategory(PreferCategory):
    async def arun(self, query: str, candidates: list[ScoredTool], engine: Any, trace: dict) -> list[ScoredTool]:
        return self.run(query, candidates, engine, trace)


register_stage_type(
    "lc_test_prefer", StageType(PreferCategoryConfig, lambda c, e, p: PreferCategory(c.category)), replace=True
)
register_stage_type(
    "lc_test_prefer_async",
    StageType(PreferCategoryConfig, lambda c, e, p: AsyncPreferCategory(c.category)),
    replace=True,
)


def build_engine(stages: list[StageSpec] | None = None, retriever: str = "dense") -> Engine:
    config = EngineConfig(retriever=retriever, candidate_k=10, stages=stages or [])  # type: ignore[arg-type]
    return Engine.build(tiny_catalog(), config, embedder=FakeEmbedder())


@pytest.fixture(scope="session")
def engine() -> Engine:
    return build_engine()


@pytest.fixture(scope="session")
def staged_engine() -> Engine:
    return build_engine([StageSpec(type="lc_test_prefer", name="prefer", params={"category": "Mail"})])


@pytest.fixture(scope="session")
def async_staged_engine() -> Engine:
    return build_engine([StageSpec(type="lc_test_prefer_async", name="prefer", params={"category": "Mail"})])
