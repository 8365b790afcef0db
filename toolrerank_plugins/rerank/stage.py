"""The ``toolrerank`` stage: adaptive truncation -> cross-encoder -> hierarchy-aware reranking.

Config (``StageSpec(type="toolrerank", params={...})``), see :class:`ToolRerankConfig`. Ablations of the
paper map to settings:

* Rerank-m: ``m_s = m_u = m`` and ``classification="none"``.
* ToolRerank_none/single/multi/oracle: ``classification`` = ``none`` / ``single`` / ``multi`` / ``oracle``.
* extended API list on/off: ``extended`` (and ``extend_seen`` to also extend seen tools).

Without a trained cross-encoder (``model_path`` unset) the stage ranks the truncated list by first-stage
scores mapped to [0, 1] (``fallback_scores``): ``relative`` divides by the query's best score (so
``tau_s = 0.8`` means "within 80 % of the top hit"), ``raw`` clips the raw score into [0, 1] (dense
cosine). The hierarchy algorithms then run on those scores unchanged.

With a model, ``first_stage_weight`` = w > 0 interpolates (not in the paper): the score is
``(1 - w) * cross_encoder + w * first_stage`` with the first-stage score mapped as above (relative to the
query's best candidate). A cross-encoder trained on little in-domain data is a weak ranker on its own;
the interpolation keeps the first stage's evidence (ToolBench: docs/benchmarks/toolrerank.md). APIs that
only the extended list brings in have no first-stage score and get 0 for that part.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.records import LabelledQuery, ScoredTool, ToolSpec
from toolrerank_plugins.rerank.classifier import QueryType, QueryTypeClassifier, query_type
from toolrerank_plugins.rerank.cross_encoder import Reranker, RerankerBackend
from toolrerank_plugins.rerank.hierarchy import multi_tool_rerank, single_tool_rerank
from toolrerank_plugins.rerank.truncation import adaptive_truncate
from toolrerank_plugins.stages import Stage, StageContext, StageType

logger = logging.getLogger(__name__)

STAGE_FORMAT_VERSION = 1
_TYPE_MEMO_SIZE = 4096  # classifier answers kept per stage (cleared when full)

Classification = Literal["auto", "classifier", "none", "single", "multi", "oracle"]


class ToolRerankConfig(RenamedFieldsModel):
    """Knobs of the ``toolrerank`` stage (paper notation)."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = Field(None, description="reranker folder (`toolrerank train reranker`); None: no model")
    classifier_path: str | None = Field(None, description="classifier folder (`toolrerank train classifier`)")
    m_s: int = Field(10, ge=1, description="truncation depth for candidates of seen tools")
    m_u: int = Field(30, ge=1, description="truncation depth for candidates of unseen tools")
    tau_s: float = Field(0.8, ge=0.0, le=1.0, description="Algorithm 1: score above which a tool is preferred")
    tau_m: float = Field(0.8, ge=-1.0, le=1.0, description="Algorithm 2: cosine above which results are linked")
    n: int = Field(2, ge=1, description="Algorithm 2: results taken first from each connected component")
    top_k: int = Field(
        5, ge=1, description="results handed to the LLM (was k); the metric cut-off `toolrerank tune` optimises"
    )
    classification: Classification = Field(
        "auto", description="auto: classifier if given else none; none = no hierarchy step (Rerank-m)"
    )
    extended: bool = Field(True, description="Algorithm 1: extend preferred unseen tools with all their APIs")
    extend_seen: bool = Field(False, description="also extend preferred tools that were seen in training")
    max_extended_apis: int = Field(64, ge=0, description="cap on APIs added per query by the extended list")
    oracle_queries: str | None = Field(None, description="queries.jsonl giving gold query types (oracle mode)")
    fallback_scores: Literal["relative", "raw"] = Field(
        "relative", description="how first-stage scores map to [0, 1] (no model, or first_stage_weight > 0)"
    )
    first_stage_weight: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="score = (1 - w) * cross-encoder + w * first-stage score in [0, 1]; 0 = the paper (model only)",
    )
    similarity: Literal["embeddings", "tool_only"] = Field(
        "embeddings", description="Algorithm 2 edges: same tool or cosine > tau_m, or same tool only"
    )
    device: str = "auto"
    batch_size: int = Field(64, ge=1)
    max_length: int | None = Field(None, ge=8, description="pair length; None: the length the model was trained with")
    backend: RerankerBackend = Field(
        "torch",
        description="what runs the cross-encoder: torch (sentence-transformers), onnx or onnx-int8 (ONNX Runtime on "
        "the CPU, exported here from the model folder; the [fast] extra)",
    )
    threads: int | None = Field(
        None, ge=1, description="cross-encoder intra-op threads on a CPU; None: chosen per call by measured speed"
    )

    renamed_fields: ClassVar[Mapping[str, str]] = {"k": "top_k"}

    @property
    def k(self) -> Any:
        """Deprecated name of :attr:`top_k`."""
        warn_renamed("ToolRerankConfig", "k", "top_k")
        return self.top_k

    @model_validator(mode="after")
    def _check(self) -> ToolRerankConfig:
        if self.classification == "classifier" and not self.classifier_path:
            raise ValueError(
                "classification='classifier' needs classifier_path (train one: toolrerank train classifier)"
            )
        if self.classification == "oracle" and not self.oracle_queries:
            raise ValueError("classification='oracle' needs oracle_queries (a queries.jsonl with relevant ids)")
        return self


