"""Prerequisite expansion after retrieval: pull in the APIs the top results need.

Two modes (``ExpansionConfig.mode``):

- ``direct`` (the original behaviour): for each of the first ``window`` results, its direct prerequisites
  (graph in-edges) with weight at least ``min_weight`` and an allowed origin are inserted immediately after
  it, unless they already rank above it; one that ranks lower is moved up. The primary (rank-1) result
  never moves down. ``max_inserted`` (2) caps how many results one query can gain, ``max_per_result`` (1)
  how many one dependent pulls in.
- ``closure``: the *transitive* prerequisites of the first ``window`` results (prerequisites of
  prerequisites, breadth first, nearest first), within a budget: ``max_depth`` hops, ``max_inserted``
  APIs per query. Edges are trusted by origin: *trusted* origins (``trusted_origins``: the user's declared
  edges, labelled edges, a graph file) are followed transitively; inferred edges (``schema``,
  ``discriminator``, ``llm``) are used only as *direct* prerequisites of a retrieved result, only with
  weight at least ``inferred_min_weight``, and never chased further. ``position`` says where the
  prerequisites go: ``after`` their dependent (default; the rank-1 result never moves down),
  ``before`` it (call order; the dependent moves down), ``after_window`` (after the first ``window``
  results, which keep their ranks), or ``score`` (a prerequisite ``d`` hops away scores
  ``score_factor ** d`` times its result and is placed by score among the others).

``declared_chains`` (with either mode; on in the default pipeline): the dependencies the catalog's owner declared
(edges of the catalog whose own ``origin`` is in ``chain_origins``: ``declared`` or ``labelled``) are followed to
the end, with a budget that scales with what the caller asked for (``top_k``, from the stage context; from
``chain_min_top_k``, 10, up: below it the declared edges keep the mode's rule): the first ``max(1, floor(top_k *
chain_share))`` results (the targets) keep their ranks, and the ranks after them, up to ``top_k``, go to the
targets' transitive prerequisites (``chain_depth`` hops, nearest first, the first target's chain first); the
remaining targets follow. Every other edge (schema, discriminator, llm, and catalog edges of another origin, e.g.
``derived`` from call data or ``usage``) keeps the mode's rule (``direct``: direct prerequisites with weight at
least ``min_weight``), applied first.

An inserted API scores halfway between the results it is placed between (the score of the one above when it goes
last or they tie), so scores stay non-increasing and an inserted API does not tie the result it serves; the trace
lists each insertion and why (``prerequisite_of``, ``origin``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.schema_deps import input_names, returned_names
from toolrerank_plugins.graph.tool_graph import CATALOG_ORIGIN, ToolGraph
from toolrerank_plugins.records import ScoredTool

Mode = Literal["direct", "closure"]
Position = Literal["after", "before", "after_window", "score"]

#: Budget of each mode when ``max_inserted`` / ``max_per_result`` are left unset.
DEFAULT_MAX_INSERTED: Mapping[str, int] = {"direct": 2, "closure": 2}
DEFAULT_MAX_PER_RESULT: Mapping[str, int | None] = {"direct": 1, "closure": 1}
#: ``closure``: prerequisites past the budget placed after rank ``overflow_after`` when ``overflow`` is unset
#: (measured: docs/benchmarks/tgr_closure.md).
DEFAULT_OVERFLOW = 3
#: Edge origins followed transitively by the ``closure`` mode (the user's own or labelled knowledge).
TRUSTED_ORIGINS = ("declared", "labelled", "file")
#: Catalog edge origins ``declared_chains`` follows to the end: what the catalog's owner declared (``labelled`` is
#: the default of an edge without an origin; ``derived`` edges, from call data, and ``usage`` edges are not).
CHAIN_ORIGINS = ("declared", "labelled")
ChainOrder = Literal["target", "depth"]


class ExpansionConfig(RenamedFieldsModel):
    """When and how many prerequisites are inserted.

    Attributes:
        enabled: turn expansion on.
        mode: ``direct`` (direct prerequisites right after their dependent; the original behaviour) or
            ``closure`` (transitive prerequisites within a budget; see the module docs).
        window: only the first ``window`` results pull in their prerequisites (was ``top_n``).
        max_inserted: at most this many APIs inserted or moved up per query near the top (unset: 2).
        max_per_result: at most this many prerequisites per dependent near the top (unset: 1).
        min_weight: minimum edge weight (discriminator probability; declared edges weigh 1, schema edges
            1 for typed id evidence and ``SchemaConfig.weak_weight`` for a bare name match).
        origins: edge origins used at all (``None``: all).
        max_depth: ``closure``: how many hops of trusted edges are followed from a result.
        position: ``closure``: where prerequisites go: ``after`` / ``before`` their dependent,
            ``after_window``, or ``score`` (a prerequisite ``d`` hops from a result scores at least
            ``score_factor ** d`` times the result's score, and takes its place in the ranking by score).
        trusted_origins: ``closure``: origins followed transitively; any other origin (inferred edges) is
            used only as a direct prerequisite of a result, with weight at least ``inferred_min_weight``.
        inferred_min_weight: ``closure``: minimum weight of an inferred edge.
        rank_by: ``closure``: which of an API's prerequisites come first: ``graph`` (edge weight, origin,
            id) or ``retrieval`` (trusted edges first, and among them those the first stage ranked higher,
            then the rest in graph order).
        score_factor: ``position="score"``: share of its dependent's score a prerequisite gets per hop.
        alternatives: ``closure``: ``one`` keeps a single producer per input of an API (prerequisites that
            return the same names the API takes are alternatives, e.g. two ways to get an ``access_token``;
            the first by ``rank_by`` is kept); ``all`` keeps every prerequisite.
        overflow: ``closure``: up to this many more prerequisites, beyond ``max_inserted`` (or a result's
            ``max_per_result``), go after the first ``overflow_after`` results instead of being dropped: the
            top of the ranking stays as the budget left it, the rest of the closure fills the ranks below
            (unset: 3).
        overflow_after: ``closure``: the rank after which overflowing prerequisites are placed.
        retrieved_only: ``closure``: insert only prerequisites the first stage retrieved (anywhere in its
            ``depth`` candidates); the chain is still followed through the others.
        declared_chains: follow the catalog owner's edges (``chain_origins``) to the end with a budget that
            scales with the caller's ``top_k`` (see the module docs); other edges keep the mode's rule.
        chain_origins: ``declared_chains``: the catalog edge origins (``origin`` in ``edges.jsonl``) followed;
            a graph edge of another source counts when its own origin is named here (e.g. ``file``).
        chain_depth: ``declared_chains``: hops followed from a target.
        chain_share: ``declared_chains``: the first ``max(1, floor(top_k * chain_share))`` results keep their
            ranks; prerequisites take the ranks after them up to ``top_k``.
        chain_top_k: ``declared_chains``: the ``top_k`` assumed when the caller gave none (``rerank`` without
            ``top_k``, a stage run outside a search).
        chain_min_top_k: ``declared_chains``: the smallest ``top_k`` the chains are followed at; below it the
            declared edges keep the mode's rule (at ``top_k=5`` on the bundled catalog every chain budget tried
            lost Recall@5 to the direct rule, docs/benchmarks.md "Declared dependencies followed to the end").
        chain_order: ``declared_chains``: ``target`` (the first target's whole chain, then the next target's)
            or ``depth`` (every target's direct prerequisites, then their prerequisites ...).
        chain_keep_direct: ``declared_chains``: the mode's rule also places declared edges first (today's
            direct prerequisite right after each of the first ``window`` results), then the chains follow the
            kept targets; the leading targets may then leave the top half (the guarantee is given up).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    mode: Mode = "direct"
    window: int = Field(3, ge=1)
    max_inserted: int | None = Field(None, ge=0)
    max_per_result: int | None = Field(None, ge=1)
    min_weight: float = Field(0.5, ge=0.0, le=1.0)
    origins: list[str] | None = None
    max_depth: int = Field(2, ge=1)
    position: Position = "after"
    trusted_origins: list[str] = Field(default_factory=lambda: list(TRUSTED_ORIGINS))
    inferred_min_weight: float = Field(1.0, ge=0.0, le=1.0)
    rank_by: Literal["graph", "retrieval"] = "graph"
    score_factor: float = Field(0.9, gt=0.0, le=1.0)
    retrieved_only: bool = False
    alternatives: Literal["all", "one"] = "all"
    overflow: int | None = Field(None, ge=0)
    overflow_after: int = Field(5, ge=0)
    declared_chains: bool = False
    chain_origins: list[str] = Field(default_factory=lambda: list(CHAIN_ORIGINS))
    chain_depth: int = Field(4, ge=1)
    chain_share: float = Field(0.5, gt=0.0, le=1.0)
    chain_top_k: int = Field(10, ge=1)
    chain_min_top_k: int = Field(10, ge=1)
    chain_order: ChainOrder = "target"
    chain_keep_direct: bool = False

    renamed_fields: ClassVar[Mapping[str, str]] = {"top_n": "window"}

    @property
    def top_n(self) -> Any:
        """Deprecated name of :attr:`window`."""
        warn_renamed("ExpansionConfig", "top_n", "window")
        return self.window

    @property
    def insert_budget(self) -> int:
        """``max_inserted``, or the mode's default when unset."""
        return DEFAULT_MAX_INSERTED[self.mode] if self.max_inserted is None else self.max_inserted

    @property
    def per_result_budget(self) -> int | None:
        """``max_per_result``, or the mode's default when unset (``None``: no cap)."""
        return DEFAULT_MAX_PER_RESULT[self.mode] if self.max_per_result is None else self.max_per_result

    @property
    def overflow_budget(self) -> int:
        """``overflow``, or the default when unset (``closure`` only; ``direct`` has no overflow)."""
        if self.mode != "closure":
            return 0
        return DEFAULT_OVERFLOW if self.overflow is None else self.overflow


