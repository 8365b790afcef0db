"""Framework-neutral pieces the adapters share, so LangChain and LlamaIndex results look the same.

The adapter packages only map these onto their own types (``Document``, ``NodeWithScore``, tools).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from toolrerank_plugins.records import ScoredTool, ToolSpec

#: Metadata keys every adapter writes (on a copy of the input's metadata).
TOOL_ID, NAME, TOOL, CATEGORY, SCORE, RANK, STAGE_SCORES = (
    "tool_id",
    "name",
    "tool",
    "category",
    "score",
    "rank",
    "stage_scores",
)

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def result_metadata(st: ScoredTool) -> dict[str, Any]:
    """The fixed metadata keys for one ranked tool.

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> result_metadata(ScoredTool(ToolSpec("a/b", "b", tool="a"), 0.5, 1))["tool_id"]
        'a/b'
    """
    return {
        TOOL_ID: st.tool.id,
        NAME: st.tool.name,
        TOOL: st.tool.tool,
        CATEGORY: st.tool.category,
        SCORE: st.score,
        RANK: st.rank,
        STAGE_SCORES: dict(st.stage_scores),
    }


def function_names(specs: Iterable[ToolSpec]) -> dict[str, str]:
    """Tool-calling names for specs, by id: the API name when it is a valid function name and unique,
    else the id with invalid characters replaced (plus a short sha256 when that is too long or taken).

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> function_names([ToolSpec("A/x", "get"), ToolSpec("B/y", "get"), ToolSpec("C/z", "ok")])
        {'A/x': 'A_x', 'B/y': 'B_y', 'C/z': 'ok'}
    """
    specs = list(specs)
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.name] = counts.get(s.name, 0) + 1
    out: dict[str, str] = {}
    taken: set[str] = set()
    for s in specs:
        name = s.name
        if not (_FUNCTION_NAME.match(name) and counts[name] == 1):
            name = re.sub(r"[^A-Za-z0-9_-]+", "_", s.id).strip("_") or "tool"
            if len(name) > 64 or name in taken or name in counts:
                digest = hashlib.sha256(s.id.encode("utf-8")).hexdigest()[:8]
                name = f"{name[:55]}_{digest}"
        taken.add(name)
        out[s.id] = name
    return out