class ToolRerankStage(Stage):
    """ToolRerank as an engine stage.

    Args:
        config: the stage config.
        ctx: the stage context of the engine it runs in (catalog, renderer, embedder, cached embeddings).
        reranker: the cross-encoder (or any :class:`Reranker`); ``None`` ranks by first-stage scores.
        classifier: the query-type classifier for ``classification="auto"/"classifier"``.

    Example:
        >>> from toolrerank_plugins.engine import Engine, EngineConfig
        >>> from toolrerank_plugins.testing import FakeCrossEncoder, tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> ctx = engine.context
        >>> stage = ToolRerankStage(ToolRerankConfig(classification="single"), ctx, reranker=FakeCrossEncoder())
        >>> out = stage.run("weather forecast in a city", ctx.retrieve(["weather forecast in a city"], 10)[0],
        ...                 ctx, {})
        >>> out[0].tool.tool
        'SkyCast'
    """

    name = "toolrerank"
    score_scale = "the cross-encoder's relevance score of (request, API text), or the first stage's when none is "\
        "trained; interpolated with the first stage's by first_stage_weight"

    def __init__(
        self,
        config: ToolRerankConfig,
        ctx: StageContext,
        *,
        reranker: Reranker | None = None,
        classifier: QueryTypeClassifier | None = None,
    ) -> None:
        self.config = config
        self.reranker = reranker
        self.classifier = classifier
        self.oracle_types: dict[str, QueryType] = {}
        self._tool_index: dict[str, list[str]] = {}
        self._emb_memo: dict[str, np.ndarray] = {}
        self._type_memo: dict[tuple[int, str], QueryType] = {}
        self._shared_vectors: dict[int, bool] = {}  # classifier id -> the first stage's query vectors are its own
        if config.classification == "classifier" and classifier is None:
            raise ConfigError("classification='classifier' but no classifier was loaded")
        if config.classification == "oracle" and config.oracle_queries:
            from toolrerank_plugins.loaders import load_queries

            self.set_oracle(load_queries(config.oracle_queries), ctx)

    # -- engine hooks ----------------------------------------------------------------------------
    def on_index(self, ctx: StageContext) -> None:
        """Rebuild the tool -> APIs index (extended list); forget embeddings encoded for uncached APIs."""
        self._tool_index = {key: [s.id for s in specs] for key, specs in ctx.catalog.tools().items()}
        self._emb_memo = {}  # a new dict: a copy of this stage may share the old one (see Stage.on_index)

    def set_oracle(self, queries: Iterable[LabelledQuery], ctx: StageContext) -> None:
        """Gold query types (by query text) for ``classification="oracle"``."""
        self.oracle_types.update({q.query: query_type(q, ctx.catalog) for q in queries})

    # -- pieces ----------------------------------------------------------------------------------
    def seen_tools(self, ctx: StageContext) -> frozenset[str]:
        """Tools seen in training: recorded with the reranker, plus any the catalog was told about."""
        from_model = frozenset(getattr(self.reranker, "seen_tools", frozenset()) or ())
        return from_model | ctx.catalog.seen_tools

    def _fallback(self, items: list[ScoredTool], top: float | None = None) -> list[float]:
        """First-stage scores in [0, 1]; ``relative`` divides by ``top`` (default: the best of ``items``)."""
        raw = np.array([max(float(c.score), 0.0) for c in items])
        if self.config.fallback_scores == "raw":
            return np.clip(raw, 0.0, 1.0).tolist()
        if top is None:
            top = float(raw.max()) if len(raw) else 0.0
        return np.clip(raw / top, 0.0, 1.0).tolist() if top > 0 else [0.0] * len(items)

    def _score(
        self, query: str, items: list[ScoredTool], ctx: StageContext, *, first_stage_top: float | None = None
    ) -> list[float]:
        if self.reranker is None:
            return self._fallback(items, first_stage_top)
        scores = self.reranker.score(query, [ctx.render(c.tool) for c in items], batch_size=self.config.batch_size)
        if len(scores) != len(items):
            raise ValueError(f"reranker returned {len(scores)} scores for {len(items)} texts")
        w = self.config.first_stage_weight
        if w > 0:
            first = self._fallback(items, first_stage_top)
            return [(1.0 - w) * float(s) + w * f for s, f in zip(scores, first)]
        return [float(s) for s in scores]

    def classify(self, query: str, ctx: StageContext | None = None) -> QueryType | None:
        """The query type the stage will use (``None``: no hierarchy step).

        With ``ctx``, a classifier trained on the engine's own bi-encoder reads the query vector the first
        stage searched with (:meth:`StageContext.query_vectors`) instead of encoding the query again."""
        mode = self.config.classification
        if mode == "none":
            return None
        if mode in ("single", "multi"):
            return mode  # type: ignore[return-value]
        if mode == "oracle":
            if query not in self.oracle_types:
                raise ConfigError(f"oracle classification has no gold type for query {query[:80]!r}")
            return self.oracle_types[query]
        if self.classifier is None:  # auto without a classifier
            return None
        key = (id(self.classifier), query)  # a swapped classifier never reuses old answers
        found = self._type_memo.get(key)  # tuning grids classify the same queries hundreds of times
        if found is None:
            # concurrent searches may clear the memo at any time: keep the answer in a local, never re-read it
            found = self._predict_type(query, ctx)
            if len(self._type_memo) >= _TYPE_MEMO_SIZE:
                self._type_memo.clear()
            self._type_memo[key] = found
        return found

    def _predict_type(self, query: str, ctx: StageContext | None) -> QueryType:
        classifier = self.classifier
        assert classifier is not None
        if ctx is None or self._shared_vectors.get(id(classifier)) is False:
            return classifier.predict([query])[0]
        vector = ctx.query_vectors([query])
        if id(classifier) not in self._shared_vectors:
            # the first stage's query vectors stand in for the classifier's own encode only when they are the
            # same vectors (same model, no query prefix): checked once, on the first query
            own = classifier.embedder.encode([query])
            same = own.shape == vector.shape and bool(np.allclose(own, vector, atol=1e-3))
            self._shared_vectors[id(classifier)] = same
            vector = vector if same else own
        proba = classifier.proba_from_embeddings(np.asarray(vector))
        return "multi" if float(proba[0]) > classifier.threshold else "single"

    def _embeddings(self, items: list[ScoredTool], ctx: StageContext) -> np.ndarray:
        cached = ctx.cached_embeddings([c.id for c in items])
        if cached is not None:
            return cached
        missing = [c for c in items if c.id not in self._emb_memo]
        if missing:
            vecs = ctx.embedder.encode([ctx.render(c.tool) for c in missing])
            for c, v in zip(missing, vecs):
                self._emb_memo[c.id] = v
        return np.stack([self._emb_memo[c.id] for c in items]).astype(np.float32)

    def _extend(
        self, query: str, tools: list[str], present: set[str], ctx: StageContext, first_scores: dict[str, float]
    ) -> list[tuple[ScoredTool, float]]:
        budget = self.config.max_extended_apis
        specs: list[ToolSpec] = []
        for key in tools:
            for tid in self._tool_index.get(key, ()):
                if tid not in present and len(specs) < budget:
                    spec = ctx.catalog.get(tid)
                    if spec is not None:
                        specs.append(spec)
        if not specs:
            return []
        first_top = max(first_scores.values(), default=0.0)
        # an extended API the first stage ranked below the truncation keeps its first-stage score
        items = [ScoredTool(s, first_scores.get(s.id, 0.0), 0) for s in specs]
        if self.reranker is None:
            return [(c, 0.0) for c in items]
        scores = self._score(query, items, ctx, first_stage_top=first_top)
        return list(zip(items, scores))

    # -- the stage -------------------------------------------------------------------------------
    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        """Rerank one query's first-stage candidates (every candidate is kept)."""
        if not candidates:
            trace["truncated_to"] = 0
            return []
        if not self._tool_index:
            self.on_index(ctx)
        cfg = self.config
        seen = self.seen_tools(ctx)
        kept, rest = adaptive_truncate(candidates, lambda c: c.tool.tool_key in seen, cfg.m_s, cfg.m_u)
        first_scores = {c.id: max(float(c.score), 0.0) for c in candidates}
        scores = self._score(query, kept, ctx, first_stage_top=max(first_scores.values()))
        order = sorted(range(len(kept)), key=lambda i: -scores[i])  # stable: ties keep first-stage order
        reranked = [kept[i] for i in order]
        rscores = [scores[i] for i in order]
        score_of = {c.id: s for c, s in zip(reranked, rscores)}
        qtype = self.classify(query, ctx)
        trace.update(
            {
                "scorer": "cross-encoder" if self.reranker is not None else f"first-stage ({cfg.fallback_scores})",
                "truncated_to": len(kept),
                "kept_seen": sum(c.tool.tool_key in seen for c in kept),
                "query_type": qtype or "none",
            }
        )
        final: list[ScoredTool]
        if qtype == "single":
            present = {c.id for c in reranked}
            ext_scores: dict[str, float] = {}

            def extend(tools: list[str]) -> list[tuple[ScoredTool, float]]:
                pairs = self._extend(query, tools, present, ctx, first_scores)
                ext_scores.update({c.id: s for c, s in pairs})
                return pairs

            res = single_tool_rerank(
                reranked,
                rscores,
                cfg.tau_s,
                extend=extend if cfg.extended else None,
                should_extend=None if cfg.extend_seen else (lambda key: key not in seen),
            )
            trace.update({"preferred_tools": res.preferred_tools, "extended_tools": res.extended_tools})
            if res.added_ids:
                trace["added"] = res.added_ids
                added = set(res.added_ids)
                rest = [c for c in rest if c.id not in added]  # pulled forward, not duplicated
                score_of.update(ext_scores)
            final = res.ranking
        elif qtype == "multi":
            emb = self._embeddings(reranked, ctx) if cfg.similarity == "embeddings" else None
            mres = multi_tool_rerank(reranked, rscores, emb, cfg.tau_m, cfg.n)
            trace.update({"components": len(mres.components), "selected": mres.selected})
            final = mres.ranking
        else:
            final = reranked
        out = [c.with_stage(self.name, score_of[c.id]) for c in final]
        return out + rest

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write the models (``reranker/``, ``classifier/``) and ``stage.json`` into ``path``."""
        path = Path(path)
        saver = getattr(self.reranker, "save", None)
        has_model = False
        if self.reranker is not None and saver is not None:
            saver(path / "reranker")
            has_model = True
        elif self.reranker is not None:
            logger.warning("reranker %r has no save(); the saved engine will load without it", self.reranker)
        if self.classifier is not None:
            self.classifier.save(path / "classifier")
        meta = {
            "format_version": STAGE_FORMAT_VERSION,
            "has_reranker": has_model,
            "has_classifier": self.classifier is not None,
            "seen_tools_from_model": sorted(getattr(self.reranker, "seen_tools", ()) or ()),
        }
        write_atomic(path / "stage.json", json.dumps(meta, indent=1))


def _read_stage_meta(meta_file: Path) -> dict[str, Any]:
    """``stage.json`` of a saved toolrerank stage, checked; PersistenceError names the file and the problem."""
    meta = read_json(meta_file, "stage file", advice="; re-save the engine")
    if not isinstance(meta, dict):
        raise PersistenceError(f"{meta_file}: corrupt stage file (expected an object); re-save the engine")
    version = meta.get("format_version")
    if type(version) is not int or version < 1:
        raise PersistenceError(f"{meta_file}: corrupt stage file (format_version {version!r:.40}); re-save the engine")
    if version > STAGE_FORMAT_VERSION:
        raise PersistenceError(f"{meta_file.parent}: toolrerank stage format is newer than this version; upgrade")
    for key in ("has_reranker", "has_classifier"):
        if not isinstance(meta.get(key), bool):
            raise PersistenceError(f"{meta_file}: corrupt stage file ({key!r} must be true or false)")
    seen = meta.get("seen_tools_from_model", [])
    if not isinstance(seen, list) or not all(isinstance(t, str) for t in seen):
        raise PersistenceError(f"{meta_file}: corrupt stage file ('seen_tools_from_model' must list tool names)")
    return meta


def _factory(cfg: ToolRerankConfig, ctx: StageContext, path: Path | None) -> ToolRerankStage:
    from toolrerank_plugins.rerank.cross_encoder import load_reranker

    model_dir: str | None = cfg.model_path
    clf_dir: str | None = cfg.classifier_path
    if path is not None:
        meta_file = Path(path) / "stage.json"
        if not meta_file.is_file():
            raise PersistenceError(f"{path}: saved toolrerank stage has no stage.json; re-save the engine")
        meta = _read_stage_meta(meta_file)
        if meta["has_reranker"]:
            model_dir = str(Path(path) / "reranker")
        if meta["has_classifier"]:
            clf_dir = str(Path(path) / "classifier")
    reranker = (
        load_reranker(
            model_dir,
            backend=cfg.backend,
            device=cfg.device,
            batch_size=cfg.batch_size,
            max_length=cfg.max_length,
            threads=cfg.threads,
        )
        if model_dir
        else None
    )
    classifier = QueryTypeClassifier.load(clf_dir, ctx.embedder) if clf_dir else None
    return ToolRerankStage(cfg, ctx, reranker=reranker, classifier=classifier)


STAGE_TYPE = StageType(config_model=ToolRerankConfig, factory=_factory)