def expand_prerequisites(
    candidates: list[ScoredTool],
    graph: ToolGraph,
    catalog: Catalog,
    config: ExpansionConfig,
    *,
    stage: str = "tgr",
    top_k: int | None = None,
) -> tuple[list[ScoredTool], list[dict[str, Any]]]:
    """Ranking with prerequisites inserted, and a record of each insertion (for the trace).

    An inserted API scores between its neighbours (:func:`between`; scores stay non-increasing) and is
    explained in the trace (``prerequisite_of``, ``from_rank``, ``to_rank``, ``origin``, ``weight``; the
    ``closure`` mode adds ``for``, the retrieved result whose closure it belongs to, and ``depth``;
    ``declared_chains`` adds ``chain: true`` and the edge's ``catalog_origin``). ``top_k``: how many results the
    caller will see (``declared_chains`` scales its budget with it; None: ``chain_top_k``).
    """
    items = list(candidates)
    if not config.enabled or not items:
        return items, []
    chains = config.declared_chains and chain_budget(config, top_k)[0] >= config.chain_min_top_k
    skip = _is_chain_edge(config) if chains and not config.chain_keep_direct else None
    inserted: list[dict[str, Any]] = []
    if config.insert_budget > 0:
        if config.mode == "closure":
            items, inserted = _expand_closure(items, graph, catalog, config, stage, skip)
        else:
            items, inserted = _expand_direct(items, graph, catalog, config, stage, skip)
    if chains:
        items, chained = _expand_chains(items, graph, catalog, config, stage, top_k)
        inserted += chained
    return items, inserted


