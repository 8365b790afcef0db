"""ToolRerank (Zheng et al., 2024): adaptive truncation, cross-encoder reranking, hierarchy-aware reranking.

Importing this package stays light; torch / sentence-transformers / networkx load on first use.
The stage is registered as ``"toolrerank"`` (:data:`toolrerank_plugins.rerank.stage.STAGE_TYPE`).
"""

from __future__ import annotations

from toolrerank_plugins.rerank.classifier import QueryTypeClassifier, query_type
from toolrerank_plugins.rerank.cross_encoder import (
    CachedReranker,
    Reranker,
    SentenceTransformerReranker,
    load_reranker,
    read_reranker_meta,
)
from toolrerank_plugins.rerank.hierarchy import multi_tool_rerank, single_tool_rerank
from toolrerank_plugins.rerank.stage import STAGE_TYPE, ToolRerankConfig, ToolRerankStage
from toolrerank_plugins.rerank.truncation import adaptive_truncate

__all__ = [
    "STAGE_TYPE",
    "CachedReranker",
    "QueryTypeClassifier",
    "Reranker",
    "SentenceTransformerReranker",
    "ToolRerankConfig",
    "ToolRerankStage",
    "adaptive_truncate",
    "load_reranker",
    "multi_tool_rerank",
    "query_type",
    "read_reranker_meta",
    "single_tool_rerank",
]
