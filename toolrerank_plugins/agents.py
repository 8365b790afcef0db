"""Framework-neutral tool agents: tool selection for a request, a tool-calling loop and a DFSDT search.

No agent framework is imported here. The loops drive a framework through an :class:`AgentPort` (its chat
model and tools, in its own message and tool types); the adapters (``langchain-toolrerank``) supply the port
and only convert. Tests drive it with :class:`toolrerank_plugins.testing.agents.ScriptedAgentPort`.

* :class:`BaseToolSelector` — the tools for the current request out of many (engine search), with pins,
  a cap and exclusions by tool name. When the engine ranks fewer tools than asked (BM25 finds no word of the
  request in any tool text), the selection is filled by a fallback and says why (:class:`Ranking`): a selection
  never silently offers zero tools while the catalog has some.
* :func:`run_tool_loop` — offer the selected tools (plus a tool-search tool), call them, feed the results
  back, until the model answers.
* :class:`DFSDTSearch` — ToolLLM's depth-first search decision tree: every node retrieves its tools, a failed
  call or a give-up backtracks to the parent, which tries a sibling without the failed tool.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, SearchResult
from toolrerank_plugins.interop import require_tools
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber
from toolrerank_plugins.retrieval.relevance import RELEVANCE, check_min_relevance

logger = logging.getLogger(__name__)

M = TypeVar("M")  # a framework's chat message
T = TypeVar("T")  # a framework's tool
T_co = TypeVar("T_co", covariant=True)


# -- what a framework supplies ------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCall:
    """One tool call a model asked for."""

    name: str
    args: Mapping[str, Any]
    id: str | None = None


@dataclass(frozen=True)
class ModelReply(Generic[M]):
    """A model turn: the framework's reply message, its text and the tool calls it asks for."""

    message: M
    text: str
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolOutcome(Generic[M]):
    """A tool call's result: the observation message for the model, whether it failed, and any artifact
    (a tool-search tool's artifact is the list of tool names it found)."""

    message: M
    failed: bool = False
    artifact: Any = None


class AgentPort(ABC, Generic[M, T]):
    """The agent framework, seen from the loops: messages, a model call with tools bound, a tool call.

    An adapter subclasses it with a few lines of conversion each.
    """

    @abstractmethod
    def tool_name(self, tool: T) -> str:
        """The name the model calls ``tool`` by."""

    @abstractmethod
    def user_message(self, text: str) -> M: ...

    @abstractmethod
    def system_message(self, text: str) -> M: ...

    @abstractmethod
    def ask(self, messages: Sequence[M], tools: Sequence[T]) -> ModelReply[M]:
        """One model call with ``tools`` bound."""

    @abstractmethod
    def call_tool(self, tool: T | None, call: ToolCall) -> ToolOutcome[M]:
        """Run ``call`` on ``tool`` (``None``: the model called a tool it does not have). A failing tool is
        an observation for the model (``failed=True``), never an exception."""

    @abstractmethod
    def keep_call(self, reply: ModelReply[M], call: ToolCall) -> M:
        """``reply``'s message keeping only ``call`` (a DFSDT branch follows one call)."""


class ToolSource(Protocol[T_co]):
    """What the loops need from a tool selector (:class:`BaseToolSelector` is one)."""

    def select(self, query: str, k: int | None = None, *, exclude: Iterable[str] = ()) -> Sequence[T_co]: ...

    def get(self, name: str) -> T_co | None: ...


# -- when the engine ranks too few tools --------------------------------------------------------------
#: ``stage_scores`` key of a tool the selection added because the engine ranked too few: from the engine's
#: dense retriever, by character n-gram overlap with the tool texts, or in catalog order (nothing matched)
FALLBACK_DENSE, FALLBACK_PARTIAL, FALLBACK_CATALOG = "fallback_dense", "fallback_partial", "fallback_catalog"
#: ``stage_scores`` key of a tool offered because the search itself failed (``fail_open=True``) and nothing is
#: pinned: the catalog's first tools
FALLBACK_FAILED = "fallback_search_failed"
#: ``stage_scores`` key of a pinned tool in :meth:`BaseToolSelector.rank_selection` (offered whatever the request)
PINNED = "pinned"

_WORD = re.compile(r"[^\W_]+")  # letter/digit runs: "get_balance" -> get, balance
_MAX_DESCRIPTION_CHARS = 600  # as the default rendering: a long description adds grams, not matches