def chain_budget(config: ExpansionConfig, top_k: int | None) -> tuple[int, int, int]:
    """``declared_chains``' budget for a caller's ``top_k``: ``(top_k, targets kept, ranks for prerequisites)``.

    Example:
        >>> cfg = ExpansionConfig(declared_chains=True)
        >>> chain_budget(cfg, 10), chain_budget(cfg, 5), chain_budget(cfg, 1), chain_budget(cfg, None)
        ((10, 5, 5), (5, 2, 3), (1, 1, 0), (10, 5, 5))
    """
    k = config.chain_top_k if top_k is None else top_k
    kept = max(1, math.floor(k * config.chain_share + 1e-9))
    return k, kept, max(0, k - kept)


def _is_chain_edge(config: ExpansionConfig) -> Any:
    """Whether an edge (its data) is one ``declared_chains`` follows: its catalog origin, or for an edge of
    another source its own, is in ``chain_origins`` (a declared edge of a graph saved before catalog origins
    were kept counts as declared)."""
    origins = frozenset(config.chain_origins)

    def is_chain(data: Mapping[str, Any]) -> bool:
        own = data.get(CATALOG_ORIGIN, "declared") if data["origin"] == "declared" else data["origin"]
        return own in origins

    return is_chain


def chain_prerequisites(
    graph: ToolGraph, tool_id: str, config: ExpansionConfig
) -> list[tuple[str, str, int, dict[str, Any]]]:
    """``tool_id``'s prerequisites over ``declared_chains``' edges, nearest first: ``(api, its dependent, depth,
    edge data)``, breadth first up to ``chain_depth`` hops; cycles end at an API already seen.

    Example:
        >>> from toolrerank_plugins.catalog import Catalog
        >>> from toolrerank_plugins.records import Edge, ToolSpec
        >>> cat = Catalog([ToolSpec(i, i) for i in ("login", "token", "delete")])
        >>> g = ToolGraph.empty(cat)
        >>> g.add_edges([Edge("login", "token"), Edge("token", "delete")], origin="declared",
        ...             keep_origin_as="catalog_origin")
        2
        >>> [(a, d) for a, _, d, _ in chain_prerequisites(g, "delete", ExpansionConfig(declared_chains=True))]
        [('token', 1), ('login', 2)]
    """
    is_chain = _is_chain_edge(config)
    out: list[tuple[str, str, int, dict[str, Any]]] = []
    seen = {tool_id}
    queue: deque[tuple[str, int]] = deque([(tool_id, 0)])
    while queue:
        node, depth = queue.popleft()
        if depth >= config.chain_depth:
            continue
        for pre_id, data in graph.prerequisites(node):
            if pre_id in seen or not is_chain(data):
                continue
            seen.add(pre_id)
            out.append((pre_id, node, depth + 1, data))
            queue.append((pre_id, depth + 1))
    return out


