"""A visible, predictable test stage and the fake-embedder engines the adapter test suites build.

Example:
    >>> from toolrerank_plugins.stages import StageSpec
    >>> register_test_stages()
    >>> engine = fake_engine([StageSpec(type=PREFER, name="prefer", params={"category": "Mail"})])
    >>> [r.tool.category for r in engine.search("weather forecast", top_k=2)]
    ['Mail', 'Mail']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.stages import Stage, StageContext, StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing.catalogs import tiny_catalog
from toolrerank_plugins.testing.embeddings import FakeEmbedder

#: registered stage type names (see :func:`register_test_stages`)
PREFER, PREFER_ASYNC = "test_prefer", "test_prefer_async"


class PreferCategoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str


class PreferCategory(Stage):
    """Moves the APIs of one category to the front (stage score 1.0 for them, 0.0 for the others)."""

    name = "prefer"

    def __init__(self, category: str) -> None:
        self.category = category

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        scored = [c.with_stage(self.name, 1.0 if c.tool.category == self.category else 0.0) for c in candidates]
        return sorted(scored, key=lambda c: -c.score)


class AsyncPreferCategory(PreferCategory):
    """:class:`PreferCategory` with a native async twin (the engine awaits it on its async path)."""

    async def arun(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        return self.run(query, candidates, ctx, trace)


def register_test_stages() -> None:
    """Register :data:`PREFER` and :data:`PREFER_ASYNC` (idempotent; nothing registers at import)."""
    register_stage_type(
        PREFER, StageType(PreferCategoryConfig, lambda cfg, _ctx, _path: PreferCategory(cfg.category)), replace=True
    )
    register_stage_type(
        PREFER_ASYNC,
        StageType(PreferCategoryConfig, lambda cfg, _ctx, _path: AsyncPreferCategory(cfg.category)),
        replace=True,
    )


def fake_engine(stages: Sequence[StageSpec] = (), *, retriever: str = "dense", depth: int = 10) -> Engine:
    """An engine over :func:`tiny_catalog` with a :class:`FakeEmbedder` (offline, deterministic)."""
    config = EngineConfig(retriever=retriever, depth=depth, stages=list(stages))
    return Engine.build(tiny_catalog(), config, embedder=FakeEmbedder())
