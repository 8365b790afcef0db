"""Hierarchy-aware reranking (ToolRerank section 3.3): Algorithm 1 (single-tool) and Algorithm 2 (multi-tool).

Both functions take the reranked list ``R`` (best first) with a relevance score per item and return a
reordering of it: they never drop an item. Algorithm 1 may *add* APIs (the extended API list), which the
caller scores first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from toolrerank_plugins._extras import require
from toolrerank_plugins.records import ScoredTool


@dataclass
class SingleToolResult:
    """Output of Algorithm 1: the order, the preferred tools X and which of them were extended."""

    ranking: list[ScoredTool]
    preferred_tools: list[str]
    extended_tools: list[str] = field(default_factory=list)
    added_ids: list[str] = field(default_factory=list)


def single_tool_rerank(
    reranked: Sequence[ScoredTool],
    scores: Sequence[float],
    tau_s: float,
    *,
    extend: Callable[[list[str]], list[tuple[ScoredTool, float]]] | None = None,
    should_extend: Callable[[str], bool] | None = None,
) -> SingleToolResult:
    """Algorithm 1: move APIs of the confidently-predicted tools to the front.

    Args:
        reranked: R, best first.
        scores: score(q, r_i) for each item of ``reranked``.
        tau_s: tools with at least one API scoring above ``tau_s`` form the preferred set X; when none
            does, X = {tool(r_1)}.
        extend: given the tools to extend, returns every API of those tools that is *not* already in
            ``reranked`` with its score (the extended API list); ``None`` disables the extension.
        should_extend: which tools of X to extend (the paper: only unseen tools).

    Returns:
        F = F1 (APIs of X, including added ones, by score) + F2 (the rest, in R order).

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> r = [ScoredTool(ToolSpec(id=i, name=i, tool=t), 0.0, n) for n, (i, t) in
        ...      enumerate([("a1", "A"), ("b1", "B"), ("a2", "A")], start=1)]
        >>> [x.id for x in single_tool_rerank(r, [0.9, 0.5, 0.4], tau_s=0.8).ranking]
        ['a1', 'a2', 'b1']
    """
    if len(reranked) != len(scores):
        raise ValueError(f"got {len(reranked)} results but {len(scores)} scores")
    if not reranked:
        return SingleToolResult([], [])
    preferred: list[str] = []
    for item, s in zip(reranked, scores):
        if s > tau_s and item.tool.tool_key not in preferred:
            preferred.append(item.tool.tool_key)
    if not preferred:
        preferred = [reranked[0].tool.tool_key]
    pset = set(preferred)
    f1 = [(it, float(s)) for it, s in zip(reranked, scores) if it.tool.tool_key in pset]
    f2 = [it for it in reranked if it.tool.tool_key not in pset]
    extended: list[str] = []
    added: list[str] = []
    if extend is not None:
        extended = [t for t in preferred if should_extend is None or should_extend(t)]
        if extended:
            extra = extend(extended)
            added = [it.id for it, _ in extra]
            f1.extend(extra)
            # Re-sort F1 by score (stable: ties keep R order, added APIs after).
            f1.sort(key=lambda p: -p[1])
    return SingleToolResult([it for it, _ in f1] + f2, preferred, extended, added)


@dataclass
class MultiToolResult:
    """Output of Algorithm 2: the order and the connected components (as lists of ids)."""

    ranking: list[ScoredTool]
    components: list[list[str]]
    selected: list[str]


def multi_tool_rerank(
    reranked: Sequence[ScoredTool],
    scores: Sequence[float],
    embeddings: np.ndarray | None,
    tau_m: float,
    n: int,
) -> MultiToolResult:
    """Algorithm 2: at most ``n`` best results of each connected component first, then the rest.

    Two results are connected when they belong to the same tool or their embedding cosine similarity
    exceeds ``tau_m`` (``embeddings``: one L2-normalised row per result; ``None`` uses the tool
    relation only).

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> r = [ScoredTool(ToolSpec(id=i, name=i, tool=t), 0.0, n) for n, (i, t) in
        ...      enumerate([("a1", "A"), ("a2", "A"), ("b1", "B")], start=1)]
        >>> [x.id for x in multi_tool_rerank(r, [0.9, 0.8, 0.7], None, tau_m=0.9, n=1).ranking]
        ['a1', 'b1', 'a2']
    """
    if len(reranked) != len(scores):
        raise ValueError(f"got {len(reranked)} results but {len(scores)} scores")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not reranked:
        return MultiToolResult([], [], [])
    nx = require("networkx")
    size = len(reranked)
    graph = nx.Graph()
    graph.add_nodes_from(range(size))
    by_tool: dict[str, list[int]] = {}
    for i, it in enumerate(reranked):
        by_tool.setdefault(it.tool.tool_key, []).append(i)
    for members in by_tool.values():
        graph.add_edges_from(zip(members, members[1:]))  # a chain connects the whole tool
    if embeddings is not None and size > 1:
        if embeddings.shape[0] != size:
            raise ValueError(f"got {embeddings.shape[0]} embeddings for {size} results")
        sims = embeddings @ embeddings.T
        ii, jj = np.nonzero(np.triu(sims > tau_m, k=1))
        graph.add_edges_from(zip(ii.tolist(), jj.tolist()))
    selected: set[int] = set()
    components: list[list[str]] = []
    for comp in nx.connected_components(graph):
        members = sorted(comp, key=lambda i: (-scores[i], i))
        components.append([reranked[i].id for i in members])
        selected.update(members[:n])
    order = [i for i in range(size) if i in selected] + [i for i in range(size) if i not in selected]
    return MultiToolResult([reranked[i] for i in order], components, [reranked[i].id for i in sorted(selected)])
