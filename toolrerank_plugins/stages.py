"""What a stage is, what it may use, and how it is named in a config: read this file to write a stage.

A *stage* reorders (or, for LLM stages, re-retrieves) the candidate list of one query after the first
stage. Subclass :class:`Stage` and implement :meth:`Stage.run`; everything else has a working default.
A stage never sees the engine: it gets a :class:`StageContext`, which exposes exactly what stages may use
(the catalog, the text models see, the bi-encoder, first-stage retrieval, cached document embeddings and
the first-stage depth).

Stages are named in :class:`~toolrerank_plugins.config.EngineConfig` by ``type`` (a :class:`StageSpec`)
and built from the registry; an unknown type raises and lists the known ones. Stage types from other
modules register lazily by ``"module:attr"`` so that importing the core stays light.

Example:
    >>> from pydantic import BaseModel
    >>> class Reverse(Stage):
    ...     name = "reverse"
    ...     def run(self, query, candidates, ctx, trace):
    ...         trace["n"] = len(candidates)
    ...         return list(reversed(candidates))
    >>> class NoParams(BaseModel):
    ...     pass
    >>> register_stage_type("reverse_doc", StageType(NoParams, lambda cfg, ctx, path: Reverse()), replace=True)
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "reverse_doc"}]))
    >>> len(engine.search("send an email", top_k=3))
    3
"""

from __future__ import annotations

import asyncio
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import Registry
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import Edge, ScoredTool, ToolSpec
from toolrerank_plugins.retrieval.base import DocTransform

if TYPE_CHECKING:
    import numpy as np

    from toolrerank_plugins.catalog import Catalog
    from toolrerank_plugins.encoders import Embedder

__all__ = [
    "DocTransform",
    "LearnResult",
    "QueryParts",
    "Stage",
    "StageContext",
    "StageSpec",
    "StageType",
    "as_stage",
    "build_stage",
    "get_stage_type",
    "known_stage_types",
    "register_stage_type",
]


class StageSpec(ConfigModel):
    """One stage of a pipeline: its registered ``type`` and that type's parameters."""

    model_config = ConfigDict(extra="forbid")

    type: str
    name: str | None = Field(None, description="label used in stage_scores/trace; defaults to type")
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.type


