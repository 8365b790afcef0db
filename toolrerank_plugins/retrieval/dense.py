"""Dense retrieval: a bi-encoder (sentence-transformers) and a faiss inner-product index."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins._extras import require
from toolrerank_plugins.encoders import Embedder, SentenceTransformerEmbedder
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.retrieval.base import DocTransform, FirstStage, FirstStageType, Hit

logger = logging.getLogger(__name__)


class DenseConfig(BaseModel):
    """Dense retriever settings."""

    model_config = ConfigDict(extra="forbid")

    model_name_or_path: str = Field("default", description="local sentence-transformers folder or 'default'")
    device: str = "auto"
    batch_size: int = Field(64, ge=1)
    max_length: int = Field(256, ge=8)
    index: Literal["flat", "hnsw"] = Field("flat", description="exact inner product, or approximate HNSW")
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_search: int = Field(128, ge=8)
    hnsw_ef_construction: int = Field(200, ge=8)
    faiss_threads: int | None = Field(None, ge=1, description="faiss OpenMP threads (None: faiss default)")
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads, set (process-wide) when the encoder loads; None leaves torch's "
        "default. 1 is much faster on an oversubscribed CPU (docs/benchmarks/first_stage.md)",
    )
    show_progress_bar: bool | None = None
    query_prefix: str = ""


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


class DenseRetriever(FirstStage):
    """Encodes API texts once, keeps the raw embeddings (the cache) and a faiss index over them.

    ``add`` encodes only the new texts; ``remove`` rebuilds the faiss index from cached embeddings
    without re-encoding anything. Saved in the ``dense/`` folder of an engine directory.
    """

    name = "dense"

    def __init__(self, config: DenseConfig | None = None, *, embedder: Embedder | None = None) -> None:
        self.config = config or DenseConfig()
        self.embedder: Embedder = embedder or SentenceTransformerEmbedder(
            self.config.model_name_or_path,
            device=self.config.device,
            batch_size=self.config.batch_size,
            max_length=self.config.max_length,
            show_progress_bar=self.config.show_progress_bar,
            torch_threads=self.config.torch_threads,
        )
        self._ids: list[str] = []
        self._keys: list[str] = []
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._index: Any = None
        self._rows: dict[str, int] = {}
        self._row_ids: list[str] | None = None
        self.doc_transform: DocTransform | None = None

    # -- build -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    @property
    def encoder(self) -> Embedder:
        return self.embedder

    @property
    def has_embeddings(self) -> bool:
        return True

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        if self._row_ids is not self._ids:
            self._rows = {tid: i for i, tid in enumerate(self._ids)}
            self._row_ids = self._ids
        rows: list[int] = []
        for t in ids:
            r = self._rows.get(t)
            if r is None:
                return None
            rows.append(r)
        return np.asarray(self._emb[rows], dtype=np.float32)

    @property
    def embeddings(self) -> np.ndarray:
        """Raw (untransformed) document embeddings, one row per id in :attr:`ids`."""
        return self._emb

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts), batch_size=self.config.batch_size)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, np.ndarray] | None = None) -> None:
        """(Re)build from scratch. ``cache`` maps :func:`text_key` -> embedding; hits are not re-encoded."""
        if len(ids) != len(texts):
            raise ValueError("ids and texts must have the same length")
        keys = [text_key(t) for t in texts]
        cache = cache or {}
        todo = [i for i, k in enumerate(keys) if k not in cache]
        new = self._encode([texts[i] for i in todo]) if todo else None
        if new is not None:
            dim = new.shape[1]
        else:
            dim = next(iter(cache.values())).shape[0] if cache else self.embedder.dimension
        emb = np.zeros((len(texts), dim), dtype=np.float32)
        for i, k in enumerate(keys):
            if k in cache:
                emb[i] = cache[k]
        if new is not None:
            emb[todo] = new
        self._ids, self._keys, self._emb = list(ids), keys, emb
        self._rebuild_index()

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        if not ids:
            return
        new = self._encode(texts)
        if self._emb.size == 0:
            self._emb = new
        else:
            self._emb = np.vstack([self._emb, new])
        self._ids = [*self._ids, *ids]  # a new list: row lookups keyed on the old one are rebuilt
        self._keys += [text_key(t) for t in texts]
        if self.doc_transform is None and self.config.index == "flat" and self._index is not None:
            self._index.add(new)  # append-only: no rebuild
        else:
            self._rebuild_index()

    def remove(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        keep = [i for i, t in enumerate(self._ids) if t not in gone]
        self._ids = [self._ids[i] for i in keep]
        self._keys = [self._keys[i] for i in keep]
        self._emb = self._emb[keep]
        self._rebuild_index()

    def refresh(self) -> None:
        """Rebuild the faiss index from cached embeddings (e.g. after changing :attr:`doc_transform`)."""
        self._rebuild_index()

    def set_document_transform(self, transform: DocTransform | None) -> None:
        self.doc_transform = transform
        self._rebuild_index()

    def indexed_embeddings(self) -> np.ndarray:
        if self.doc_transform is None or len(self._ids) == 0:
            return self._emb
        out = np.ascontiguousarray(self.doc_transform(list(self._ids), self._emb), dtype=np.float32)
        if out.shape != self._emb.shape:
            raise ValueError(f"doc_transform changed the embedding shape {self._emb.shape} -> {out.shape}")
        return out

    def _rebuild_index(self) -> None:
        faiss = require("faiss")
        if self.config.faiss_threads:
            faiss.omp_set_num_threads(self.config.faiss_threads)
        emb = self.indexed_embeddings()
        dim = emb.shape[1] if emb.size else self.embedder.dimension
        if self.config.index == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.config.hnsw_ef_construction
            index.hnsw.efSearch = self.config.hnsw_ef_search
        else:
            index = faiss.IndexFlatIP(dim)
        if len(emb):
            index.add(emb)
        self._index = index

    # -- search ----------------------------------------------------------------------------------
    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        prefix = self.config.query_prefix
        return self._encode([prefix + q for q in queries])

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        if not queries:
            return []
        return self.search_vectors(self.encode_queries(queries), depth)

    def search_vectors(self, vectors: np.ndarray, depth: int) -> list[list[Hit]]:
        if self._index is None or not self._ids:
            return [[] for _ in range(len(vectors))]
        k = min(depth, len(self._ids))
        scores, rows = self._index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        ids = self._ids
        return [[Hit(ids[r], float(s)) for r, s in zip(row_r, row_s) if r >= 0] for row_r, row_s in zip(rows, scores)]

    # -- persistence -----------------------------------------------------------------------------
    def save(self, root: Path) -> None:
        """Write ``embeddings.npy``, ``ids.json``, ``faiss.index`` and ``dense.json`` into ``root/dense``."""
        faiss = require("faiss")
        path = root / self.name
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "embeddings.npy", self._emb, allow_pickle=False)
        (path / "ids.json").write_text(json.dumps({"ids": self._ids, "text_keys": self._keys}), encoding="utf-8")
        if self._index is not None:
            faiss.write_index(self._index, str(path / "faiss.index"))
        (path / "dense.json").write_text(
            json.dumps({"model_id": self.embedder.model_id, "count": len(self._ids)}), encoding="utf-8"
        )

    @classmethod
    def load(cls, root: Path, config: DenseConfig, *, embedder: Embedder | None = None) -> DenseRetriever:
        faiss = require("faiss")
        path = root / cls.name
        self = cls(config, embedder=embedder)
        try:
            meta = json.loads((path / "dense.json").read_text(encoding="utf-8"))
            idmeta = json.loads((path / "ids.json").read_text(encoding="utf-8"))
            emb = np.load(path / "embeddings.npy", allow_pickle=False)
        except (OSError, ValueError, json.JSONDecodeError) as exc:
            raise PersistenceError(f"{path}: dense index files are missing or corrupt ({exc})") from exc
        ids = idmeta.get("ids")
        if not isinstance(ids, list) or len(ids) != meta.get("count") or emb.shape[0] != len(ids):
            raise PersistenceError(
                f"{path}: dense index is inconsistent ({len(ids or [])} ids, {emb.shape[0]} embeddings, "
                f"count {meta.get('count')})"
            )
        if meta.get("model_id") != self.embedder.model_id:
            raise ConfigError(
                f"{path}: index was built with encoder {meta.get('model_id')!r} but the config loads "
                f"{self.embedder.model_id!r}; rebuild the index or use the same model"
            )
        self._ids, self._keys, self._emb = ids, list(idmeta.get("text_keys") or []), emb.astype(np.float32)
        index_file = path / "faiss.index"
        if index_file.exists():
            try:
                self._index = faiss.read_index(str(index_file))
            except RuntimeError as exc:
                raise PersistenceError(f"{index_file}: corrupt faiss index ({exc})") from exc
            if self._index.ntotal != len(ids):
                raise PersistenceError(f"{index_file}: holds {self._index.ntotal} vectors for {len(ids)} ids")
        else:
            self._rebuild_index()
        return self

    def embedding_cache(self) -> dict[str, np.ndarray]:
        """text key -> raw embedding (reused when re-indexing unchanged texts)."""
        return {k: self._emb[i] for i, k in enumerate(self._keys)}


FIRST_STAGE_TYPE = FirstStageType(
    build=lambda config, embedder: DenseRetriever(config.dense, embedder=embedder),
    load=lambda root, config, embedder: DenseRetriever.load(root, config.dense, embedder=embedder),
)
