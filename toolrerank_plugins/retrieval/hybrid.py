"""Hybrid retrieval: reciprocal-rank fusion of a dense and a BM25 ranking, as one first stage."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.retrieval.base import DocTransform, FirstStage, FirstStageType, Hit
from toolrerank_plugins.retrieval.bm25 import BM25_FILES, BM25Retriever
from toolrerank_plugins.retrieval.dense import DENSE_FILES, DenseRetriever

if TYPE_CHECKING:
    import numpy as np

    from toolrerank_plugins.encoders import Embedder


class HybridConfig(RenamedFieldsModel):
    model_config = ConfigDict(extra="forbid")

    dense_weight: float = Field(1.0, ge=0)
    bm25_weight: float = Field(1.0, ge=0)
    # rrf_k=5 (not the usual 60) was chosen on ToolBench and Seal-Tools *train* queries: with 60 the fused
    # scores are nearly flat over the top ranks, so the weaker retriever's mistakes rise above the stronger
    # one's top hits (docs/benchmarks/first_stage.md, "Hybrid fusion").
    rrf_k: int = Field(5, ge=1, description="RRF constant: score = sum(w / (rrf_k + rank))")
    depth: int = Field(100, ge=1, description="how deep each ranking is fused (was candidates)")
    # The defaults are the recommended pipeline's (config.DEFAULT_PIPELINE); the "hybrid" preset spells out RRF.
    fusion: Literal["rrf", "minmax", "zscore"] = Field(
        "zscore",
        description="rrf: reciprocal-rank fusion; minmax / zscore: each ranking's scores normalised per query "
        "(over its fused depth) and combined with the weights as a convex combination",
    )
    confidence_weighted: bool = Field(
        True,
        description="zscore only: scale each ranking's weight by its top hit's z-score in this query, so the "
        "retriever that separates its best match more clearly counts more",
    )

    renamed_fields: ClassVar[Mapping[str, str]] = {"candidates": "depth"}

    @property
    def candidates(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("HybridConfig", "candidates", "depth")
        return self.depth


def rrf_fuse(rankings: Sequence[tuple[Sequence[Hit], float]], *, rrf_k: int, top_k: int) -> list[Hit]:
    """Reciprocal-rank fusion of ``(hits, weight)`` rankings; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for hits, weight in rankings:
        if weight == 0:
            continue
        for rank, hit in enumerate(hits, start=1):
            scores[hit[0]] = scores.get(hit[0], 0.0) + weight / (rrf_k + rank)
    return [Hit(tid, score) for tid, score in sorted(scores.items(), key=lambda kv: -kv[1])[:top_k]]


