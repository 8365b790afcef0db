"""First-stage retrievers: dense (sentence-transformers + faiss), BM25 (bm25s), hybrid (RRF)."""

from __future__ import annotations

from toolrerank_plugins.retrieval.base import FirstStageRetriever, Hit

__all__ = ["FirstStageRetriever", "Hit"]
