"""Offline fakes for tests and examples: a deterministic embedder, tiny catalogs, scripted LLMs, fake rerankers.

Names resolve lazily so that importing this package stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FakeEmbedder": "toolrerank_plugins.testing.embeddings",
    "tiny_catalog": "toolrerank_plugins.testing.catalogs",
    "tiny_queries": "toolrerank_plugins.testing.catalogs",
    "default_catalog_path": "toolrerank_plugins.testing.catalogs",
    "FakeCrossEncoder": "toolrerank_plugins.testing.rerankers",
    "ScriptedLLM": "toolrerank_plugins.testing.llm",
    "demo_catalog": "toolrerank_plugins.testing.tools",
    "fake_implementation": "toolrerank_plugins.testing.tools",
    "fake_result": "toolrerank_plugins.testing.tools",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolrerank_plugins.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
