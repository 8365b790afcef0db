"""The engine's configuration, saved as ``config.json`` in an engine directory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.render import RenderConfig
from toolrerank_plugins.retrieval.base import get_first_stage_type, known_first_stages
from toolrerank_plugins.retrieval.bm25 import BM25Config
from toolrerank_plugins.retrieval.dense import DenseConfig
from toolrerank_plugins.retrieval.hybrid import HybridConfig
from toolrerank_plugins.stages import StageSpec

#: The built-in first stages; any name registered with :func:`~toolrerank_plugins.retrieval.base.register_first_stage`
#: is accepted too.
RetrieverName = str


#: The recommended pipeline's stages (see :data:`DEFAULT_PIPELINE`); ``EngineConfig().stages`` is a fresh copy.
DEFAULT_STAGES: tuple[Mapping[str, Any], ...] = (
    # the action verbs and named_tools off, and no tool_evidence stage: each fails the transfer rule with the
    # default's other parts, while the split at "and" before a verb passes with them (docs/benchmarks.md, "Does the
    # default transfer?"; benchmarks/transfer_fixed_point.py, step 8 on fourteen dev catalogs); set here rather than
    # as the fields' defaults so that engines saved with them keep them
    # min_words 4: chosen leaving one catalog out on fourteen dev catalogs (docs/benchmarks.md, "multi_intent's
    # request length"; step 9 of the transfer rule's search)
    {"type": "multi_intent", "params": {"actions": False, "named_tools": False, "min_words": 4}},
    {
        "type": "tgr",
        "params": {
            "propagate": False,
            # the catalog owner's declared edges followed to the end from top_k 10 up (issue 29, item 3)
            "expansion": {"enabled": True, "window": 2, "max_inserted": 2, "min_weight": 1.0, "declared_chains": True},
        },
    },
)


#: A setting ``EngineConfig.auto_tune`` may choose per catalog at build time.
AutoTuneKnob = Literal["hybrid.fusion", "bm25.stemmer"]


def _default_auto_tune() -> list[AutoTuneKnob]:
    # none since the thirteenth dev catalog (issue 29): the per-catalog stemmer no longer passes the transfer rule
    return []


def _default_stages() -> list[StageSpec]:
    import copy

    return [StageSpec.model_validate(copy.deepcopy(dict(spec))) for spec in DEFAULT_STAGES]


class EngineConfig(RenamedFieldsModel):
    """Everything that defines an engine; saved as ``config.json``.

    With nothing named, ``EngineConfig()`` is the recommended pipeline (:data:`DEFAULT_PIPELINE`, the ``default``
    preset): hybrid retrieval (reciprocal-rank fusion), then the ``multi_intent`` and ``tgr`` stages.
    Name a field to change that part only: ``EngineConfig(retriever="bm25")`` is the default's stages over BM25.
    The plain baselines are presets (``pipeline_config("bm25")``, ``"dense"``, ``"hybrid"``: one retriever, no
    stages).

    ``retriever`` names the first stage (``dense``, ``bm25``, ``hybrid`` or a registered backend); each
    retriever reads its own section (``dense``, ``bm25``, ``hybrid``; :meth:`section`). A backend registered
    with a ``config_model`` (see :class:`~toolrerank_plugins.retrieval.base.FirstStageType`) gets a section of
    its own name, validated by that model: ``EngineConfig(retriever="pgvector", pgvector={"table": "tools"})``.
    Any other unknown key is an error, as before.

    Example:
        >>> cfg = EngineConfig()
        >>> cfg.retriever, [s.type for s in cfg.stages]
        ('hybrid', ['multi_intent', 'tgr'])
        >>> EngineConfig(retriever="bm25", depth=30).retriever
        'bm25'
    """

    # "allow" only for the sections of registered first-stage backends: _backend_sections refuses any other key
    model_config = ConfigDict(extra="allow")

    retriever: RetrieverName = "hybrid"
    depth: int = Field(50, ge=1, description="first-stage depth: candidates handed to the stages (was candidate_k)")
    render: RenderConfig = Field(default_factory=RenderConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    hybrid: HybridConfig = Field(default_factory=HybridConfig)
    stages: list[StageSpec] = Field(default_factory=_default_stages)
    parallel_requests: bool = Field(
        True,
        description="encode a multi-request message's requests (multi_intent) on a spare thread while the calling "
        "thread encodes the message (then one search of all their vectors), when the process may use two CPUs or "
        "more and a spare thread is free (another search may hold it); the same results. ToolBench: 1.18x "
        "hybrid's p50 with one torch thread, 1.63x without the spare thread (docs/benchmarks.md, 'The default at "
        "hybrid's cost?'). False: every search on its calling thread alone",
    )
    auto_tune: list[AutoTuneKnob] = Field(
        default_factory=_default_auto_tune,
        description="settings Engine.build chooses for the catalog from pseudo-requests built from its own texts "
        "(no labels; retrieval.autotune); the chosen values are what the engine saves",
    )

    renamed_fields: ClassVar[Mapping[str, str]] = {"candidate_k": "depth"}

    @property
    def candidate_k(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("EngineConfig", "candidate_k", "depth")
        return self.depth

    @field_validator("retriever")
    @classmethod
    def _known_retriever(cls, value: str) -> str:
        known = known_first_stages()
        if value not in known:
            raise ValueError(f"unknown retriever {value!r}; known: {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _backend_sections(self) -> EngineConfig:
        extra = self.__pydantic_extra__ or {}
        for key, value in list(extra.items()):
            model = _section_model(key)
            if model is None:
                raise ValueError(
                    f"extra field {key!r} not permitted: not an EngineConfig field nor the section of a registered "
                    f"first stage (first stages: {', '.join(known_first_stages())})"
                )
            if not isinstance(value, model):
                extra[key] = model.model_validate(value)
        return self

    def section(self, name: str) -> Any:
        """The config section of first stage ``name``: the ``dense`` / ``bm25`` / ``hybrid`` field, or a
        backend's own section (its ``config_model``'s defaults when the config names none).

        Raises:
            ConfigError: ``name`` is no first stage with a config section.
        """
        if name in _BUILT_IN_SECTIONS:
            return getattr(self, name)
        extra = self.__pydantic_extra__ or {}
        if name in extra:
            return extra[name]
        model = _section_model(name)
        if model is None:
            raise ConfigError(f"first stage {name!r} has no config section")
        return model()


#: The first stages whose sections are fixed fields of :class:`EngineConfig`.
_BUILT_IN_SECTIONS = ("dense", "bm25", "hybrid")


def _section_model(name: str) -> type[BaseModel] | None:
    """The config model of first stage ``name``'s section (None: not a first stage, or one without a section)."""
    if name in _BUILT_IN_SECTIONS or name not in known_first_stages():
        return None
    return get_first_stage_type(name).config_model