def score_fuse(
    rankings: Sequence[tuple[Sequence[Hit], float]],
    *,
    normalization: Literal["minmax", "zscore"],
    top_k: int,
    confidence_weighted: bool = False,
) -> list[Hit]:
    """Score fusion of ``(hits, weight)`` rankings: each ranking's scores are normalised per query (min-max to
    [0, 1], or z-scores), an id missing from a ranking gets that ranking's lowest normalised score, and the
    weighted normalised scores are summed (weights are divided by their total). Ties keep first-seen order.
    With ``confidence_weighted`` (z-scores) each weight is multiplied by the ranking's top z-score first
    (when every taking part has a positive one): a ranking whose best hit stands out counts more.

    Example:
        >>> a = [Hit("x", 0.9), Hit("y", 0.5), Hit("z", 0.1)]
        >>> b = [Hit("y", 12.0), Hit("x", 2.0)]
        >>> [h.id for h in score_fuse([(a, 1.0), (b, 1.0)], normalization="minmax", top_k=3)]
        ['y', 'x', 'z']
    """
    normalised: list[tuple[dict[str, float], float, float]] = []
    order: dict[str, None] = {}
    for hits, weight in rankings:
        if not hits or weight <= 0:
            continue
        values = [float(h[1]) for h in hits]
        if normalization == "minmax":
            lo, hi = min(values), max(values)
            norm = [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
        else:
            mean = sum(values) / len(values)
            sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            norm = [(v - mean) / sd if sd > 0 else 0.0 for v in values]
        normalised.append(({h[0]: n for h, n in zip(hits, norm)}, min(norm), weight))
        order.update(dict.fromkeys(h[0] for h in hits))
    if confidence_weighted and normalization == "zscore" and all(max(m.values()) > 0 for m, _, _ in normalised):
        normalised = [(m, floor, w * max(m.values())) for m, floor, w in normalised]
    total = sum(w for _, _, w in normalised)
    normalised = [(m, floor, w / total) for m, floor, w in normalised]
    scores = {t: sum(w * m.get(t, floor) for m, floor, w in normalised) for t in order}
    return [Hit(t, s) for t, s in sorted(scores.items(), key=lambda kv: -kv[1])[:top_k]]


class HybridRetriever(FirstStage):
    """A dense and a BM25 retriever over the same ids, fused by :func:`rrf_fuse`.

    Each hit carries both retrievers' scores (``hit.scores``: ``dense`` and/or ``bm25``). Saved as the
    ``dense/`` and ``bm25/`` folders of an engine directory.

    A change applies to copies of both retrievers and then replaces them together, so a failure in
    either (an encoder or tokeniser error) leaves both as they were, and the two always hold the same ids
    in the same order.
    """

    name = "hybrid"

    def __init__(self, config: HybridConfig, dense: DenseRetriever, bm25: BM25Retriever) -> None:
        self.config = config
        self.dense = dense
        self.bm25 = bm25

    @property
    def ids(self) -> list[str]:
        return self.dense.ids

    def score_scales(self) -> Mapping[str, str]:
        c = self.config
        weights = f"weights dense {c.dense_weight:g} / bm25 {c.bm25_weight:g}"
        if c.fusion == "rrf":
            fused = f"reciprocal-rank fusion: sum of weight / ({c.rrf_k} + rank) over dense and bm25 ({weights})"
        elif c.fusion == "minmax":
            fused = f"min-max fusion: weighted mean of dense and bm25 scaled to 0..1 within this query ({weights})"
        else:
            how = ", each weight scaled by its retriever's top z-score" if c.confidence_weighted else ""
            fused = (
                f"z-score fusion: weighted mean of dense's and bm25's z-scores within this query ({weights}{how}); "
                "0 is an average candidate, any sign"
            )
        return {**self.dense.score_scales(), **self.bm25.score_scales(), "hybrid": fused}

    @property
    def parts(self) -> Mapping[str, FirstStage]:
        return {"dense": self.dense, "bm25": self.bm25}

    @property
    def encoder(self) -> Embedder:
        return self.dense.embedder

    @property
    def has_embeddings(self) -> bool:
        return True

    def copy(self) -> HybridRetriever:
        return HybridRetriever(self.config, self.dense.copy(), self.bm25.copy())

    def _change(self, op: Callable[[FirstStage], None]) -> None:
        dense, bm25 = self.dense.copy(), self.bm25.copy()
        op(dense)
        op(bm25)
        self.dense, self.bm25 = dense, bm25

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        self._change(lambda part: part.index(ids, texts, cache=cache))  # BM25 ignores the cache

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._change(lambda part: part.add(ids, texts))

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._change(lambda part: part.update(ids, texts))

    def remove(self, ids: Sequence[str]) -> None:
        self._change(lambda part: part.remove(ids))

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        deep = max(depth, self.config.depth)
        dense, bm25 = self.dense, self.bm25
        return [self._fuse(dh, bh, depth) for dh, bh in zip(dense.search(queries, deep), bm25.search(queries, deep))]

    def search_with_parts(
        self,
        queries: Sequence[str],
        parts: Sequence[Sequence[str]],
        depth: int,
        *,
        pooled: bool = False,
        lexical: bool = False,
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]]:
        """Both retrievers in one call each; ``pooled`` applies to the dense part (BM25 matches the whole
        query's words). With ``lexical`` the parts are BM25's alone: only the queries are encoded (and
        ``pooled``, having no part vectors to pool, changes nothing)."""
        deep = max(depth, self.config.depth)
        dense, bm25 = self.dense, self.bm25
        b_whole, b_parts = bm25.search_with_parts(queries, parts, deep)
        if lexical:
            d_whole = dense.search(queries, deep)
            by_part = [[[Hit(h.id, h.score, {"bm25": h.score}) for h in hits[:depth]] for hits in bp] for bp in b_parts]
        else:
            d_whole, d_parts = dense.search_with_parts(queries, parts, deep, pooled=pooled)
            by_part = [[self._fuse(dh, bh, depth) for dh, bh in zip(dp, bp)] for dp, bp in zip(d_parts, b_parts)]
        whole = [self._fuse(dh, bh, depth) for dh, bh in zip(d_whole, b_whole)]
        return whole, by_part

    def _fuse(self, dh: list[Hit], bh: list[Hit], depth: int) -> list[Hit]:
        c = self.config
        pair = [(dh, c.dense_weight), (bh, c.bm25_weight)]
        if c.fusion == "rrf":
            fused = rrf_fuse(pair, rrf_k=c.rrf_k, top_k=depth)
        else:
            fused = score_fuse(pair, normalization=c.fusion, top_k=depth, confidence_weighted=c.confidence_weighted)
        dmap, bmap = {h.id: h.score for h in dh}, {h.id: h.score for h in bh}
        return [
            Hit(
                h.id,
                h.score,
                {**({"dense": dmap[h.id]} if h.id in dmap else {}), **({"bm25": bmap[h.id]} if h.id in bmap else {})},
            )
            for h in fused
        ]

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        return self.dense.embeddings_for(ids)

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray | None:
        return self.dense.query_vectors(queries)

    def embedding_cache(self) -> dict[str, np.ndarray]:
        return self.dense.embedding_cache()

    def set_document_transform(self, transform: DocTransform | None) -> None:
        dense = self.dense.copy()  # a dense retriever shared with another first stage keeps its vectors
        dense.set_document_transform(transform)
        self.dense = dense

    def save(self, root: Path) -> None:
        self.dense.save(root)
        self.bm25.save(root)

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Embedder | None = None) -> HybridRetriever:
        """``config`` is the engine config (the hybrid, dense and BM25 sections are all read)."""
        return cls(
            config.hybrid,
            DenseRetriever.load(root, config.dense, embedder=embedder),
            BM25Retriever.load(root, config.bm25),
        )


