"""Hybrid retrieval: a fusion of several first stages' rankings (by default dense and BM25), as one first stage."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.retrieval.base import (
    CatalogChange,
    DocTransform,
    FirstStage,
    FirstStageType,
    Hit,
    StoreChanges,
    get_first_stage_type,
)

if TYPE_CHECKING:
    import numpy as np

    from toolrerank_plugins.encoders import Embedder


class HybridConfig(RenamedFieldsModel):
    model_config = ConfigDict(extra="forbid")

    parts: list[str] = Field(
        default_factory=lambda: ["dense", "bm25"],
        description="the first stages fused, by registered name (each reads its own section of the engine config)",
    )
    weights: dict[str, float] = Field(
        default_factory=dict, description="fusion weight per part; dense_weight / bm25_weight, else 1, when absent"
    )
    dense_weight: float = Field(1.0, ge=0)
    bm25_weight: float = Field(1.0, ge=0)
    # rrf_k=5 (not the usual 60) was chosen on ToolBench and Seal-Tools *train* queries: with 60 the fused
    # scores are nearly flat over the top ranks, so the weaker retriever's mistakes rise above the stronger
    # one's top hits (docs/benchmarks/first_stage.md, "Hybrid fusion").
    rrf_k: int = Field(5, ge=1, description="RRF constant: score = sum(w / (rrf_k + rank))")
    depth: int = Field(100, ge=1, description="how deep each ranking is fused (was candidates)")
    # The defaults are the recommended pipeline's (config.DEFAULT_PIPELINE); the "hybrid" preset spells out RRF.
    fusion: Literal["rrf", "minmax", "zscore", "agreement"] = Field(
        "rrf",
        description="rrf: reciprocal-rank fusion; minmax / zscore: each ranking's scores normalised per query "
        "(over its fused depth) and combined with the weights as a convex combination; agreement: chosen per "
        "query by how far the rankings agree (see agreement_fuse): rrf where their tops share agreement_min "
        "hits, else leaning on the more confident ranking. rrf since the thirteenth dev catalog (agent-style tasks "
        "of several steps, where agreement lost 5.0 Recall@5 to it): chosen leaving one catalog out "
        "(benchmarks/fusion_choice.py; agreement was the default before)",
    )
    confidence_weighted: bool = Field(
        True,
        description="zscore and agreement: scale each ranking's weight by its top hit's z-score in this query, so the "
        "retriever that separates its best match more clearly counts more",
    )

    agreement_depth: int = Field(
        5, ge=1, description="agreement fusion: how many top hits of each ranking are compared"
    )
    agreement_min: int = Field(
        3,
        ge=0,
        description="agreement fusion: shared top hits from which the rankings agree (reciprocal-rank fusion); 3 was "
        "chosen leaving one catalog out on eleven dev catalogs when agreement was the default fusion "
        "(benchmarks/fusion_choice.py: ten folds of eleven, and all eleven)",
    )
    disagreement_rrf_weight: float = Field(
        0.5,
        ge=0,
        description="agreement fusion, where the rankings disagree: weight of the reciprocal-rank ranking against "
        "the confidence-weighted z-score ranking (1) when the two are merged (chosen with agreement_min)",
    )

    renamed_fields: ClassVar[Mapping[str, str]] = {"candidates": "depth"}

    @field_validator("parts")
    @classmethod
    def _fusable_parts(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value) or len(value) < 2:
            raise ValueError(f"hybrid fuses two or more different first stages, got {value}")
        if "hybrid" in value:
            raise ValueError("a hybrid cannot be a part of itself")
        return value

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in value.items() if not w >= 0}
        if bad:
            raise ValueError(f"fusion weights must be >= 0, got {bad}")
        return value

    @property
    def candidates(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("HybridConfig", "candidates", "depth")
        return self.depth


def rrf_fuse(rankings: Sequence[tuple[Sequence[Hit], float]], *, rrf_k: int, top_k: int) -> list[Hit]:
    """Reciprocal-rank fusion of ``(hits, weight)`` rankings; ties keep first-seen order."""
    scores = _rrf_scores(rankings, rrf_k)
    return [Hit(tid, scores[tid]) for tid in _best(scores, top_k)]


def _rrf_scores(rankings: Sequence[tuple[Sequence[Hit], float]], rrf_k: int) -> dict[str, float]:
    """Each id's reciprocal-rank score (``weight / (rrf_k + rank)`` summed over the rankings), first-seen order."""
    scores: dict[str, float] = {}
    get = scores.get
    for hits, weight in rankings:
        if weight == 0:
            continue
        for rank, hit in enumerate(hits, start=1):
            tid = hit[0]
            scores[tid] = get(tid, 0.0) + weight / (rrf_k + rank)
    return scores