def _expand_chains(
    items: list[ScoredTool],
    graph: ToolGraph,
    catalog: Catalog,
    config: ExpansionConfig,
    stage: str,
    top_k: int | None,
) -> tuple[list[ScoredTool], list[dict[str, Any]]]:
    """The targets' declared chains placed after the kept targets, within the ranks up to ``top_k``."""
    _, kept, slots = chain_budget(config, top_k)
    if slots == 0 or len(items) == 0:
        return items, []
    targets = [c.id for c in items[:kept]]
    block = set(targets)
    found: list[tuple[str, str, int, dict[str, Any], int, str]] = []  # (api, via, depth, data, target #, target)
    for n, target in enumerate(targets):
        found += [(a, via, d, data, n, target) for a, via, d, data in chain_prerequisites(graph, target, config)]
    if config.chain_order == "depth":
        found.sort(key=lambda f: (f[2], f[4]))  # stable: each target's breadth-first order within a depth
    chosen: list[tuple[str, str, int, dict[str, Any], str]] = []
    taken: set[str] = set()
    for pre_id, via, depth, data, _, target in found:
        if len(chosen) >= slots:
            break
        if pre_id in block or pre_id in taken or catalog.get(pre_id) is None:
            continue  # already among the kept targets, or chosen for an earlier target
        taken.add(pre_id)
        chosen.append((pre_id, via, depth, data, target))
    inserted: list[dict[str, Any]] = []
    pos = min(kept, len(items))
    for pre_id, via, depth, data, target in chosen:
        current = _index(items, pre_id)
        moved = items.pop(current) if current is not None else None
        score = between(items, pos)
        items.insert(
            pos,
            moved.with_stage(stage, score)
            if moved is not None
            else ScoredTool(catalog[pre_id], score, 0, {stage: score}),
        )
        inserted.append(
            {
                "id": pre_id,
                "prerequisite_of": via,
                "for": target,
                "depth": depth,
                "from_rank": None if current is None else current + 1,
                "to_rank": pos + 1,
                "origin": data["origin"],
                CATALOG_ORIGIN: data.get(CATALOG_ORIGIN, data["origin"]),
                "weight": round(float(data["weight"]), 4),
                "chain": True,
            }
        )
        pos += 1
    return items, inserted


