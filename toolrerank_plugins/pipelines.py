"""Named pipelines (engine config presets) for ``--pipeline NAME`` and for Python.

A name resolves to an :class:`EngineConfig`; a path to a JSON file holding an EngineConfig works too. Every
bundled preset is plain data in :data:`PRESETS`, registered when this module is imported (nothing else needs
importing first); add your own with :func:`register_pipeline`.

Example:
    >>> from toolrerank_plugins.pipelines import known_pipelines, pipeline_config
    >>> "hybrid-hierarchy" in known_pipelines()
    True
    >>> pipeline_config("bm25-hierarchy").stages[0].type
    'toolrerank'
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins.config import DEFAULT_FAST_PIPELINE, DEFAULT_PIPELINE, saved_config
from toolrerank_plugins.engine import EngineConfig
from toolrerank_plugins.errors import ConfigError

#: The textbook settings of each first stage, which ``EngineConfig()``'s recommended defaults replace: plain
#: bm25s tokens without stemming, and reciprocal-rank fusion.
PLAIN_SECTIONS: Mapping[str, Any] = {
    "bm25": {"tokenizer": "plain", "stemmer": None},
    "hybrid": {"fusion": "rrf", "confidence_weighted": False},
}


def _plain(retriever: str, *, stages: list[dict[str, Any]] | None = None, **sections: Any) -> dict[str, Any]:
    # One retriever with its textbook settings and the given stages (none by default).
    return {"retriever": retriever, **copy.deepcopy(dict(PLAIN_SECTIONS)), "auto_tune": [], **sections,
            "stages": stages or []}


def _hierarchy(retriever: str) -> dict[str, Any]:
    # Training-free ToolRerank hierarchy reranking over one first stage.
    return _plain(
        retriever,
        depth=50,
        stages=[{"type": "toolrerank", "params": {"classification": "single", "m_s": 30, "m_u": 30}}],
    )


def _llm_stage(retriever: str, stage: str) -> dict[str, Any]:
    # The LLM stages find their LLM in the registry (``toolrerank eval --llm ...`` registers one).
    return _plain(retriever, stages=[{"type": stage}])


#: The name of the recommended pipeline (:data:`toolrerank_plugins.config.DEFAULT_PIPELINE`), what you get when you
#: name none.
DEFAULT_PIPELINE_NAME = "default"

#: The bundled presets: ``name -> EngineConfig`` data (validated afresh on every :func:`pipeline_config`).
PRESETS: Mapping[str, Mapping[str, Any]] = {
    DEFAULT_PIPELINE_NAME: DEFAULT_PIPELINE,
    # The default with the requests of a message matched lexically: about plain hybrid's cost.
    "default-fast": DEFAULT_FAST_PIPELINE,
    # The default with a faster encoder from the [fast] extra (docs/benchmarks.md, "A faster encoder on a CPU"):
    # ONNX Runtime runs the same MiniLM (the same vectors to 2e-4, the same rankings), about 2x faster on a CPU;
    # the static model distilled from it encodes hundreds of times faster for very large catalogs, at a cost in
    # Recall@5 stated there.
    "default-onnx": {**DEFAULT_PIPELINE, "dense": {"backend": "onnx"}},
    "default-static": {**DEFAULT_PIPELINE, "dense": {"backend": "static"}},
    # The default with its requests' vectors mapped from the encoder's word-piece vectors instead of encoded
    # (DenseConfig.part_vectors; docs/benchmarks.md, "Requests without the encoder"): no spare thread, about plain
    # hybrid's cost on two cores with two torch threads; Recall@5 per catalog stated there (it loses on some).
    "default-word-map": {**DEFAULT_PIPELINE, "dense": {"part_vectors": "word-map"}},
    # The plain baselines: one retriever with its textbook settings, no stages.
    "dense": _plain("dense"),
    "bm25": _plain("bm25"),
    "hybrid": _plain("hybrid"),
    "dense-hnsw": _plain("dense", dense={"index": "hnsw"}),
    # Zero-training dependency graph (declared + schema data-flow edges) with prerequisite expansion.
    "hybrid+tgr": _plain("hybrid", stages=[{"type": "tgr", "params": {"expansion": {"enabled": True}}}]),
    "bm25-hierarchy": _hierarchy("bm25"),
    "dense-hierarchy": _hierarchy("dense"),
    "hybrid-hierarchy": _hierarchy("hybrid"),
    "dense+querygen": _llm_stage("dense", "query_generation"),
    "bm25+querygen": _llm_stage("bm25", "query_generation"),
    "dense+qta": _llm_stage("dense", "qta_rewrite"),
    "bm25+qta": _llm_stage("bm25", "qta_rewrite"),
    "dense+feedback": _llm_stage("dense", "iterative_feedback"),
    "bm25+feedback": _llm_stage("bm25", "iterative_feedback"),
}


def _preset_factory(data: Mapping[str, Any]) -> Callable[[], EngineConfig]:
    def make() -> EngineConfig:
        # deepcopy: nested params are handed through as-is by pydantic, and must not alias the preset
        return EngineConfig.model_validate(copy.deepcopy(dict(data)))

    return make


_PIPELINES: dict[str, Callable[[], EngineConfig]] = {name: _preset_factory(data) for name, data in PRESETS.items()}


def register_pipeline(name: str, factory: Callable[[], EngineConfig], *, replace: bool = False) -> None:
    """Add a named pipeline: ``factory()`` returns a fresh :class:`EngineConfig` for each use.

    Raises:
        ConfigError: ``name`` is already registered and ``replace`` is false.
    """
    if name in _PIPELINES and not replace:
        raise ConfigError(f"pipeline {name!r} is already registered")
    _PIPELINES[name] = factory


def known_pipelines() -> list[str]:
    """Sorted names of the registered pipelines."""
    return sorted(_PIPELINES)


def pipeline_config(name_or_path: str | os.PathLike[str], **fields: Any) -> EngineConfig:
    """EngineConfig for a pipeline name, or for a JSON file (an EngineConfig, or a saved config.json).

    ``fields`` replace whole top-level fields of that config and are validated with it, e.g.
    ``pipeline_config("bm25", stages=[{"type": "multi_intent"}])``: plain BM25 with one stage.

    Example:
        >>> cfg = pipeline_config("hybrid", depth=20)
        >>> cfg.hybrid.fusion, cfg.depth, cfg.stages
        ('rrf', 20, [])

    Raises:
        ConfigError: an unknown name, or a file that is not a valid engine config.
        TypeError: ``name_or_path`` is neither a string nor a path (the library's convention for a wrong
            argument type, as in ``Engine.search``).
        pydantic.ValidationError: ``fields`` do not make a valid config (as from ``EngineConfig(...)``).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(
            f"pipeline_config: name_or_path must be a pipeline name or the path of a .json config, got "
            f"{type(name_or_path).__name__}"
        )
    if name_or_path in _PIPELINES:
        config = _PIPELINES[name_or_path]()
    else:
        path = Path(name_or_path)
        if not (path.suffix == ".json" and path.is_file()):
            raise ConfigError(
                f"unknown pipeline {name_or_path!r}; known: {', '.join(known_pipelines())} (or a .json config)"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            # a saved config.json (its "engine" section) keeps the meaning it was saved with
            config = saved_config(data["engine"]) if "engine" in data else EngineConfig.model_validate(data)
        except Exception as exc:
            raise ConfigError(f"{path}: not a valid engine config ({exc})") from exc
    if not fields:
        return config
    return EngineConfig.model_validate({**config.model_dump(), **fields})
