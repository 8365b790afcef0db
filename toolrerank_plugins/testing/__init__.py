"""Offline fakes for tests and examples: a deterministic embedder, tiny catalogs, scripted LLMs, fake rerankers.

Names resolve lazily so that importing this package stays light.
"""

from __future__ import annotations

from toolrerank_plugins._extras import lazy_exports

_EXPORTS = {
    "FakeEmbedder": "toolrerank_plugins.testing.embeddings",
    "WordSetIndex": "toolrerank_plugins.testing.first_stages",
    "WordsConfig": "toolrerank_plugins.testing.first_stages",
    "words_first_stage_type": "toolrerank_plugins.testing.first_stages",
    "SharedWordStore": "toolrerank_plugins.testing.first_stages",
    "StoreWordIndex": "toolrerank_plugins.testing.first_stages",
    "STORE_WORDS_TYPE": "toolrerank_plugins.testing.first_stages",
    "tiny_catalog": "toolrerank_plugins.testing.catalogs",
    "tiny_queries": "toolrerank_plugins.testing.catalogs",
    "default_catalog_path": "toolrerank_plugins.catalog",
    "FakeCrossEncoder": "toolrerank_plugins.testing.rerankers",
    "ScriptedLLM": "toolrerank_plugins.testing.llm",
    "SimulatedLLM": "toolrerank_plugins.testing.simulated_llm",
    "demo_catalog": "toolrerank_plugins.testing.tools",
    "fake_implementation": "toolrerank_plugins.testing.tools",
    "fake_result": "toolrerank_plugins.testing.tools",
    "ToolScript": "toolrerank_plugins.testing.agents",
    "ToolPlan": "toolrerank_plugins.testing.agents",
    "ScriptedAgentPort": "toolrerank_plugins.testing.agents",
    "CallableTool": "toolrerank_plugins.testing.agents",
    "fake_engine": "toolrerank_plugins.testing.stages",
    "register_test_stages": "toolrerank_plugins.testing.stages",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