def char_trigrams(text: str) -> set[str]:
    """The character trigrams of ``text``'s words, lower-cased, each word padded with a space at both ends.

    Example:
        >>> sorted(char_trigrams("US-Dollar"))
        [' do', ' us', 'ar ', 'dol', 'lar', 'lla', 'oll', 'us ']
    """
    grams: set[str] = set()
    for word in _WORD.findall(text.lower()):
        padded = f" {word} "
        grams.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return grams


def _match_text(spec: ToolSpec) -> str:
    params = spec.parameters.get("properties") if isinstance(spec.parameters, Mapping) else None
    names = " ".join(str(n) for n in params) if isinstance(params, Mapping) else ""
    parts = (spec.name, spec.tool or "", spec.category or "", spec.description[:_MAX_DESCRIPTION_CHARS], names)
    return " ".join(parts)


class PartialMatcher:
    """The best partial matches of a request among tool texts: cosine of idf-weighted character-trigram sets.

    It finds a tool when the request shares only parts of words with its text ("dollars" / "dollar_rate",
    "translating" / "translate"), which a word-level index (BM25) does not. Built once per catalog from each
    API's name, tool, category, description and parameter names (a few seconds for 50,000 APIs); a query
    costs one pass over the postings of its trigrams.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> matcher = PartialMatcher(tiny_catalog())
        >>> [tid for tid, _ in matcher.top("geocoding an adress", 1)]
        ['Maps/GeoFind/geocode']
    """

    def __init__(self, catalog: Catalog) -> None:
        self.ids: list[str] = list(catalog.ids)
        vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        for row, tid in enumerate(self.ids):
            grams = [vocab.setdefault(g, len(vocab)) for g in char_trigrams(_match_text(catalog[tid]))]
            cols.extend(grams)
            rows.extend([row] * len(grams))
        self._vocab = vocab
        col = np.asarray(cols, dtype=np.int64)
        row_arr = np.asarray(rows, dtype=np.int64)
        df = np.bincount(col, minlength=len(vocab)).astype(np.float64)
        self._idf2 = np.log1p(len(self.ids) / np.maximum(df, 1.0)) ** 2
        order = np.argsort(col, kind="stable")
        self._postings = row_arr[order]
        self._starts = np.concatenate([[0], np.cumsum(df.astype(np.int64))])
        norms = np.bincount(row_arr, weights=self._idf2[col], minlength=len(self.ids))
        self._norms = np.sqrt(np.maximum(norms, 1e-12))

    def top(self, query: str, k: int, *, skip: Iterable[str] = ()) -> list[tuple[str, float]]:
        """Up to ``k`` ``(tool id, score)`` pairs sharing a trigram with ``query``, best first; ids in ``skip``
        are left out. Scores are cosines in (0, 1]."""
        known = [self._vocab[g] for g in char_trigrams(query) if g in self._vocab]
        if not known or k < 1:
            return []
        scores = np.zeros(len(self.ids), dtype=np.float64)
        for g in known:
            scores[self._postings[self._starts[g] : self._starts[g + 1]]] += self._idf2[g]
        scores /= self._norms * math.sqrt(float(self._idf2[known].sum()))
        skipped = frozenset(skip)
        out: list[tuple[str, float]] = []
        for row in np.argsort(-scores, kind="stable"):
            if scores[row] <= 0 or len(out) >= k:
                break
            if self.ids[row] not in skipped:
                out.append((self.ids[row], float(scores[row])))
        return out


@dataclass(frozen=True)
class Ranking:
    """The ranked tools of one selection: the engine's results, then what a fallback added, and why.

    ``reason`` is ``None`` when the engine ranked as many tools as asked (or all the catalog allows), else a
    sentence for logs and agent state, e.g. ``"the engine ranked 0 of the 3 tools asked for; 3 added by
    character n-gram overlap with the tool texts"``. Each added tool carries a ``fallback_*`` stage score
    (:data:`FALLBACK_DENSE`, :data:`FALLBACK_PARTIAL`, :data:`FALLBACK_CATALOG`).
    """

    results: list[ScoredTool]
    reason: str | None = None


@dataclass(frozen=True)
class Selected(Generic[T]):
    """The tools a selector offers (pins first) and the :class:`Ranking` they came from."""

    tools: list[T]
    ranking: Ranking

    @property
    def reason(self) -> str | None:
        """Why a fallback filled the selection (``None``: the engine ranked enough tools)."""
        return self.ranking.reason


