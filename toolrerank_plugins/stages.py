"""The stage interface and registry: everything after first-stage retrieval is a stage.

A stage reorders (or, for LLM stages, re-retrieves) the candidate list of one query. Stages are named in
:class:`~toolrerank_plugins.engine.EngineConfig` by ``type`` and built from the registry; an unknown type
raises and lists the known ones. Stage types from other modules register lazily by ``"module:attr"`` so
that importing the core stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import ScoredTool

if TYPE_CHECKING:
    from toolrerank_plugins.engine import Engine


class StageSpec(BaseModel):
    """One stage of a pipeline: its registered ``type`` and that type's parameters."""

    model_config = ConfigDict(extra="forbid")

    type: str
    name: str | None = Field(None, description="label used in stage_scores/trace; defaults to type")
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.type


@runtime_checkable
class Stage(Protocol):
    """Reorders the candidates of one query.

    ``trace`` is this stage's own dict in the query's trace: write what a user asking "why?" needs
    (and LLM usage counters). Optional methods an engine calls when present:
    ``arun`` (async twin), ``save(path)``, ``on_index(engine)`` (after the index is built or changed).
    """

    name: str

    def run(
        self, query: str, candidates: list[ScoredTool], engine: Engine, trace: dict[str, Any]
    ) -> list[ScoredTool]: ...


@dataclass(frozen=True)
class StageType:
    """How to build a stage: its pydantic config model and a factory.

    ``factory(config, engine, path)`` gets ``path`` (a folder) when loading a saved engine, else None.
    """

    config_model: type[BaseModel]
    factory: Callable[[Any, Engine, Path | None], Stage]


_REGISTRY: dict[str, StageType | str] = {
    # Lazily imported stage types shipped with the library ("module:attribute").
    "toolrerank": "toolrerank_plugins.rerank.stage:STAGE_TYPE",
    "tgr": "toolrerank_plugins.graph.stage:STAGE_TYPE",
    "query_generation": "toolrerank_plugins.llm.query_generation:STAGE_TYPE",
    "qta_rewrite": "toolrerank_plugins.llm.qta:STAGE_TYPE",
    "iterative_feedback": "toolrerank_plugins.llm.feedback:STAGE_TYPE",
}


def register_stage_type(name: str, stage_type: StageType | str, *, replace: bool = False) -> None:
    """Register a stage type under an exact name (``"module:attr"`` strings import lazily)."""
    if name in _REGISTRY and not replace:
        raise ConfigError(f"stage type {name!r} is already registered; pass replace=True to override")
    _REGISTRY[name] = stage_type


def known_stage_types() -> list[str]:
    return sorted(_REGISTRY)


def get_stage_type(name: str) -> StageType:
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"unknown stage type {name!r}; known types: {', '.join(known_stage_types())}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"stage type {name!r} could not be imported from {module!r}: {exc}") from exc
        if not isinstance(entry, StageType):
            raise ConfigError(f"{module}:{attr} is not a StageType")
        _REGISTRY[name] = entry
    return entry


def build_stage(spec: StageSpec, engine: Engine, path: Path | None = None) -> Stage:
    st = get_stage_type(spec.type)
    try:
        cfg = st.config_model.model_validate(spec.params)
    except Exception as exc:
        raise ConfigError(f"stage {spec.label!r} ({spec.type}): invalid params: {exc}") from exc
    stage = st.factory(cfg, engine, path)
    stage.name = spec.label
    return stage
