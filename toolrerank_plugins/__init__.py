"""toolrerank-plugins: pick the few right tools for an LLM agent out of thousands.

Importing this package is light: torch, sentence-transformers, faiss, bm25s and the agent frameworks load
on first use of the stage that needs them.

Example:
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    >>> engine.search("log in to my account", top_k=1)[0].tool.name
    'login'
"""

from __future__ import annotations

from toolrerank_plugins._version import FORMAT_VERSION, __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.errors import (
    CatalogError,
    ConfigError,
    MissingExtraError,
    PersistenceError,
    ToolRerankError,
)
from toolrerank_plugins.loaders import (
    from_callables,
    from_mcp_tools,
    from_openai_tools,
    from_openapi,
    load_catalog,
    load_queries,
)
from toolrerank_plugins.records import Edge, LabelledQuery, ScoredTool, ToolSpec
from toolrerank_plugins.render import RenderConfig, render_tool

__all__ = [
    "FORMAT_VERSION",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "Edge",
    "Engine",
    "EngineConfig",
    "LabelledQuery",
    "MissingExtraError",
    "PersistenceError",
    "RenderConfig",
    "ScoredTool",
    "ToolRerankError",
    "ToolSpec",
    "__version__",
    "from_callables",
    "from_mcp_tools",
    "from_openai_tools",
    "from_openapi",
    "load_catalog",
    "load_queries",
    "render_tool",
]
