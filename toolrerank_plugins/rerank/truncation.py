"""Adaptive truncation (ToolRerank section 3.2): deeper candidate lists for tools the reranker never saw."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import ScoredTool


def adaptive_truncate(
    candidates: Sequence[ScoredTool],
    is_seen: Callable[[ScoredTool], bool],
    m_s: int,
    m_u: int,
) -> tuple[list[ScoredTool], list[ScoredTool]]:
    """Split first-stage candidates into the part the reranker sees and the rest.

    Candidate ``c_i`` (1-based position ``i``) is kept when its tool was seen in training and
    ``i <= m_s``, or unseen and ``i <= m_u``. Nothing is dropped: the second list holds the others in
    their first-stage order, for the caller to append after the reranked part.

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> cands = [ScoredTool(ToolSpec(id=str(i), name=str(i), tool="S" if i % 2 else "U"), 1.0, i)
        ...          for i in range(1, 6)]
        >>> kept, rest = adaptive_truncate(cands, lambda c: c.tool.tool == "S", m_s=1, m_u=4)
        >>> [c.id for c in kept], [c.id for c in rest]
        (['1', '2', '4'], ['3', '5'])
    """
    if m_s < 1 or m_u < 1:
        raise ConfigError(f"m_s and m_u must be >= 1, got m_s={m_s}, m_u={m_u}")
    kept: list[ScoredTool] = []
    rest: list[ScoredTool] = []
    for i, cand in enumerate(candidates, start=1):
        limit = m_s if is_seen(cand) else m_u
        (kept if i <= limit else rest).append(cand)
    return kept, rest