FIRST_STAGE_TYPE = FirstStageType(
    build=lambda config, embedder: HybridRetriever(
        config.hybrid, DenseRetriever(config.dense, embedder=embedder), BM25Retriever(config.bm25)
    ),
    load=lambda root, config, embedder: HybridRetriever.load(root, config, embedder=embedder),
    required_files=DENSE_FILES + BM25_FILES,
)


def first_stage_from_parts(name: str, parts: Mapping[str, FirstStage], config: Any) -> FirstStage:
    """A ``dense``, ``bm25`` or ``hybrid`` first stage over already-built retrievers (``FirstStage.parts``
    of another engine), so first stages can be compared without re-encoding; ``config`` is the engine
    config (its ``hybrid`` section is used for fusion).

    Raises:
        ConfigError: ``parts`` lacks a retriever the requested first stage needs.
    """
    from toolrerank_plugins.errors import ConfigError

    need = ("dense", "bm25") if name == "hybrid" else (name,)
    missing = [n for n in need if n not in parts]
    if name not in ("dense", "bm25", "hybrid") or missing:
        raise ConfigError(f"cannot make first stage {name!r} from parts {sorted(parts)} (missing {missing})")
    if name == "hybrid":
        dense, bm25 = parts["dense"], parts["bm25"]
        assert isinstance(dense, DenseRetriever) and isinstance(bm25, BM25Retriever)
        return HybridRetriever(config.hybrid, dense, bm25)
    return parts[name]