class StageContext(ABC):
    """Everything a stage may use. The engine implements it; a stage never touches engine attributes.

    ``depth`` is the first-stage depth (how many candidates the stages receive); ``top_k`` is how many results
    the running search's caller asked for (None outside a search); ``has_embeddings`` says whether the first
    stage holds document vectors (dense or hybrid), which is what a :meth:`Stage.document_transform` changes.
    """

    @property
    @abstractmethod
    def catalog(self) -> Catalog: ...

    @property
    @abstractmethod
    def embedder(self) -> Embedder:
        """The bi-encoder (loaded on first use when the first stage has none)."""

    @property
    @abstractmethod
    def depth(self) -> int: ...

    @property
    @abstractmethod
    def has_embeddings(self) -> bool: ...

    @property
    @abstractmethod
    def encoder_path(self) -> str | None:
        """The dense encoder's configured model (name or folder) when the first stage is dense-based."""

    @property
    @abstractmethod
    def llm(self) -> Any:
        """An LLM the user attached to the engine (``engine.llm = ...``), or None."""

    @abstractmethod
    def render(self, spec: ToolSpec) -> str:
        """The text models see for ``spec``."""

    @abstractmethod
    def retrieve(self, queries: Sequence[str], depth: int) -> list[list[ScoredTool]]:
        """First-stage retrieval only, one ranking per query (for rewritten or generated queries)."""

    @abstractmethod
    def cached_embeddings(self, ids: Sequence[str]) -> np.ndarray | None:
        """Raw document embeddings of ``ids`` from the first stage's index, or None if any is not there."""

    def embeddings(self, ids: Sequence[str]) -> np.ndarray:
        """Raw document embeddings of ``ids``: cached rows where the first stage has them, else encoded."""
        cached = self.cached_embeddings(ids)
        if cached is not None:
            return cached
        return self.embedder.encode([self.render(self.catalog[i]) for i in ids])

    @abstractmethod
    def known_names(self) -> frozenset[str]:
        """Lower-cased API and tool names of the catalog (cached until the catalog changes)."""

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors as the dense first stage encodes queries (reusing those of its latest searches, so a
        stage that needs the query's vector costs no second encoding); the embedder's otherwise."""
        return self.embedder.encode(list(queries))

    @property
    def top_k(self) -> int | None:
        """How many results the caller of the running search asked for (``search(query, top_k)``; the
        ``top_k`` of ``rerank``), or None when no search is running or the caller set no limit. A stage whose
        budget scales with what the caller sees (the ``tgr`` stage's declared chains) reads it; the
        candidates it gets are deeper (``depth``)."""
        return None


@dataclass(frozen=True)
class LearnResult:
    """What a stage learned from usage records (:meth:`Stage.learn`) that the engine applies to its catalog:
    tool keys to mark as seen, and the edges of ``edge_origin`` (they replace the catalog's edges of that
    origin), plus a report for the caller."""

    seen_tools: frozenset[str] = frozenset()
    edges: tuple[Edge, ...] = ()
    edge_origin: str | None = None
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueryParts:
    """Sub-queries a stage wants the first stage to retrieve together with the query, in the same call
    (:meth:`Stage.query_parts`): the requests of a multi-request message, say. The stage reads their
    rankings with :meth:`StageContext.retrieve` as usual; they are already there, not retrieved again.

    ``pooled``: the first stage may search the whole query with the length-weighted mean of its parts'
    vectors instead of encoding the query itself (each text encoded once instead of twice; the lexical
    part still matches the whole query's words).

    ``lexical``: a first stage with a lexical part (hybrid) matches the parts with it alone: they cost no
    encoding, and the whole query is searched as usual. A first stage without one ignores the flag.
    """

    parts: tuple[str, ...]
    pooled: bool = False
    lexical: bool = False


class Stage(ABC):
    """Reorders the candidates of one query. Only :meth:`run` is required.

    ``trace`` is this stage's own dict in the query's trace: write what a user asking "why?" needs
    (and LLM usage counters). The engine calls the other methods at these moments:

    - :meth:`arun`: the async twin of :meth:`run` (default: :meth:`run` in a worker thread);
    - :meth:`on_index`: after the index is built, loaded or changed (add/update/remove). For a change,
      the engine calls it on a shallow copy (:func:`copy.copy`) of the stage while searches keep using
      the stage as it was (copy-on-write): assign new objects to attributes rather than changing
      shared ones in place (TGR copies its graph before updating it). If it raises, the change is
      undone;
    - :meth:`document_transform`: after every :meth:`on_index`; a stage that changes document vectors
      (TGR's graph convolution) returns ``f(ids, embeddings) -> embeddings`` and the engine installs it
      in the first stage (which re-indexes from its cached raw vectors);
    - :meth:`save` / the factory's ``path``: the stage's own files in the saved engine directory;
    - :meth:`query_parts`: before the first stage runs, so that sub-queries the stage will retrieve are
      searched in the same first-stage call as the query (the first stage in the pipeline that returns
      parts gets them).
    """

    name: str = "stage"
    #: What this stage's score in ``stage_scores`` (and the final score, when it is the last stage) means; shown by
    #: ``--explain`` and :meth:`Engine.score_scales`. Scores of different stages are on different scales.
    score_scale: str = "this stage's score: higher is better; compare it within one query only"

    @property
    def uses_top_k(self) -> bool:
        """Whether this stage ranks differently for a different ``top_k`` (it reads ``ctx.top_k``): then the top
        5 of a ``top_k=10`` search need not be a ``top_k=5`` search's, and :func:`evaluate` searches once per k."""
        return False

    @abstractmethod
    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]: ...

    async def arun(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        return await asyncio.to_thread(self.run, query, candidates, ctx, trace)

    @property
    def native_async(self) -> bool:
        """True when the subclass has its own :meth:`arun` (e.g. awaiting an LLM)."""
        return type(self).arun is not Stage.arun

    def on_index(self, ctx: StageContext) -> None:
        return None

    def document_transform(self) -> DocTransform | None:
        return None

    def save(self, path: Path) -> None:
        return None

    def query_parts(self, query: str) -> QueryParts | None:
        """Sub-queries of ``query`` this stage will retrieve (``ctx.retrieve``), to be searched with the
        query in one first-stage call; None (the default): none."""
        return None

    def learn(self, records: Sequence[Any], ctx: StageContext, *, forget: Iterable[str] = ()) -> LearnResult | None:
        """Learn from usage records (``Engine.learn``); None: this stage does not learn from usage (default).

        Called on a shallow copy of the stage (copy-on-write, as :meth:`on_index`): assign new objects.
        """
        return None


class _DuckStage(Stage):
    """Wraps an object that has ``run`` but does not subclass :class:`Stage` (deprecated)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "stage")

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        return self.inner.run(query, candidates, ctx, trace)  # type: ignore[no-any-return]

    async def arun(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        inner_arun = getattr(self.inner, "arun", None)
        if inner_arun is None:
            return await super().arun(query, candidates, ctx, trace)
        return await inner_arun(query, candidates, ctx, trace)  # type: ignore[no-any-return]

    @property
    def native_async(self) -> bool:
        return getattr(self.inner, "arun", None) is not None

    def on_index(self, ctx: StageContext) -> None:
        hook = getattr(self.inner, "on_index", None)
        if hook is not None:
            hook(ctx)

    def save(self, path: Path) -> None:
        saver = getattr(self.inner, "save", None)
        if saver is not None:
            saver(path)


def as_stage(obj: Any) -> Stage:
    """``obj`` if it is a :class:`Stage`; an object with a ``run`` method is wrapped with a deprecation
    warning (stages should subclass :class:`Stage`); anything else is a :class:`ConfigError`."""
    if isinstance(obj, Stage):
        return obj
    if callable(getattr(obj, "run", None)):
        warnings.warn(
            f"{type(obj).__name__} does not subclass toolrerank_plugins.stages.Stage; duck-typed stages are "
            "deprecated and will stop working in a later release",
            DeprecationWarning,
            stacklevel=3,
        )
        return _DuckStage(obj)
    raise ConfigError(f"{type(obj).__name__} is not a stage: subclass toolrerank_plugins.stages.Stage")


@dataclass(frozen=True)
class StageType:
    """How to build a stage: its pydantic config model and a factory.

    ``factory(config, ctx, path)`` gets the engine's :class:`StageContext` and ``path`` (the stage's folder)
    when loading a saved engine, else None.
    """

    config_model: type[BaseModel]
    factory: Callable[[Any, StageContext, Path | None], Stage]


#: Entry-point group through which installed distributions add stage types.
STAGE_ENTRY_POINTS = "toolrerank_plugins.stages"

_STAGE_TYPES: Registry[StageType] = Registry(
    "stage type",
    StageType,
    {  # lazily imported stage types shipped with the library ("module:attribute")
        "toolrerank": "toolrerank_plugins.rerank.stage:STAGE_TYPE",
        "tgr": "toolrerank_plugins.graph.stage:STAGE_TYPE",
        "multi_intent": "toolrerank_plugins.rerank.intents:STAGE_TYPE",
        "tool_evidence": "toolrerank_plugins.rerank.tool_evidence:STAGE_TYPE",
        "query_generation": "toolrerank_plugins.llm.query_generation:STAGE_TYPE",
        "qta_rewrite": "toolrerank_plugins.llm.qta:STAGE_TYPE",
        "iterative_feedback": "toolrerank_plugins.llm.feedback:STAGE_TYPE",
        "usage_memory": "toolrerank_plugins.usage.stage:STAGE_TYPE",
    },
    plural="types",
    group=STAGE_ENTRY_POINTS,
)


def register_stage_type(name: str, stage_type: StageType | str, *, replace: bool = False) -> None:
    """Register a stage type under an exact name (``"module:attr"`` strings import lazily)."""
    _STAGE_TYPES.register(name, stage_type, replace=replace)


def known_stage_types() -> list[str]:
    return _STAGE_TYPES.names()


def get_stage_type(name: str) -> StageType:
    return _STAGE_TYPES.get(name)


def build_stage(spec: StageSpec, ctx: StageContext, path: Path | None = None) -> Stage:
    st = get_stage_type(spec.type)
    try:
        cfg = st.config_model.model_validate(spec.params)
    except Exception as exc:
        raise ConfigError(f"stage {spec.label!r} ({spec.type}): invalid params: {exc}") from exc
    stage = as_stage(st.factory(cfg, ctx, path))
    stage.name = spec.label
    return stage