def _expand_direct(
    items: list[ScoredTool],
    graph: ToolGraph,
    catalog: Catalog,
    config: ExpansionConfig,
    stage: str,
    skip: Any = None,
) -> tuple[list[ScoredTool], list[dict[str, Any]]]:
    inserted: list[dict[str, Any]] = []
    allowed = None if config.origins is None else set(config.origins)
    budget = config.insert_budget
    per_result_cap = config.per_result_budget
    i = 0
    n_dependents = 0
    while i < len(items) and n_dependents < config.window and len(inserted) < budget:
        dep = items[i]
        n_dependents += 1
        pos = i + 1
        per_result = 0
        for pre_id, data in graph.prerequisites(dep.id):
            if (per_result_cap is not None and per_result >= per_result_cap) or len(inserted) >= budget:
                break
            if data["weight"] < config.min_weight or (allowed is not None and data["origin"] not in allowed):
                continue
            if skip is not None and skip(data):
                continue  # a declared chain's edge: declared_chains places it
            current = next((j for j, c in enumerate(items) if c.id == pre_id), None)
            if current is not None and current < pos:
                continue  # already ranks above its dependent
            spec = catalog.get(pre_id)
            if spec is None:
                continue
            moved = items.pop(current) if current is not None else None
            score = between(items, pos)
            entry = moved.with_stage(stage, score) if moved is not None else ScoredTool(spec, score, 0, {stage: score})
            items.insert(pos, entry)
            inserted.append(
                {
                    "id": pre_id,
                    "prerequisite_of": dep.id,
                    "from_rank": None if current is None else current + 1,
                    "to_rank": pos + 1,
                    "origin": data["origin"],
                    "weight": round(float(data["weight"]), 4),
                }
            )
            pos += 1
            per_result += 1
        i = pos  # skip what was just inserted: prerequisites of prerequisites are not chased
    return items, inserted


