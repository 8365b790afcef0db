"""Shared fixtures: FakeEmbedder engines over the tiny catalog and a test-only stage."""

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


register_stage_type(
    "li_test_prefer", StageType(PreferCategoryConfig, lambda c, e, p: PreferCategory(c.category)), replace=True
)


def _engine(stages: list[StageSpec] | None = None) -> Engine:
    config = EngineConfig(retriever="dense", candidate_k=10, stages=stages or [])
    return Engine.build(tiny_catalog(), config, embedder=FakeEmbedder())


@pytest.fixture(scope="session")
def engine() -> Engine:
    return _engine()


@pytest.fixture(scope="session")
def staged_engine() -> Engine:
    return _engine([StageSpec(type="li_test_prefer", name="prefer", params={"category": "Mail"})])
