"""Hybrid retrieval: reciprocal-rank fusion of dense and BM25 rankings."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins.retrieval.base import Hit


class HybridConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dense_weight: float = Field(1.0, ge=0)
    bm25_weight: float = Field(1.0, ge=0)
    # rrf_k=5 (not the usual 60) was chosen on ToolBench and Seal-Tools *train* queries: with 60 the fused
    # scores are nearly flat over the top ranks, so the weaker retriever's mistakes rise above the stronger
    # one's top hits (docs/benchmarks/first_stage.md, "Hybrid fusion").
    rrf_k: int = Field(5, ge=1, description="RRF constant: score = sum(w / (rrf_k + rank))")
    candidates: int = Field(100, ge=1, description="how deep each ranking is fused")


def rrf_fuse(rankings: Sequence[tuple[Sequence[Hit], float]], *, rrf_k: int, top_k: int) -> list[Hit]:
    """Reciprocal-rank fusion of ``(hits, weight)`` rankings; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for hits, weight in rankings:
        if weight == 0:
            continue
        for rank, (tool_id, _) in enumerate(hits, start=1):
            scores[tool_id] = scores.get(tool_id, 0.0) + weight / (rrf_k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])[:top_k]