def prerequisite_closure(
    graph: ToolGraph,
    tool_id: str,
    config: ExpansionConfig,
    rank: Mapping[str, int] | None = None,
    catalog: Catalog | None = None,
) -> list[tuple[str, str, int, dict[str, Any]]]:
    """The prerequisites ``tool_id`` needs, nearest first: ``(api, its dependent, depth, edge data)``.

    Breadth first over in-edges, at most ``config.max_depth`` hops. Edges of a trusted origin are followed
    transitively; other (inferred) edges only from ``tool_id`` itself, with weight at least
    ``config.inferred_min_weight``, and what they reach is not chased further. Cycles end at an API already
    seen. With ``rank`` (API id -> position in the first stage's ranking), each API's prerequisites are
    visited trusted edges first and, among those, best ranked first (unranked ones last). With ``catalog`` and
    ``config.alternatives == "one"``, an API's prerequisites that feed the same inputs (names its schema
    takes and theirs return) are alternatives: only the first one visited is kept (and one already taken
    elsewhere in the closure covers those inputs); a prerequisite whose inputs cannot be told is kept.

    Example:
        >>> from toolrerank_plugins.catalog import Catalog
        >>> from toolrerank_plugins.records import Edge, ToolSpec
        >>> cat = Catalog([ToolSpec(i, i) for i in ("login", "token", "delete")])
        >>> g = ToolGraph.empty(cat)
        >>> g.add_edges([Edge("login", "token"), Edge("token", "delete")], origin="declared")
        2
        >>> [(a, d) for a, _, d, _ in prerequisite_closure(g, "delete", ExpansionConfig(mode="closure"))]
        [('token', 1), ('login', 2)]
    """
    allowed = None if config.origins is None else set(config.origins)
    trusted = set(config.trusted_origins)
    one_per_input = catalog is not None and config.alternatives == "one"
    out: list[tuple[str, str, int, dict[str, Any]]] = []
    seen = {tool_id}
    queue: deque[tuple[str, int]] = deque([(tool_id, 0)])
    while queue:
        node, depth = queue.popleft()
        if depth >= config.max_depth:
            continue
        prerequisites = graph.prerequisites(node)
        if rank is not None:
            # trusted edges before inferred ones, then the first stage's order (stable: graph order last)
            unranked = len(rank)
            prerequisites = sorted(
                prerequisites, key=lambda p: (p[1]["origin"] not in trusted, rank.get(p[0], unranked))
            )
        covered: set[str] = set()  # inputs of ``node`` a kept prerequisite already feeds
        for pre_id, data in prerequisites:
            if allowed is not None and data["origin"] not in allowed:
                continue
            if data["origin"] in trusted:
                if data["weight"] < config.min_weight:
                    continue
                follow = True
            else:
                # Inferred edges: a direct prerequisite of a retrieved result only, and not chased further.
                if depth > 0 or data["weight"] < max(config.min_weight, config.inferred_min_weight):
                    continue
                follow = False
            fed = _fed_inputs(catalog, pre_id, node) if one_per_input and catalog is not None else frozenset()
            if pre_id in seen:
                covered |= fed
                continue
            if fed and fed <= covered:
                continue  # an alternative producer of the same inputs was kept
            covered |= fed
            seen.add(pre_id)
            out.append((pre_id, node, depth + 1, data))
            if follow:
                queue.append((pre_id, depth + 1))
    return out


def _fed_inputs(catalog: Catalog, producer: str, consumer: str) -> frozenset[str]:
    """Normalised names ``producer`` returns that ``consumer`` takes (any parameter); empty when unknown."""
    p, c = catalog.get(producer), catalog.get(consumer)
    if p is None or c is None:
        return frozenset()
    return frozenset(returned_names(p).keys() & input_names(c, required_only=False).keys())


