"""Pydantic AI integration of toolrerank-plugins (docs/pydantic-ai.md): :class:`EngineToolSearch`, the engine as
the ``ToolSearch`` capability's strategy; :func:`toolrerank_tool_search`; :func:`toolset_for_engine`."""

from __future__ import annotations

from pydantic_ai_toolrerank._convert import spec_to_tool, tool_def_to_spec
from pydantic_ai_toolrerank.search import EngineToolSearch, toolrerank_tool_search, toolset_for_engine

__all__ = ["EngineToolSearch", "spec_to_tool", "tool_def_to_spec", "toolrerank_tool_search", "toolset_for_engine"]
