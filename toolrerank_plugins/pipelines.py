"""Named pipelines (engine config presets) for the CLI's ``--pipeline NAME``.

A name resolves to an :class:`EngineConfig`; a path to a JSON file holding an EngineConfig works too.
Other stages register their presets with :func:`register_pipeline`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from toolrerank_plugins.engine import EngineConfig
from toolrerank_plugins.errors import ConfigError

_PIPELINES: dict[str, Callable[[], EngineConfig]] = {
    "dense": lambda: EngineConfig(retriever="dense"),
    "bm25": lambda: EngineConfig(retriever="bm25"),
    "hybrid": lambda: EngineConfig(retriever="hybrid"),
    "dense-hnsw": lambda: EngineConfig.model_validate({"retriever": "dense", "dense": {"index": "hnsw"}}),
    # Zero-training dependency graph (declared + schema data-flow edges) with prerequisite expansion.
    "hybrid+tgr": lambda: EngineConfig.model_validate(
        {"retriever": "hybrid", "stages": [{"type": "tgr", "params": {"expansion": {"enabled": True}}}]}
    ),
}


def register_pipeline(name: str, factory: Callable[[], EngineConfig], *, replace: bool = False) -> None:
    if name in _PIPELINES and not replace:
        raise ConfigError(f"pipeline {name!r} is already registered")
    _PIPELINES[name] = factory


def known_pipelines() -> list[str]:
    return sorted(_PIPELINES)


def pipeline_config(name_or_path: str) -> EngineConfig:
    """EngineConfig for a pipeline name, or for a JSON file (an EngineConfig, or a saved config.json)."""
    if name_or_path in _PIPELINES:
        return _PIPELINES[name_or_path]()
    path = Path(name_or_path)
    if path.suffix == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return EngineConfig.model_validate(data.get("engine", data))
        except Exception as exc:
            raise ConfigError(f"{path}: not a valid engine config ({exc})") from exc
    raise ConfigError(f"unknown pipeline {name_or_path!r}; known: {', '.join(known_pipelines())} (or a .json config)")