def _expand_closure(
    items: list[ScoredTool],
    graph: ToolGraph,
    catalog: Catalog,
    config: ExpansionConfig,
    stage: str,
    skip: Any = None,
) -> tuple[list[ScoredTool], list[dict[str, Any]]]:
    inserted: list[dict[str, Any]] = []
    budget = config.insert_budget
    per_result_cap = config.per_result_budget
    after_window = config.position == "after_window"
    by_score = config.position == "score"
    dependents = [c.id for c in items[: config.window]]
    placed: set[str] = set()  # inserted or moved here: neither dependents nor moved again
    block_end = min(config.window, len(items))  # after_window: where the next prerequisite goes
    retrieved = {c.id: i for i, c in enumerate(items)}  # the first stage's ranking, before any insertion
    rank = retrieved if config.rank_by == "retrieval" else None
    overflow = config.overflow_budget
    spill: list[tuple[str, str, int, dict[str, Any], str]] = []  # beyond the budget: placed lower down

    def put(
        pre_id: str,
        via: str,
        depth: int,
        data: dict[str, Any],
        dep_id: str,
        moved: ScoredTool | None,
        current: int | None,
        pos: int,
        score: float,
        **extra: Any,
    ) -> None:
        """Insert ``pre_id`` (moved up from ``current``, or new) at ``pos`` and record it in the trace."""
        entry = (
            moved.with_stage(stage, score)
            if moved is not None
            else ScoredTool(catalog[pre_id], score, 0, {stage: score})
        )
        items.insert(pos, entry)
        placed.add(pre_id)
        inserted.append(
            {
                "id": pre_id,
                "prerequisite_of": via,
                "for": dep_id,
                "depth": depth,
                "from_rank": None if current is None else current + 1,
                "to_rank": pos + 1,
                "origin": data["origin"],
                "weight": round(float(data["weight"]), 4),
                **extra,
            }
        )

    spilled: set[str] = set()
    for dep_id in dependents:
        if len(inserted) >= budget and len(spill) >= overflow:
            break
        if dep_id in placed:
            continue
        chosen: list[tuple[str, str, int, dict[str, Any]]] = []
        for pre_id, via, depth, data in prerequisite_closure(graph, dep_id, config, rank, catalog):
            if pre_id in placed or pre_id in spilled or catalog.get(pre_id) is None:
                continue
            if skip is not None and skip(data):
                continue  # a declared chain's edge: declared_chains places it
            if config.retrieved_only and pre_id not in retrieved:
                continue
            current = _index(items, pre_id)
            if by_score:
                if current is not None and items[current].score >= _target(items, dep_id, depth, config):
                    continue  # already scores at least what its dependent would give it
            else:
                limit = block_end if after_window else _index(items, dep_id)
                if current is not None and limit is not None and current < limit:
                    continue  # already ranks above the result that needs it (or inside the window)
            if len(inserted) + len(chosen) < budget and (per_result_cap is None or len(chosen) < per_result_cap):
                chosen.append((pre_id, via, depth, data))
            elif len(spill) < overflow:
                spill.append((pre_id, via, depth, data, dep_id))
                spilled.add(pre_id)
            else:
                break
        # "before": deepest first, the order the APIs are called in; otherwise nearest first.
        for pre_id, via, depth, data in reversed(chosen) if config.position == "before" else chosen:
            current = _index(items, pre_id)
            moved = items.pop(current) if current is not None else None
            if by_score:
                score = _target(items, dep_id, depth, config)
                pos = next((j for j, c in enumerate(items) if c.score < score), len(items))
            elif after_window:
                pos = block_end
                block_end += 1
            else:
                pos = _index(items, dep_id) or 0
                if config.position == "after":
                    pos += 1
                    while pos < len(items) and items[pos].id in placed:
                        pos += 1  # after what was already inserted for this result
            if not by_score:
                score = between(items, pos)
            put(pre_id, via, depth, data, dep_id, moved, current, pos, score)
    point = config.overflow_after  # what did not fit the budget goes after this many results
    for pre_id, via, depth, data, dep_id in spill:
        current = _index(items, pre_id)
        if pre_id in placed or (current is not None and current < point):
            continue  # placed for another result meanwhile, or already ranks high enough
        moved = items.pop(current) if current is not None else None
        pos = min(point, len(items))
        point += 1
        put(pre_id, via, depth, data, dep_id, moved, current, pos, between(items, pos), overflow=True)
    return items, inserted


def between(items: list[ScoredTool], pos: int) -> float:
    """The score of an API about to be inserted at ``pos``: halfway between its neighbours-to-be, so the ranking's
    scores stay non-increasing without tying the result above; the above one's score when it goes last or they tie.

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> ranked = [ScoredTool(ToolSpec(str(i), str(i)), s, i + 1) for i, s in enumerate([0.9, 0.5])]
        >>> between(ranked, 1), between(ranked, 2), between(ranked, 0)
        (0.7, 0.5, 0.9)
    """
    if not items:
        return 0.0
    if pos <= 0:
        return items[0].score
    above = items[pos - 1].score
    if pos >= len(items) or items[pos].score >= above:
        return above
    return (above + items[pos].score) / 2


def _target(items: list[ScoredTool], dep_id: str, depth: int, config: ExpansionConfig) -> float:
    """``position="score"``: the score a prerequisite ``depth`` hops from ``dep_id`` gets from it."""
    dep = items[_index(items, dep_id) or 0]
    return dep.score * config.score_factor**depth if dep.score > 0 else dep.score


def _index(items: list[ScoredTool], tool_id: str) -> int | None:
    return next((j for j, c in enumerate(items) if c.id == tool_id), None)