def _best(scores: dict[str, float], top_k: int) -> list[str]:
    """The ``top_k`` ids of ``scores``, highest first; equal scores keep the dict's order (a stable sort)."""
    return sorted(scores, key=scores.__getitem__, reverse=True)[:top_k]


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
    scores = _normalised_scores(rankings, normalization, confidence_weighted)
    return [Hit(t, scores[t]) for t in _best(scores, top_k)]


def _normalised_scores(
    rankings: Sequence[tuple[Sequence[Hit], float]],
    normalization: Literal["minmax", "zscore"],
    confidence_weighted: bool,
) -> dict[str, float]:
    """:func:`score_fuse`'s score of every id taking part, in first-seen order."""
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
    if len(normalised) == 2:  # the usual two retrievers: the sum below, written out (the same additions)
        (m0, f0, w0), (m1, f1, w1) = normalised
        get0, get1 = m0.get, m1.get
        scores = {t: 0.0 + w0 * get0(t, f0) + w1 * get1(t, f1) for t in order}
    else:
        scores = {t: sum(w * m.get(t, floor) for m, floor, w in normalised) for t in order}
    return scores


def shared_top(rankings: Sequence[tuple[Sequence[Hit], float]], depth: int) -> int:
    """How many ids are in the top ``depth`` of every ranking taking part (weight > 0, any hits)."""
    tops = [{h[0] for h in hits[:depth]} for hits, weight in rankings if hits and weight > 0]
    return len(set.intersection(*tops)) if tops else 0