_HOW = {
    FALLBACK_DENSE: "the engine's dense retriever",
    FALLBACK_PARTIAL: "character n-gram overlap with the tool texts",
    FALLBACK_CATALOG: "catalog order (nothing in the tool texts matches the request)",
}


# -- tool selection ---------------------------------------------------------------------------------
class BaseToolSelector(Generic[T]):
    """Select the tools for the current request out of many (engine search), with pins and a cap.

    Args:
        engine: engine over the tools' catalog.
        tools: the callable tools, keyed by catalog id (one for every id in ``engine.catalog``).
        name: the name a tool is called by.
        max_tools: most tools offered per request, pins included.
        always_include: tool names offered on every request, first (e.g. a "finish" or "ask user" tool).
        always_include_servers: pins per server: every API whose parent tool
            (:attr:`~toolrerank_plugins.records.ToolSpec.tool`: the MCP server of an MCP catalog, the service of
            an OpenAPI one) is named here is offered on every request, after ``always_include``, in catalog order.
        fail_open: when the search itself raises (an engine or LLM stage failure, a request the engine refuses),
            offer the pinned tools instead of raising, or without pins the catalog's first tools: a selection
            never offers nothing. The reason (:attr:`Ranking.reason`) names the error, which is logged at
            WARNING. ``False`` (the default): the error propagates. With ``min_relevance`` only the pinned
            tools are offered (possibly none): the catalog's first tools fit the request no better.
        min_relevance: "no tool fits" (off by default): the engine's ``min_relevance``
            (:meth:`Engine.search`): tools whose relevance is below it are not offered, so a request may get
            only the pinned tools, or none. An explicit abstention wins over the fallback that fills a short
            ranking (dense retriever, partial matches, catalog order): nothing below ``min_relevance`` is added
            back. :attr:`Ranking.reason` says what was left out and why.
        builder: named in the error when a catalog API has no tool (how to build a selector that has all).

    Example:
        >>> from toolrerank_plugins.engine import EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> tools = {i: engine.catalog[i].name for i in engine.catalog.ids}  # a tool may be anything
        >>> selector = BaseToolSelector(engine, tools, name=str, max_tools=2, always_include=["login"])
        >>> selector.select("send an email message"), selector.select("send an email message", exclude=["send_email"])
        (['login', 'send_email'], ['login', 'delete_email'])
        >>> by_server = BaseToolSelector(engine, tools, name=str, max_tools=3, always_include_servers=["SkyCast"])
        >>> by_server.select("send an email message")
        ['forecast', 'current_weather', 'send_email']
    """

    def __init__(
        self,
        engine: Engine,
        tools: Mapping[str, T],
        *,
        name: Callable[[T], str],
        max_tools: int = 5,
        always_include: Iterable[str] = (),
        always_include_servers: Iterable[str] = (),
        fail_open: bool = False,
        builder: str = "BaseToolSelector",
        min_relevance: float | None = None,
    ) -> None:
        require_tools(engine.catalog.ids, tools, builder)
        self.min_relevance = check_min_relevance(min_relevance)
        self.engine = engine
        self.tool_name = name
        self.tools_by_id: dict[str, T] = dict(tools)
        self.tools_by_name: dict[str, T] = {name(t): t for t in self.tools_by_id.values()}
        self._ids_by_name: dict[str, list[str]] = {}
        for tid, tool in self.tools_by_id.items():
            self._ids_by_name.setdefault(name(tool), []).append(tid)
        pins = list(always_include)
        unknown = [p for p in pins if p not in self.tools_by_name]
        if unknown:
            raise ValueError(f"always_include names unknown tools {unknown}; known: {sorted(self.tools_by_name)}")
        servers = list(dict.fromkeys(always_include_servers))
        known_servers = {spec.tool for spec in engine.catalog if spec.tool is not None}
        missing = [s for s in servers if s not in known_servers]
        if missing:
            raise ValueError(f"always_include_servers names unknown servers {missing}; known: {sorted(known_servers)}")
        wanted = set(servers)
        pins += [name(self.tools_by_id[spec.id]) for spec in engine.catalog if spec.tool in wanted]
        pins = list(dict.fromkeys(pins))
        if max_tools < max(1, len(pins)):
            raise ValueError(
                f"max_tools={max_tools} must be >= 1 and >= the {len(pins)} pinned tools (always_include and the "
                "tools of always_include_servers)"
            )
        self.max_tools = max_tools
        self.pinned: list[T] = [self.tools_by_name[p] for p in pins]
        self.fail_open = fail_open
        self._matcher: tuple[Catalog, PartialMatcher] | None = None
        self._matcher_lock = threading.Lock()

    def _k(self, k: int | None) -> int:
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return max(len(self.pinned), min(self.max_tools, self.max_tools if k is None else k))

    def _excluded_ids(self, names: Iterable[str]) -> list[str]:
        return [tid for n in dict.fromkeys(names) for tid in self._ids_by_name.get(n, ())]

    def _merge(self, results: Sequence[ScoredTool], k: int) -> list[T]:
        chosen = {self.tool_name(t): t for t in self.pinned}
        for st in results:
            if len(chosen) >= k:
                break
            tool = self.tools_by_id[st.tool.id]
            chosen.setdefault(self.tool_name(tool), tool)
        return list(chosen.values())

    # -- the fallback when the engine ranks fewer tools than asked -------------------------------------
    def partial_matcher(self) -> PartialMatcher:
        """The :class:`PartialMatcher` of the engine's current catalog (built on first use, rebuilt after a
        catalog change)."""
        catalog = self.engine.catalog
        cached = self._matcher
        if cached is None or cached[0] is not catalog:
            with self._matcher_lock:  # one build, however many threads fall back at once
                cached = self._matcher
                if cached is None or cached[0] is not catalog:
                    cached = (catalog, PartialMatcher(catalog))
                    self._matcher = cached
        return cached[1]

    def _short(self, found: Sequence[ScoredTool], k: int, excluded: Sequence[str]) -> int:
        """How many tools the ranking lacks: ``min(k, catalog tools not excluded) - len(found)``."""
        catalog = self.engine.catalog
        available = len(catalog) - sum(1 for i in set(excluded) if i in catalog)
        return min(k, available) - len(found)

    def _fill(self, query: str, found: list[ScoredTool], k: int, excluded: Sequence[str]) -> Ranking:
        """``found`` filled up to ``k`` (as far as the catalog allows): the engine's dense retriever when it
        has one, else the best partial matches, else (no match and no pins) the catalog's first tools."""
        need = self._short(found, k, excluded)
        if need <= 0:
            return Ranking(found)
        catalog = self.engine.catalog
        skip = {*excluded, *(st.id for st in found)}
        added: list[ScoredTool] = []

        def add(tid: str, score: float, source: str) -> None:
            if tid not in skip and len(added) < need and tid in catalog:
                skip.add(tid)
                added.append(ScoredTool(catalog[tid], score, 0, {source: score}))

        blank = not query.strip()
        if not blank:
            dense = self.engine.dense
            if dense is not None:
                for hit in dense.search([query], need + len(skip))[0]:
                    add(hit.id, hit.score, FALLBACK_DENSE)
            if len(added) < need:
                for tid, score in self.partial_matcher().top(query, need - len(added), skip=skip):
                    add(tid, score, FALLBACK_PARTIAL)
        if not found and not added and not self.pinned:  # nothing at all: never an agent with zero tools
            for tid in catalog.ids:
                add(tid, 0.0, FALLBACK_CATALOG)
        counts = {src: sum(1 for st in added if src in st.stage_scores) for src in _HOW}
        parts = [f"{n} added by {_HOW[src]}" for src, n in counts.items() if n]
        if not parts:
            parts = ["nothing else matches the request" + ("; only the pinned tools are offered" if not found else "")]
        reason = ("the request is blank: " if blank else "") + (
            f"the engine ranked {len(found)} of the {len(found) + need} tools asked for; " + ", ".join(parts)
        )
        logger.info("tool selection for %.80r: %s", query, reason)
        return Ranking(renumber([*found, *added]), reason)

    def rank(self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None) -> Ranking:
        """The ranked tools behind :meth:`select` (no pins): the engine's ``min(k, max_tools)`` best, filled
        by a fallback when the engine ranks fewer and the catalog has more (:class:`Ranking` says why).

        Example:
            >>> from toolrerank_plugins.engine import EngineConfig
            >>> from toolrerank_plugins.testing import tiny_catalog
            >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
            >>> selector = BaseToolSelector(engine, {i: i for i in engine.catalog.ids}, name=str, max_tools=2)
            >>> ranking = selector.rank("wether forcasts")  # misspelt: BM25 finds no word of it
            >>> [st.tool.name for st in ranking.results]
            ['forecast', 'get_forecast']
            >>> ranking.reason
            'the engine ranked 0 of the 2 tools asked for; 2 added by character n-gram overlap with the tool texts'
        """
        k = self._k(k)
        excluded = self._excluded_ids(exclude)
        try:
            if self.min_relevance is not None:
                return self._relevant(
                    query,
                    self.engine.search_detailed(
                        query, top_k=k, exclude=excluded, llm=llm, min_relevance=self.min_relevance
                    ),
                )
            return self._fill(query, self.engine.search(query, top_k=k, exclude=excluded, llm=llm), k, excluded)
        except Exception as exc:
            if not self.fail_open:
                raise
            return self._failed(query, exc, k, excluded)

    async def arank(self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None) -> Ranking:
        """Async twin of :meth:`rank` (same tools)."""
        k = self._k(k)
        excluded = self._excluded_ids(exclude)
        try:
            if self.min_relevance is not None:
                return self._relevant(
                    query,
                    await self.engine.asearch_detailed(
                        query, top_k=k, exclude=excluded, llm=llm, min_relevance=self.min_relevance
                    ),
                )
            found = await self.engine.asearch(query, top_k=k, exclude=excluded, llm=llm)
            if self._short(found, k, excluded) <= 0:
                return Ranking(found)
            return await asyncio.to_thread(self._fill, query, found, k, excluded)  # may encode or build an index
        except Exception as exc:
            if not self.fail_open:
                raise
            return self._failed(query, exc, k, excluded)

    def _relevant(self, query: str, res: SearchResult) -> Ranking:
        """``min_relevance``: the engine's results as they are, never filled by the fallback (an explicit
        abstention wins); the reason is the engine's (what was left out and why)."""
        info = res.trace.get(RELEVANCE)
        reason = info.get("reason") if isinstance(info, dict) else None
        if not res.results:
            reason = (reason or "no tool fits") + (
                "; only the pinned tools are offered" if self.pinned else "; no tool is offered"
            )
        if reason:
            logger.info("tool selection for %.80r: %s", query, reason)
        return Ranking(res.results, reason)

    def _failed(self, query: str, exc: Exception, k: int, excluded: Sequence[str]) -> Ranking:
        """Fail-open: the search raised, so the selection is the pinned tools, or without pins the catalog's
        first ``k`` tools (never nothing while the catalog has tools that are not excluded)."""
        error = f"{type(exc).__name__}: {exc}"[:300]
        added: list[ScoredTool] = []
        if not self.pinned and self.min_relevance is None:  # with min_relevance: nothing that may not fit
            catalog = self.engine.catalog
            skip = set(excluded)
            for tid in catalog.ids:
                if len(added) >= k:
                    break
                if tid not in skip:
                    added.append(ScoredTool(catalog[tid], 0.0, 0, {FALLBACK_FAILED: 0.0}))
        if self.pinned:
            what = "only the pinned tools are offered"
        elif self.min_relevance is not None:
            what = "no tool is offered (with min_relevance the catalog's first tools are not offered)"
        else:
            what = f"the catalog's first {len(added)} tools"
        reason = f"the search failed ({error}); {what} (fail_open)"
        logger.warning("tool selection for %.80r: %s", query, reason, exc_info=exc)
        return Ranking(renumber(added), reason)

    def select_detailed(
        self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None
    ) -> Selected[T]:
        """:meth:`select`'s tools with the ranking behind them and, when a fallback filled it, the reason."""
        ranking = self.rank(query, k, exclude=exclude, llm=llm)
        return Selected(self._merge(ranking.results, self._k(k)), ranking)

    async def aselect_detailed(
        self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None
    ) -> Selected[T]:
        """Async twin of :meth:`select_detailed`."""
        ranking = await self.arank(query, k, exclude=exclude, llm=llm)
        return Selected(self._merge(ranking.results, self._k(k)), ranking)

    def _as_ranking(self, ranking: Ranking, k: int | None) -> Ranking:
        pinned_ids = [self._ids_by_name[self.tool_name(t)][0] for t in self.pinned]
        catalog = self.engine.catalog
        pins = [ScoredTool(catalog[i], 1.0, 0, {PINNED: 1.0}) for i in pinned_ids if i in catalog]
        names = {self.tool_name(t) for t in self.pinned}
        rest = [st for st in ranking.results if self.tool_name(self.tools_by_id[st.tool.id]) not in names]
        return Ranking(renumber([*pins, *rest][: self._k(k)]), ranking.reason)

    def rank_selection(
        self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None
    ) -> Ranking:
        """What :meth:`select` offers, as a :class:`Ranking`: the pinned tools first (stage score
        :data:`PINNED`), then the ranked ones, ``min(k, max_tools)`` in all. Without pins, :meth:`rank`'s.

        Example:
            >>> from toolrerank_plugins.engine import EngineConfig
            >>> from toolrerank_plugins.testing import tiny_catalog
            >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
            >>> selector = BaseToolSelector(engine, {i: i for i in engine.catalog.ids}, name=str, max_tools=2,
            ...                             always_include=["Auth/Keyring/login"])
            >>> ranking = selector.rank_selection("send an email message")
            >>> [(st.tool.name, dict(st.stage_scores).get("pinned")) for st in ranking.results]
            [('login', 1.0), ('send_email', None)]
        """
        return self._as_ranking(self.rank(query, k, exclude=exclude, llm=llm), k)

    async def arank_selection(
        self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None
    ) -> Ranking:
        """Async twin of :meth:`rank_selection`."""
        return self._as_ranking(await self.arank(query, k, exclude=exclude, llm=llm), k)

    def select(self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None) -> list[T]:
        """The pinned tools, then the best-ranked others, ``min(k, max_tools)`` in all.

        ``exclude`` names tools not to offer (e.g. ones that failed); the engine searches that much deeper
        so ``k`` tools still come back when the catalog has them. Pinned tools are always offered.
        ``llm``: the LLM port this search's LLM stages use (``Engine.search(..., llm=)``).

        When the engine ranks fewer tools than that (a BM25 index shares no word with the request), the
        rest come from the engine's dense retriever if it has one, else from the best partial matches
        (:class:`PartialMatcher`), else, when nothing matches and no tool is pinned, from the catalog's
        order: while the catalog has tools that are not excluded, the selection is never empty -- unless
        ``min_relevance`` is set, which may leave only the pinned tools, or none ("no tool fits").
        :meth:`select_detailed` gives the reason with the tools; it is logged at INFO.
        """
        return self.select_detailed(query, k, exclude=exclude, llm=llm).tools

    async def aselect(
        self, query: str, k: int | None = None, *, exclude: Iterable[str] = (), llm: Any = None
    ) -> list[T]:
        """Async twin of :meth:`select` (same tools)."""
        return (await self.aselect_detailed(query, k, exclude=exclude, llm=llm)).tools

    def find(self, query: str, k: int, *, llm: Any = None) -> list[T]:
        """The ``k`` best tools for ``query``, no pins or cap (what a tool-search tool returns)."""
        return [self.tools_by_id[st.tool.id] for st in self.engine.search(query, top_k=k, llm=llm)]

    async def afind(self, query: str, k: int, *, llm: Any = None) -> list[T]:
        """Async twin of :meth:`find`."""
        return [self.tools_by_id[st.tool.id] for st in await self.engine.asearch(query, top_k=k, llm=llm)]

    def get(self, name: str) -> T | None:
        """A tool by name among all tools (an agent's call to a tool it was offered always resolves)."""
        return self.tools_by_name.get(name)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self.tools_by_id)} tools, max_tools={self.max_tools}, "
            f"pinned={len(self.pinned)})"
        )


