"""toolrerank-plugins: pick the few right tools for an LLM agent out of thousands.

Importing this package is light: torch, sentence-transformers, faiss, bm25s and the agent frameworks load
on first use of the stage that needs them. The names below that come from the stage, first-stage, LLM,
pipeline and evaluation modules resolve on first access (``toolrerank_plugins._extras.lazy_exports``).

Example:
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    >>> engine.search("log in to my account", top_k=1)[0].tool.name
    'login'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolrerank_plugins._extras import lazy_exports
from toolrerank_plugins._version import FORMAT_VERSION, __version__
from toolrerank_plugins.catalog import Catalog, default_catalog_path
from toolrerank_plugins.engine import Engine, EngineConfig, SearchResult
from toolrerank_plugins.errors import (
    CatalogError,
    ConfigError,
    MissingExtraError,
    PersistenceError,
    QueryError,
    SaveError,
    StaleStoreError,
    StoreError,
    ToolRerankError,
)
from toolrerank_plugins.loaders import (
    from_callables,
    from_mcp_tools,
    from_openai_tools,
    from_openapi,
    load_catalog,
    load_catalog_file,
    load_queries,
)
from toolrerank_plugins.records import Edge, LabelledQuery, ScoredTool, ToolSpec
from toolrerank_plugins.render import RenderConfig, render_tool

if TYPE_CHECKING:  # the lazy names below, for type checkers and IDEs
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.llm import LLM, register_llm
    from toolrerank_plugins.pipelines import known_pipelines, pipeline_config, register_pipeline
    from toolrerank_plugins.retrieval.base import FirstStage, Hit, register_first_stage
    from toolrerank_plugins.stages import Stage, StageContext, StageSpec, StageType, register_stage_type

#: Names resolved on first access: public name -> module defining it.
_LAZY_EXPORTS = {
    "Stage": "toolrerank_plugins.stages",
    "StageContext": "toolrerank_plugins.stages",
    "StageSpec": "toolrerank_plugins.stages",
    "StageType": "toolrerank_plugins.stages",
    "register_stage_type": "toolrerank_plugins.stages",
    "FirstStage": "toolrerank_plugins.retrieval.base",
    "Hit": "toolrerank_plugins.retrieval.base",
    "register_first_stage": "toolrerank_plugins.retrieval.base",
    "LLM": "toolrerank_plugins.llm",
    "register_llm": "toolrerank_plugins.llm",
    "pipeline_config": "toolrerank_plugins.pipelines",
    "known_pipelines": "toolrerank_plugins.pipelines",
    "register_pipeline": "toolrerank_plugins.pipelines",
    "evaluate": "toolrerank_plugins.evaluation",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY_EXPORTS)

__all__ = [
    "Catalog",
    "CatalogError",
    "ConfigError",
    "Edge",
    "Engine",
    "EngineConfig",
    "FORMAT_VERSION",
    "FirstStage",
    "Hit",
    "LLM",
    "LabelledQuery",
    "MissingExtraError",
    "PersistenceError",
    "QueryError",
    "SaveError",
    "StaleStoreError",
    "StoreError",
    "RenderConfig",
    "ScoredTool",
    "SearchResult",
    "Stage",
    "StageContext",
    "StageSpec",
    "StageType",
    "ToolRerankError",
    "ToolSpec",
    "__version__",
    "default_catalog_path",
    "evaluate",
    "from_callables",
    "from_mcp_tools",
    "from_openai_tools",
    "from_openapi",
    "known_pipelines",
    "load_catalog",
    "load_catalog_file",
    "load_queries",
    "pipeline_config",
    "register_first_stage",
    "register_llm",
    "register_pipeline",
    "register_stage_type",
    "render_tool",
]