def agreement_fuse(
    rankings: Sequence[tuple[Sequence[Hit], float]],
    *,
    rrf_k: int,
    top_k: int,
    depth: int = 5,
    min_shared: int = 2,
    rrf_weight: float = 1.0,
    confidence_weighted: bool = True,
) -> list[Hit]:
    """Fusion chosen per query by the rankings' agreement. Where the top ``depth`` of every ranking share at
    least ``min_shared`` ids, the retrievers agree on what the query is about and reciprocal-rank fusion
    (:func:`rrf_fuse`) merges them evenly. Where they share fewer, one of them is likely off the point: the
    (``confidence_weighted``) z-score ranking (:func:`score_fuse`, which leans on the ranking whose best hit stands
    out) and the reciprocal-rank one are merged by reciprocal rank (constant 1, weights 1 and ``rrf_weight``), so the
    confident retriever leads without the other's best hits dropping out. Scores: the merge's, or RRF's.

    Why (docs/benchmarks.md, "Does the default transfer?"): z-score fusion alone lost 3.0 Recall@5 to
    reciprocal-rank fusion on RestBench, reciprocal-rank fusion alone lost on five other catalogs. ``min_shared``
    3 (the confident ranking leads where the top hits share at most two ids) and ``rrf_weight`` 0.5 were chosen
    leaving one catalog out on eleven dev catalogs with the default's other parts (``benchmarks/fusion_choice.py``;
    with the parts on before issue 29's fixed point the choice was 1 and 0.5, on the first ten catalogs 3 and 0.5,
    which lost 2.3 Recall@5 to reciprocal-rank fusion on the catalog of real MCP servers, and with the fixed point's
    parts before BM25's tie order and the per-catalog stemmer 2 and 1: the choice turns on a few queries).

    Example:
        >>> a = [Hit("x", 0.9), Hit("y", 0.8), Hit("z", 0.1)]
        >>> b = [Hit("y", 9.0), Hit("x", 8.0), Hit("w", 1.0)]
        >>> [h.id for h in agreement_fuse([(a, 1.0), (b, 1.0)], rrf_k=5, top_k=2, depth=2, min_shared=2)]  # RRF
        ['x', 'y']
    """
    if shared_top(rankings, depth) >= min_shared:
        return rrf_fuse(rankings, rrf_k=rrf_k, top_k=top_k)
    # rrf_fuse([(z-score ranking, 1), (RRF ranking, rrf_weight)], rrf_k=1) over every id, without building the two
    # rankings' hits: an id's rank r in a ranking adds weight / (1 + r)
    by_score = _normalised_scores(rankings, "zscore", confidence_weighted)
    by_rank = _rrf_scores(rankings, rrf_k)
    merged = {t: 0.0 + 1.0 / rank for rank, t in enumerate(_best(by_score, len(by_score)), start=2)}
    if rrf_weight != 0:
        get = merged.get
        for rank, t in enumerate(_best(by_rank, len(by_rank)), start=2):
            merged[t] = get(t, 0.0) + rrf_weight / rank
    return [Hit(t, merged[t]) for t in _best(merged, top_k)]