# -- a tool-calling agent loop ---------------------------------------------------------------------
@dataclass
class AgentRun(Generic[M]):
    """What happened in one agent episode."""

    answer: str | None
    messages: list[M]
    offered: list[list[str]] = field(default_factory=list)  # tool names bound on each model turn
    called: list[str] = field(default_factory=list)  # tool names the model called, in order


def run_tool_loop(
    port: AgentPort[M, T],
    selector: ToolSource[T],
    query: str,
    *,
    finder: T | None = None,
    max_steps: int = 6,
    system_prompt: str | None = None,
) -> AgentRun[M]:
    """Answer ``query`` with a tool-calling model that only sees the tools selected for it.

    Each turn offers the selected tools (plus ``finder``, a tool-search tool, when given); the tools a
    search finds (its outcome's artifact: a list of names) are offered from the next turn on. A call to
    any tool of the selector resolves, so a tool the model was offered is always found.
    """
    name = port.tool_name
    active = {name(t): t for t in selector.select(query)}
    messages: list[M] = [port.system_message(system_prompt)] if system_prompt else []
    messages.append(port.user_message(query))
    run: AgentRun[M] = AgentRun(answer=None, messages=messages)
    for _ in range(max_steps):
        offered = [*active.values(), *([finder] if finder is not None else [])]
        run.offered.append([name(t) for t in offered])
        reply = port.ask(messages, offered)
        messages.append(reply.message)
        if not reply.calls:
            run.answer = reply.text
            return run
        for call in reply.calls:
            run.called.append(call.name)
            is_search = finder is not None and call.name == name(finder)
            tool = finder if is_search else selector.get(call.name)
            outcome = port.call_tool(tool, call)
            messages.append(outcome.message)
            if is_search and isinstance(outcome.artifact, list):
                for found_name in outcome.artifact:
                    found = selector.get(found_name)
                    if found is not None:
                        active.setdefault(found_name, found)
    logger.warning("agent stopped after max_steps=%d without an answer", max_steps)
    return run


