"""ToolBench's retriever interface over an engine, so ToolLLM's DFSDT / CoT runners use our pipeline unchanged.

ToolBench (ToolLLM) builds a ``ToolRetriever`` and calls ``retrieving(query, top_k, excluded_tools)``;
:class:`ToolBenchRetriever` answers the same call with the same keys and names, with no agent framework.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.records import ToolSpec

_RESERVED = {"from", "class", "return", "false", "true", "id", "and"}


def toolbench_name(name: str) -> str:
    """A tool or API name the way ToolBench files it: lower case, ``_`` for other characters, ``get_`` before
    a leading digit, ``is_`` before a Python-reserved word.

    Example:
        >>> toolbench_name("Weather API v2"), toolbench_name("3d-models"), toolbench_name("id")
        ('weather_api_v2', 'get_3d_models', 'is_id')
    """
    s = re.sub(r"[^\u4e00-\u9fa5A-Za-z0-9_]", "_", name)
    s = re.sub(r"_+", "_", s).lower().strip("_")
    if s and s[0].isdigit():
        s = "get_" + s
    return "is_" + s if s in _RESERVED else s


def toolbench_category(category: str) -> str:
    """A category name the way ToolBench files it (spaces, commas and slashes become ``_``).

    Example:
        >>> toolbench_category("Text Analysis, NLP/Tools")
        'Text_Analysis_NLP_Tools'
    """
    s = re.sub(r"[ ,/]", "_", category)
    return s.replace("__", "_")


class ToolBenchRetriever:
    """Drop-in for ToolBench's ``ToolRetriever``: ``retrieving(query, top_k, excluded_tools)``.

    Returns ``[{"category", "tool_name", "api_name", "tool_id", "score"}, ...]`` from the engine's full
    pipeline. ``excluded_tools`` maps a category to tool names (ToolBench passes the tools of the query
    under test); their APIs are excluded from the engine's search, which goes deep enough that ``top_k``
    others come back.

    Args:
        engine: engine over a ToolBench-style catalog (category -> tool -> API).
        standardize: write names the way ToolBench's tool folders are named (``standardize``,
            ``change_name``); ``False`` keeps the catalog's names.

    Example:
        >>> from toolrerank_plugins.engine import EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> r = ToolBenchRetriever(Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")))
        >>> [d["tool_name"] for d in r.retrieving("weather forecast", top_k=1, excluded_tools={"Weather": ["skycast"]})]
        ['meteonow']
    """

    def __init__(self, engine: Engine, *, standardize: bool = True) -> None:
        self.engine = engine
        self.standardize = standardize
        self._ids: dict[tuple[str, str], list[str]] = {}
        self._indexed_for = -1

    def _names(self, spec: ToolSpec) -> tuple[str, str, str]:
        category, tool = spec.category or "", spec.tool or spec.name
        if not self.standardize:
            return category, tool, spec.name
        return toolbench_category(category), toolbench_name(tool), toolbench_name(spec.name)

    def _ids_by_tool(self) -> dict[tuple[str, str], list[str]]:
        """API ids by ToolBench ``(category, tool_name)``, rebuilt when the catalog changes size."""
        if self._indexed_for != len(self.engine.catalog):  # the catalog changed (engine.add/remove)
            ids: dict[tuple[str, str], list[str]] = {}
            for tid in self.engine.catalog.ids:
                ids.setdefault(self._names(self.engine.catalog[tid])[:2], []).append(tid)
            self._ids, self._indexed_for = ids, len(self.engine.catalog)
        return self._ids

    def retrieving(
        self, query: str, top_k: int = 5, excluded_tools: Mapping[str, Sequence[str]] | None = None
    ) -> list[dict[str, Any]]:
        """The ``top_k`` best APIs for ``query`` outside ``excluded_tools`` (category -> tool names)."""
        by_tool = self._ids_by_tool()
        excluded = {(c, t) for c, tools in (excluded_tools or {}).items() for t in tools}
        exclude = [tid for key in excluded for tid in by_tool.get(key, ())]
        out: list[dict[str, Any]] = []
        for st in self.engine.search(query, top_k=top_k, exclude=exclude):
            category, tool, api = self._names(st.tool)
            out.append(
                {"category": category, "tool_name": tool, "api_name": api, "tool_id": st.tool.id, "score": st.score}
            )
        return out
