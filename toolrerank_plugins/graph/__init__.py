"""Tool Graph Retriever (TGR): dependency graphs over APIs and graph-encoded retrieval.

Names resolve lazily so that importing this package stays light (networkx, scipy and torch load on use).
"""

from __future__ import annotations

from toolrerank_plugins._extras import lazy_exports

_EXPORTS = {
    "ToolGraph": "toolrerank_plugins.graph.tool_graph",
    "GraphError": "toolrerank_plugins.graph.tool_graph",
    "catalog_fingerprint": "toolrerank_plugins.graph.tool_graph",
    "SchemaDependencyDetector": "toolrerank_plugins.graph.schema_deps",
    "SchemaConfig": "toolrerank_plugins.graph.schema_deps",
    "build_graph": "toolrerank_plugins.graph.builder",
    "update_graph": "toolrerank_plugins.graph.builder",
    "candidate_pairs": "toolrerank_plugins.graph.builder",
    "GraphBuildConfig": "toolrerank_plugins.graph.builder",
    "PruningConfig": "toolrerank_plugins.graph.builder",
    "DiscriminatorJudge": "toolrerank_plugins.graph.builder",
    "propagate": "toolrerank_plugins.graph.propagation",
    "ExpansionConfig": "toolrerank_plugins.graph.expansion",
    "expand_prerequisites": "toolrerank_plugins.graph.expansion",
    "DependencyDiscriminator": "toolrerank_plugins.graph.discriminator",
    "LLMDependencyJudge": "toolrerank_plugins.graph.llm_judge",
    "TGRConfig": "toolrerank_plugins.graph.stage",
    "TGRStage": "toolrerank_plugins.graph.stage",
    "edges_from_traces": "toolrerank_plugins.graph.traces",
    "mine_trace_edges": "toolrerank_plugins.graph.traces",
    "trace_support": "toolrerank_plugins.graph.traces",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