# -- DFSDT -------------------------------------------------------------------------------------------
@dataclass
class DFSDTResult(Generic[M]):
    """The outcome of a DFSDT search: the answer (None when every branch failed) and how it went."""

    answer: str | None
    path: list[str]  # tool calls on the successful branch
    messages: list[M]
    expansions: int = 0
    backtracks: int = 0
    failed_calls: list[str] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)  # tools retrieved at each expansion


class DFSDTSearch(Generic[M, T]):
    """Depth-first search over tool-call decisions (ToolLLM's DFSDT), retrieving tools at every node.

    At a node the search retrieves the tools for the query minus the tools already used on the path and
    those that failed at this node, offers them with the ``finish`` tool, and runs the model's call. A
    failed call, a ``give_up_and_restart`` or a dead subtree sends the search back up to try a sibling.

    Args:
        port: the framework's model and tools.
        selector: selects the tools of each node.
        finish: the finishing tool (arguments ``return_type``: ``give_answer`` | ``give_up_and_restart``,
            and ``final_answer``); ToolBench calls it ``Finish``.
        max_depth: most tool calls on one branch.
        max_children: most children tried per node.
        max_expansions: most model calls in all.
    """

    def __init__(
        self,
        port: AgentPort[M, T],
        selector: ToolSource[T],
        finish: T,
        *,
        max_depth: int = 4,
        max_children: int = 2,
        max_expansions: int = 16,
    ) -> None:
        self.port = port
        self.selector = selector
        self.finish = finish
        self.max_depth = max_depth
        self.max_children = max_children
        self.max_expansions = max_expansions

    def run(self, query: str) -> DFSDTResult[M]:
        """Search for an answer to ``query``."""
        result: DFSDTResult[M] = DFSDTResult(answer=None, path=[], messages=[])
        found = self._expand(query, [self.port.user_message(query)], [], 0, result)
        if found is not None:
            result.answer, result.path, result.messages = found
        return result

    def _expand(
        self, query: str, messages: list[M], path: list[str], depth: int, result: DFSDTResult[M]
    ) -> tuple[str, list[str], list[M]] | None:
        name = self.port.tool_name
        finish_name = name(self.finish)
        failed: list[str] = []
        for _ in range(self.max_children):
            if depth >= self.max_depth or result.expansions >= self.max_expansions:
                return None
            result.expansions += 1
            tools = self.selector.select(query, exclude=[*path, *failed])
            result.offered.append([name(t) for t in tools])
            reply = self.port.ask(messages, [*tools, self.finish])
            if not reply.calls:
                return reply.text, path, [*messages, reply.message]
            call = reply.calls[0]
            if call.name == finish_name:
                if call.args.get("return_type") == "give_answer":
                    return str(call.args.get("final_answer", "")), path, [*messages, reply.message]
                return None  # the model gave up on this branch: back to the parent
            tool = next((t for t in tools if name(t) == call.name), None) or self.selector.get(call.name)
            outcome = self.port.call_tool(tool, call)
            if outcome.failed:
                failed.append(call.name)
                result.failed_calls.append(call.name)
                result.backtracks += 1
                continue
            branch = [*messages, self.port.keep_call(reply, call), outcome.message]
            found = self._expand(query, branch, [*path, call.name], depth + 1, result)
            if found is not None:
                return found
            failed.append(call.name)
            result.backtracks += 1
        return None