#: The recommended pipeline, "what you get" when you name none: ``EngineConfig()`` itself, the ``default`` preset
#: of :mod:`~toolrerank_plugins.pipelines`, ``Engine.build(catalog)``, ``toolrerank index/eval/demo`` without
#: ``--pipeline`` and both adapters' constructors without a config. Zero training and no LLM; every part passes the
#: transfer rule with the others (docs/benchmarks.md, "Does the default transfer?"; the parts that fail it —
#: identifier splitting, stemming (everywhere, or where the catalog's pseudo-requests prefer it), the agreement
#: fusion, the action verbs, ``named_tools``, ``tool_evidence`` — are options): plain BM25 words, dense retrieval,
#: reciprocal-rank fusion of the two (``benchmarks/fusion_choice.py``: chosen leaving one catalog out on fourteen
#: dev catalogs), each request of a multi-request message retrieved on its own (``multi_intent``, with the split at
#: "and" before a verb), and the dependency graph's prerequisites of the two leading
#: results (``tgr``: declared edges and typed-id schema edges only, no graph convolution; settings chosen by
#: cross-validation in docs/benchmarks/tgr_closure.md).
#: The field defaults of :class:`EngineConfig`, ``BM25Config`` and ``HybridConfig`` are these values (a test checks).
DEFAULT_PIPELINE: Mapping[str, Any] = {
    "retriever": "hybrid",
    "bm25": {"tokenizer": "plain", "stemmer": None},
    "hybrid": {"fusion": "rrf", "confidence_weighted": True},
    "stages": list(DEFAULT_STAGES),
    "auto_tune": [],
}

#: The default with each request of a multi-request message matched by BM25 alone (``requests_by="lexical"``): the
#: requests cost no encoding, so a search costs about what plain hybrid's does; Recall@5 is lower on most sets
#: (docs/benchmarks/default_pipeline.md).
DEFAULT_FAST_PIPELINE: Mapping[str, Any] = {
    **DEFAULT_PIPELINE,
    "stages": [
        {**spec, "params": {**spec.get("params", {}), "requests_by": "lexical"}}
        if spec["type"] == "multi_intent"
        else spec
        for spec in DEFAULT_PIPELINE["stages"]
    ],
}


#: What each field meant when a saved ``config.json`` left it out: the values before ``EngineConfig()`` became the
#: recommended pipeline. Engines saved since then name every field; older ones (saved before the identifier
#: tokenizer, score fusion and stages existed, or by hand) keep the behaviour they were built with.
LEGACY_DEFAULTS: Mapping[str, Any] = {
    "retriever": "dense",
    "stages": [],
    "bm25": {"tokenizer": "plain", "stemmer": None},
    "hybrid": {"fusion": "rrf", "confidence_weighted": False},
    "auto_tune": [],
}


def saved_config(data: Any) -> EngineConfig:
    """The :class:`EngineConfig` of a saved engine's ``config.json`` ``engine`` section: fields it leaves out take
    :data:`LEGACY_DEFAULTS`, the values they had when such a file was written, not today's recommended ones.

    Example:
        >>> saved_config({"retriever": "bm25"}).bm25.tokenizer, saved_config({}).retriever
        ('plain', 'dense')
    """
    if not isinstance(data, Mapping):
        return EngineConfig.model_validate(data)  # pydantic names the type it expected
    filled = dict(data)
    for key, legacy in LEGACY_DEFAULTS.items():
        if key not in filled:
            filled[key] = legacy
        elif isinstance(legacy, Mapping) and isinstance(filled[key], Mapping):
            filled[key] = {**legacy, **filled[key]}
    return EngineConfig.model_validate(filled)


def default_config() -> EngineConfig:
    """A fresh :class:`EngineConfig` of the recommended pipeline (:data:`DEFAULT_PIPELINE`): ``EngineConfig()``.

    Example:
        >>> [s.type for s in default_config().stages]
        ['multi_intent', 'tgr']
    """
    return EngineConfig()