class HybridRetriever(FirstStage):
    """Several first stages ("parts", by default ``dense`` and ``bm25``) over the same ids, fused per query by
    :func:`rrf_fuse` or :func:`score_fuse` (``HybridConfig.fusion``), as one first stage.

    Each hit carries every part's score (``hit.scores``, by part name). Each part saves its own files (the
    ``dense/`` and ``bm25/`` folders of an engine directory for the built-in ones). The part with document
    vectors (the first such part) serves :attr:`encoder`, :meth:`embeddings_for` and document transforms; the
    parts without vectors are the *lexical* ones (``search_with_parts(lexical=True)`` matches sub-queries with
    them alone).

    A change applies to every part's :meth:`~FirstStage.begin_change` and then replaces them together, so a
    failure in one (an encoder or tokeniser error) leaves all as they were, and the parts always hold the same
    ids in the same order.
    """

    name = "hybrid"

    def __init__(
        self,
        config: HybridConfig,
        dense: FirstStage | None = None,
        bm25: FirstStage | None = None,
        *,
        parts: Mapping[str, FirstStage] | None = None,
    ) -> None:
        self.config = config
        given = dict(parts) if parts is not None else {}
        if dense is not None:
            given["dense"] = dense
        if bm25 is not None:
            given["bm25"] = bm25
        if len(given) < 2:
            raise ConfigError(f"hybrid needs at least two parts to fuse, got {sorted(given)}")
        self._parts: dict[str, FirstStage] = given

    @property
    def dense(self) -> Any:
        """The part named ``dense`` (None when this hybrid has none)."""
        return self._parts.get("dense")

    @property
    def bm25(self) -> Any:
        """The part named ``bm25`` (None when this hybrid has none)."""
        return self._parts.get("bm25")

    @property
    def ids(self) -> list[str]:
        return next(iter(self._parts.values())).ids

    def weight(self, part: str) -> float:
        """The fusion weight of ``part``: ``HybridConfig.weights``, else ``dense_weight`` / ``bm25_weight`` for
        those two names, else 1."""
        c = self.config
        if part in c.weights:
            return c.weights[part]
        return {"dense": c.dense_weight, "bm25": c.bm25_weight}.get(part, 1.0)

    def score_scales(self) -> Mapping[str, str]:
        c = self.config
        names = list(self._parts)
        weights = "weights " + " / ".join(f"{n} {self.weight(n):g}" for n in names)
        over = " and ".join(names)
        if c.fusion == "rrf":
            fused = f"reciprocal-rank fusion: sum of weight / ({c.rrf_k} + rank) over {over} ({weights})"
        elif c.fusion == "agreement":
            z_rank = "confidence-weighted z-score ranking" if c.confidence_weighted else "z-score ranking"
            fused = (
                f"agreement fusion over {over} ({weights}): where their top {c.agreement_depth} share "
                f"{c.agreement_min}+ hits, sum of weight / ({c.rrf_k} + rank); else a reciprocal-rank merge "
                f"(constant 1) of the {z_rank} and that one"
            )
        elif c.fusion == "minmax":
            fused = f"min-max fusion: weighted mean of {over} scaled to 0..1 within this query ({weights})"
        else:
            how = ", each weight scaled by its retriever's top z-score" if c.confidence_weighted else ""
            fused = (
                f"z-score fusion: weighted mean of {over}'s z-scores within this query ({weights}{how}); "
                "0 is an average candidate, any sign"
            )
        scales: dict[str, str] = {}
        for part in self._parts.values():
            scales.update(part.score_scales())
        return {**scales, "hybrid": fused}

    @property
    def parts(self) -> Mapping[str, FirstStage]:
        return dict(self._parts)

    def _vector_part(self) -> FirstStage | None:
        return next((p for p in self._parts.values() if p.has_embeddings), None)

    @property
    def encoder(self) -> Embedder | None:
        part = self._vector_part()
        return part.encoder if part is not None else None

    @property
    def encoder_path(self) -> str | None:
        part = self._vector_part()
        return part.encoder_path if part is not None else None

    @property
    def has_embeddings(self) -> bool:
        return self._vector_part() is not None

    def copy(self) -> HybridRetriever:
        return HybridRetriever(self.config, parts={n: p.copy() for n, p in self._parts.items()})

    def begin_change(self) -> HybridRetriever:
        return HybridRetriever(self.config, parts={n: p.begin_change() for n, p in self._parts.items()})

    def commit_change(self, changed: FirstStage, change: CatalogChange | None = None) -> FirstStage:
        assert isinstance(changed, HybridRetriever)
        done = {n: self._parts[n].commit_change(p, change) for n, p in changed._parts.items()}
        return HybridRetriever(self.config, parts=done)

    @property
    def poll_interval(self) -> float | None:
        intervals = [p.poll_interval for p in self._parts.values() if p.poll_interval is not None]
        return min(intervals) if intervals else None

    def poll_changes(self) -> StoreChanges | None:
        # parts over one shared store report the same changes: the first that has any speaks for all
        return next((c for p in self._parts.values() if (c := p.poll_changes()) is not None), None)

    def follow(self, changes: StoreChanges, texts: Mapping[str, str]) -> FirstStage:
        return HybridRetriever(self.config, parts={n: p.follow(changes, texts) for n, p in self._parts.items()})

    def rollback_change(self, changed: FirstStage) -> None:
        assert isinstance(changed, HybridRetriever)
        for n, p in changed._parts.items():
            self._parts[n].rollback_change(p)

    def close(self) -> None:
        for part in self._parts.values():
            part.close()

    def _change(self, op: Callable[[FirstStage], None]) -> None:
        changed = {n: p.copy() for n, p in self._parts.items()}
        for part in changed.values():
            op(part)
        self._parts = changed

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        self._change(lambda part: part.index(ids, texts, cache=cache))  # a part without vectors ignores the cache

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._change(lambda part: part.add(ids, texts))

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._change(lambda part: part.update(ids, texts))

    def remove(self, ids: Sequence[str]) -> None:
        self._change(lambda part: part.remove(ids))

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        deep = max(depth, self.config.depth)
        ranked = {n: p.search(queries, deep) for n, p in self._parts.items()}
        return [self._fuse({n: hits[i] for n, hits in ranked.items()}, depth) for i in range(len(queries))]

    def search_with_parts(
        self,
        queries: Sequence[str],
        parts: Sequence[Sequence[str]],
        depth: int,
        *,
        pooled: bool = False,
        lexical: bool = False,
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]]:
        """Every part in one call each, the vector part's encoding of the sub-queries on a spare thread when the
        engine allows it and one is free (:meth:`_side_by_side`); ``pooled`` applies to the parts with vectors (a
        lexical part matches the whole query's words). With ``lexical`` the sub-queries are matched by the
        lexical parts alone: only the queries are encoded (and ``pooled``, having no part vectors to pool, changes
        nothing)."""
        deep = max(depth, self.config.depth)
        side = None if pooled or lexical else self._side_by_side(queries, parts, deep)
        if side is not None:
            whole, by_part = side
        else:
            whole, by_part = {}, {}
            for name, part in self._parts.items():
                if lexical and part.has_embeddings:
                    whole[name] = part.search(queries, deep)
                else:
                    whole[name], by_part[name] = part.search_with_parts(queries, parts, deep, pooled=pooled)
        fused_whole = [self._fuse({n: hits[i] for n, hits in whole.items()}, depth) for i in range(len(queries))]
        fused_parts = [
            [self._fuse({n: hp[i][j] for n, hp in by_part.items()}, depth) for j in range(len(ps))]
            for i, ps in enumerate(parts)
        ]
        return fused_whole, fused_parts

    def _side_by_side(
        self, queries: Sequence[str], parts: Sequence[Sequence[str]], deep: int
    ) -> tuple[dict[str, list[list[Hit]]], dict[str, list[list[list[Hit]]]]] | None:
        """Each part's hits of the queries and of their parts: the vector part encodes the parts on a spare thread
        (``toolrerank_plugins._workers``) while this one encodes the queries and then runs the lexical parts (whose
        matching holds Python's lock), and searches every vector in one call after both
        (``DenseRetriever.search_side_by_side_then``; another vector part, by ``FirstStage``'s, searches the parts
        on the spare thread and the queries here); None when there are no parts, no vector part, or no spare thread
        may be used or is free (a dense part with ``part_vectors="word-map"`` needs none: it maps the parts' vectors
        on this thread after the lexical parts)."""
        vector = self._vector_part()
        if vector is None or not any(parts):
            return None

        def lexical_parts() -> dict[str, tuple[list[list[Hit]], list[list[list[Hit]]]]]:
            return {n: p.search_with_parts(queries, parts, deep) for n, p in self._parts.items() if p is not vector}

        # dense: the lexical parts after this thread's encode, then one search of every vector
        side = vector.search_side_by_side_then(queries, parts, deep, lexical_parts)
        if side is None:
            return None
        vector_whole, vector_parts, lexical = side
        whole: dict[str, list[list[Hit]]] = {}
        by_part: dict[str, list[list[list[Hit]]]] = {}
        for name, part in self._parts.items():  # in the parts' order: the fusion reads them in it
            if part is vector:
                whole[name], by_part[name] = vector_whole, vector_parts
            else:
                whole[name], by_part[name] = lexical[name]
        return whole, by_part

    def _fuse(self, ranked: Mapping[str, list[Hit]], depth: int) -> list[Hit]:
        """One fused ranking of each part's hits; a single ranking (a lexical-only sub-query) is kept as it is,
        with its part's score."""
        if len(ranked) == 1:
            ((name, hits),) = ranked.items()
            return [Hit(h.id, h.score, {name: h.score}) for h in hits[:depth]]
        c = self.config
        rankings = [(hits, self.weight(n)) for n, hits in ranked.items()]
        if c.fusion == "rrf":
            fused = rrf_fuse(rankings, rrf_k=c.rrf_k, top_k=depth)
        elif c.fusion == "agreement":
            fused = agreement_fuse(
                rankings,
                rrf_k=c.rrf_k,
                top_k=depth,
                depth=c.agreement_depth,
                min_shared=c.agreement_min,
                rrf_weight=c.disagreement_rrf_weight,
                confidence_weighted=c.confidence_weighted,
            )
        else:
            fused = score_fuse(rankings, normalization=c.fusion, top_k=depth, confidence_weighted=c.confidence_weighted)
        scores = [(n, {h[0]: h[1] for h in hits}) for n, hits in ranked.items()]
        return [Hit(h[0], h[1], {n: m[h[0]] for n, m in scores if h[0] in m}) for h in fused]

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        part = self._vector_part()
        return part.embeddings_for(ids) if part is not None else None

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray | None:
        part = self._vector_part()
        return part.query_vectors(queries) if part is not None else None

    def embedding_cache(self) -> dict[str, np.ndarray]:
        part = self._vector_part()
        return part.embedding_cache() if part is not None else {}

    def set_document_transform(self, transform: DocTransform | None) -> None:
        for name, part in self._parts.items():
            if part.has_embeddings:  # a part shared with another first stage keeps its vectors: change a copy
                changed = part.copy()
                changed.set_document_transform(transform)
                self._parts = {**self._parts, name: changed}
                return

    def save(self, root: Path) -> None:
        for part in self._parts.values():
            part.save(root)

    @classmethod
    def load(
        cls,
        root: Path,
        config: Any,
        *,
        embedder: Embedder | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> HybridRetriever:
        """``config`` is the engine config: its ``hybrid`` section names the parts, each part reads its own."""
        return cls(
            config.hybrid,
            parts={n: get_first_stage_type(n).open(root, config, embedder, resources) for n in config.hybrid.parts},
        )


def _build(config: Any, embedder: Embedder | None, *, resources: Mapping[str, Any] | None = None) -> HybridRetriever:
    parts = {n: get_first_stage_type(n).make(config, embedder, resources) for n in config.hybrid.parts}
    return HybridRetriever(config.hybrid, parts=parts)


def _attach(
    config: Any, embedder: Embedder | None, resources: Mapping[str, Any] | None, version: int | None
) -> HybridRetriever:
    parts = {}
    for name in config.hybrid.parts:
        attach = get_first_stage_type(name).attach
        if attach is None:
            raise ConfigError(
                f"hybrid part {name!r} keeps its index in this process only and cannot open a shared store; use parts "
                "that keep theirs in the store (e.g. pgvector and pg_bm25)"
            )
        parts[name] = attach(config, embedder, resources, version)
    return HybridRetriever(config.hybrid, parts=parts)


def _files(config: Any) -> list[str]:
    return [f for n in config.hybrid.parts for f in get_first_stage_type(n).files(config)]


FIRST_STAGE_TYPE = FirstStageType(
    build=_build,
    load=lambda root, config, embedder, resources: HybridRetriever.load(
        root, config, embedder=embedder, resources=resources
    ),
    required_files=_files,
    resources=True,  # handed on to the parts that take them
    attach=_attach,
)


def first_stage_from_parts(name: str, parts: Mapping[str, FirstStage], config: Any) -> FirstStage:
    """A single first stage, or a ``hybrid`` of ``config.hybrid.parts``, over already-built retrievers
    (``FirstStage.parts`` of another engine), so first stages can be compared without re-encoding; ``config``
    is the engine config (its ``hybrid`` section is used for fusion).

    Raises:
        ConfigError: ``parts`` lacks a retriever the requested first stage needs.
    """
    need = list(config.hybrid.parts) if name == "hybrid" else [name]
    missing = [n for n in need if n not in parts]
    if missing:
        raise ConfigError(f"cannot make first stage {name!r} from parts {sorted(parts)} (missing {missing})")
    if name == "hybrid":
        return HybridRetriever(config.hybrid, parts={n: parts[n] for n in need})
    return parts[name]
