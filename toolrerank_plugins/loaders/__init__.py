"""Loaders that turn tool descriptions in common formats into a :class:`~toolrerank_plugins.Catalog`."""

from __future__ import annotations

from toolrerank_plugins.loaders.callables import from_callables, spec_from_callable
from toolrerank_plugins.loaders.files import CATALOG_FORMATS, CatalogFormat, detect_format, load_catalog_file
from toolrerank_plugins.loaders.jsonl import (
    load_catalog,
    load_edges,
    load_queries,
    load_tools_jsonl,
    write_edges,
    write_tools_jsonl,
)
from toolrerank_plugins.loaders.mcp import catalog_from_mcp_sessions, from_mcp_tools
from toolrerank_plugins.loaders.openai import from_openai_tools
from toolrerank_plugins.loaders.openapi import from_openapi

__all__ = [
    "CATALOG_FORMATS",
    "CatalogFormat",
    "catalog_from_mcp_sessions",
    "detect_format",
    "from_callables",
    "from_mcp_tools",
    "from_openai_tools",
    "from_openapi",
    "load_catalog",
    "load_catalog_file",
    "load_edges",
    "write_edges",
    "load_queries",
    "load_tools_jsonl",
    "spec_from_callable",
    "write_tools_jsonl",
]
