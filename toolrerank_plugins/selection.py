"""Tool selection inside a running agent: the query from the conversation, one selection per episode, and the
tools the agent found itself.

An agent framework calls its model several times per user request: once after the user speaks, then once after
each round of tool results. This module calls those calls an *episode* (the turns from the last user message
on) and decides, framework-neutrally, which tools each model call is offered:

* :func:`conversation_query` — the last user message plus a few earlier user/assistant turns, so a follow-up
  ("do it", "and tomorrow?") still retrieves the tools of the conversation's subject.
* :class:`ConversationToolSelector` — selects once per episode through a
  :class:`~toolrerank_plugins.agents.BaseToolSelector` (pins and cap included) and keeps that selection for the
  episode's later model calls, so the tools do not change under the agent while it works through tool results;
  tools a tool-search call found in the episode are added to it. The selection is a small
  :class:`Selection` record that the framework keeps in its own state (``to_state`` / ``from_state``); its
  ``reason`` says why, when the engine ranked too few tools and a fallback filled the selection.
* Cache-stable offers (:func:`stable_offer`, :class:`OfferLog`, ``ConversationToolSelector(stable=True)``):
  within a conversation a tool once offered keeps its position and newly selected tools are appended, so the
  tool block at the start of the prompt stays a prefix of the next turn's and a provider's prompt cache keeps
  it. Every integration (LangChain middleware, LlamaIndex tool retriever, the MCP proxy, the provider
  helpers, Pydantic AI) uses these; none orders tools itself.

Adapters (``langchain_toolrerank.ToolRerankMiddleware``) only convert their messages into :class:`Turn` records
and their tool lists; no framework is imported here.

Example:
    >>> from toolrerank_plugins.agents import BaseToolSelector
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    >>> tools = {i: engine.catalog[i].name for i in engine.catalog.ids}  # a tool may be anything
    >>> chooser = ConversationToolSelector(BaseToolSelector(engine, tools, name=str, max_tools=2))
    >>> turns = [Turn("user", "what is the weather forecast in Paris?"), Turn("assistant", "Shall I look?"),
    ...          Turn("user", "yes, do it")]
    >>> offered, selection = chooser.select(turns)
    >>> offered
    ['forecast', 'current_weather']
    >>> turns += [Turn("assistant"), Turn("tool", "sunny", tool_name="forecast")]  # same episode: kept
    >>> chooser.select(turns, selection)[0]
    ['forecast', 'current_weather']
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from toolrerank_plugins.agents import BaseToolSelector, Ranking, Selected
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.llm._stage import LLMStage
from toolrerank_plugins.records import ScoredTool, renumber, replace_surrogates

logger = logging.getLogger(__name__)

T = TypeVar("T")

Role = Literal["user", "assistant", "tool"]

#: What a cache-stable offer does when appending the new tools would pass ``max_offered``: ``"restart"`` keeps,
#: in their order, the offered tools the fresh selection still has (pins first) and appends the rest of it
#: (the prefix changes: one cache miss, the fresh selection offered whole); ``"keep"`` keeps every offered
#: tool and appends only as many new ones as fit (the prefix never changes; the selection's last tools wait).
OnFull = Literal["restart", "keep"]


@dataclass(frozen=True)
class Offer:
    """The tools offered on one turn of a conversation, in cache-stable order.

    ``names``: every tool offered now, in order; ``added``: the ones appended on this turn; ``restarted``: the
    offered list began again (``on_full="restart"``), so the previous turn's list is not a prefix of this one;
    ``dropped``: selected tools left out because the list was full (``on_full="keep"``).
    """

    names: tuple[str, ...]
    added: tuple[str, ...] = ()
    restarted: bool = False
    dropped: tuple[str, ...] = ()


def stable_offer(
    previous: Sequence[str],
    selected: Sequence[str],
    *,
    max_offered: int | None = None,
    on_full: OnFull = "restart",
) -> Offer:
    """The tools to offer now, given those offered before in the conversation and this turn's selection.

    A tool offered before keeps its position; the selected tools not offered yet are appended in their
    order (pins first, then rank order, as a selector returns them). The result depends on nothing else, so
    the same conversation gives the same lists, byte for byte. ``max_offered`` bounds the list (``None``:
    unbounded, as providers' deferred tool loading grows a conversation's tools); ``on_full`` says what
    happens when the new tools do not fit (:data:`OnFull`).

    Example:
        >>> stable_offer(["login", "forecast"], ["login", "send_email", "forecast"]).names
        ('login', 'forecast', 'send_email')
        >>> offer = stable_offer(["login", "forecast", "geocode"], ["login", "send_email"], max_offered=3)
        >>> offer.names, offer.restarted
        (('login', 'send_email'), True)
        >>> kept = stable_offer(["login", "forecast"], ["login", "send_email", "list_inbox"], max_offered=3,
        ...                     on_full="keep")
        >>> kept.names, kept.dropped
        (('login', 'forecast', 'send_email'), ('list_inbox',))
    """
    if max_offered is not None and max_offered < 1:
        raise ValueError(f"max_offered must be >= 1 or None, got {max_offered}")
    if on_full not in ("restart", "keep"):
        raise ValueError(f"on_full must be 'restart' or 'keep', got {on_full!r}")
    before = list(dict.fromkeys(previous))
    fresh = list(dict.fromkeys(selected))
    seen = set(before)
    new = [n for n in fresh if n not in seen]
    if max_offered is None or len(before) + len(new) <= max_offered:
        return Offer((*before, *new), tuple(new))
    if on_full == "keep":
        room = max(0, max_offered - len(before))
        return Offer((*before, *new[:room]), tuple(new[:room]), dropped=tuple(new[room:]))
    chosen = set(fresh[:max_offered])
    kept = [n for n in before if n in chosen]
    names = (*kept, *(n for n in fresh[:max_offered] if n not in seen))
    return Offer(names, tuple(n for n in names if n not in seen), restarted=True)


class OfferLog:
    """The tools offered so far in one conversation, kept in cache-stable order (:func:`stable_offer`).

    For integrations that keep a conversation's state themselves (the MCP proxy per client session, the
    provider helpers, a LlamaIndex tool retriever per agent): :meth:`offer` takes a turn's selection and
    returns the whole list to offer. Thread-safe.

    Example:
        >>> log = OfferLog(max_offered=4)
        >>> log.offer(["login", "forecast"]).names
        ('login', 'forecast')
        >>> log.offer(["login", "send_email"]).names
        ('login', 'forecast', 'send_email')
        >>> log.names
        ('login', 'forecast', 'send_email')
    """

    def __init__(self, *, max_offered: int | None = None, on_full: OnFull = "restart") -> None:
        stable_offer((), (), max_offered=max_offered, on_full=on_full)  # checks the arguments
        self.max_offered = max_offered
        self.on_full: OnFull = on_full
        self._names: tuple[str, ...] = ()
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        """Every tool offered so far, in offer order."""
        return self._names

    def offer(self, selected: Sequence[str]) -> Offer:
        """Record this turn's selection and return what to offer now."""
        with self._lock:
            result = stable_offer(self._names, selected, max_offered=self.max_offered, on_full=self.on_full)
            self._names = result.names
        if result.restarted:
            logger.info("offered tools restart: %d offered, max_offered=%s", len(self._names), self.max_offered)
        return result

    def forget(self, names: Iterable[str]) -> None:
        """Take tools out of the list (e.g. ones no longer in the catalog); the others keep their order."""
        gone = set(names)
        with self._lock:
            self._names = tuple(n for n in self._names if n not in gone)

    def reset(self) -> None:
        """Begin a new conversation: nothing offered yet."""
        with self._lock:
            self._names = ()

    def __repr__(self) -> str:
        return f"OfferLog({len(self._names)} offered, max_offered={self.max_offered}, on_full={self.on_full!r})"


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, as the selection sees it.

    Args:
        role: ``"user"``, ``"assistant"`` or ``"tool"`` (a tool's result); system messages are left out.
        text: the message's plain text (an assistant turn that only calls tools has none).
        tool_name: for a tool result, the tool that produced it.
        found: for a tool-search tool's result, the names of the tools it found.
    """

    role: Role
    text: str = ""
    tool_name: str | None = None
    found: tuple[str, ...] = ()


def last_user_turn(turns: Sequence[Turn]) -> int | None:
    """Index of the last user turn (where the current episode starts), or ``None``."""
    return next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == "user"), None)


def conversation_query(turns: Sequence[Turn], history_turns: int = 2, *, max_turn_chars: int = 500) -> str:
    """The retrieval query for the current episode: up to ``history_turns`` earlier user/assistant turns with
    text (oldest first, each cut to ``max_turn_chars``), then the last user message, one per line.

    Tool results never enter the query; ``history_turns=0`` uses the last user message alone. Without a user
    turn the query is ``""``: the engine ranks nothing, so the pinned tools are offered, or without pins the
    catalog's first tools (:meth:`~toolrerank_plugins.agents.BaseToolSelector.select`).

    Example:
        >>> turns = [Turn("user", "weather in Paris?"), Turn("assistant", "Today or tomorrow?"),
        ...          Turn("user", "tomorrow")]
        >>> conversation_query(turns)
        'weather in Paris?\\nToday or tomorrow?\\ntomorrow'
        >>> conversation_query(turns, history_turns=0)
        'tomorrow'
    """
    if history_turns < 0:
        raise ValueError(f"history_turns must be >= 0, got {history_turns}")
    start = last_user_turn(turns)
    if start is None:
        return ""
    # earlier turns are context (an LLM's replies among them): a lone surrogate there becomes U+FFFD instead of
    # failing every later search of the conversation; the current request is checked by the search itself
    earlier = [
        replace_surrogates(t.text.strip()[:max_turn_chars])
        for t in turns[:start]
        if t.role != "tool" and t.text.strip()
    ]
    return "\n".join([*earlier[max(0, len(earlier) - history_turns) :], turns[start].text.strip()])


@dataclass(frozen=True)
class Selection:
    """The tools selected for one episode (by name, pins first) and the query they were selected for.

    ``episode`` identifies the episode (a hash of where it starts and its query): a later model call of the
    same episode reuses the selection instead of searching again. ``reason`` says why a fallback filled the
    selection when the engine ranked fewer tools than asked (see
    :meth:`~toolrerank_plugins.agents.BaseToolSelector.select`); ``None`` when it did not.
    """

    episode: str
    names: tuple[str, ...]
    query: str
    reason: str | None = None

    def to_state(self) -> dict[str, Any]:
        """A JSON-able dict for the framework's agent state."""
        return {"episode": self.episode, "names": list(self.names), "query": self.query, "reason": self.reason}

    @classmethod
    def from_state(cls, data: Any) -> Selection | None:
        """The selection saved by :meth:`to_state`; ``None`` for anything else (no selection yet)."""
        if not isinstance(data, Mapping):
            return None
        episode, names, query = data.get("episode"), data.get("names"), data.get("query", "")
        if not (isinstance(episode, str) and isinstance(names, list) and isinstance(query, str)):
            return None
        if not all(isinstance(n, str) for n in names):
            return None
        reason = data.get("reason")  # absent in a state saved before reasons were recorded
        return cls(episode, tuple(names), query, reason if isinstance(reason, str) else None)


#: ``stage_scores`` key of a tool :func:`stable_ranking` keeps from an earlier turn (this turn did not rank it)
OFFERED_BEFORE = "offered_before"


def stable_ranking(log: OfferLog, ranking: Ranking, catalog: Catalog) -> Ranking:
    """A turn's ranking in the conversation's cache-stable order (``log`` holds catalog ids): the tools offered
    before keep their positions, this turn's new ones are appended; a tool kept from an earlier turn that this
    one did not rank has score 0 and the stage score :data:`OFFERED_BEFORE`.

    Example:
        >>> from toolrerank_plugins.records import ScoredTool
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> catalog, log = tiny_catalog(), OfferLog()
        >>> first = Ranking([ScoredTool(catalog["Weather/SkyCast/forecast"], 0.9, 1)])
        >>> [st.tool.name for st in stable_ranking(log, first, catalog).results]
        ['forecast']
        >>> second = Ranking([ScoredTool(catalog["Mail/PostBox/send_email"], 0.8, 1)])
        >>> [(st.tool.name, st.rank) for st in stable_ranking(log, second, catalog).results]
        [('forecast', 1), ('send_email', 2)]
    """
    by_id = {st.tool.id: st for st in ranking.results}
    offer = log.offer([st.tool.id for st in ranking.results])
    out = [
        by_id[i] if i in by_id else ScoredTool(catalog[i], 0.0, 0, {OFFERED_BEFORE: 0.0})
        for i in offer.names
        if i in by_id or i in catalog
    ]
    return Ranking(renumber(out), ranking.reason)


def uses_llm(engine: Engine) -> bool:
    """Whether the engine's pipeline has an LLM stage (query generation, QTA rewriting, feedback loop): only
    then does handing a search the agent's model (``llm=``) change anything."""
    return any(isinstance(s, LLMStage) for s in engine.stages)


class ConversationToolSelector(Generic[T]):
    """The tools for each model call of an agent: one selection per episode, plus what the agent searched for.

    Args:
        selector: selects tools for a query (engine search, ``always_include`` pins, ``max_tools`` cap).
        history_turns: earlier user/assistant turns added to the query (see :func:`conversation_query`).
        search_tool_name: the name of the tool-search tool whose results (:attr:`Turn.found`) add tools to the
            episode's selection; ``None``: no tool search.
        stable: cache-stable offers across episodes: a new episode keeps the tools offered so far in the
            conversation in their positions (tools a search found included) and appends its newly selected
            ones (:func:`stable_offer`), instead of replacing the selection. ``False`` (the default): each
            episode offers its own selection.
        max_offered: with ``stable``, most tools offered in a conversation (``None``: unbounded; at least the
            selector's ``max_tools``).
        on_full: with ``stable``, what happens when a selection's new tools do not fit (:data:`OnFull`).

    Example (cache-stable):
        >>> from toolrerank_plugins.engine import Engine, EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> tools = {i: engine.catalog[i].name for i in engine.catalog.ids}
        >>> selector = BaseToolSelector(engine, tools, name=str, max_tools=2)
        >>> chooser = ConversationToolSelector(selector, history_turns=0, stable=True)
        >>> turns = [Turn("user", "what is the weather forecast in Paris?")]
        >>> offered, selection = chooser.select(turns)
        >>> offered
        ['forecast', 'current_weather']
        >>> turns += [Turn("assistant", "Sunny."), Turn("user", "send an email message to my boss")]
        >>> chooser.select(turns, selection)[0]  # the weather tools keep their places, the mail tools follow
        ['forecast', 'current_weather', 'send_email', 'delete_email']
    """

    def __init__(
        self,
        selector: BaseToolSelector[T],
        *,
        history_turns: int = 2,
        search_tool_name: str | None = "search_tools",
        stable: bool = False,
        max_offered: int | None = None,
        on_full: OnFull = "restart",
    ) -> None:
        if history_turns < 0:
            raise ValueError(f"history_turns must be >= 0, got {history_turns}")
        stable_offer((), (), max_offered=max_offered, on_full=on_full)  # checks the arguments
        if max_offered is not None and max_offered < selector.max_tools:
            raise ValueError(f"max_offered={max_offered} must be >= the selector's max_tools={selector.max_tools}")
        self.selector = selector
        self.history_turns = history_turns
        self.search_tool_name = search_tool_name
        self.stable = stable
        self.max_offered = max_offered
        self.on_full: OnFull = on_full

    def episode(self, turns: Sequence[Turn]) -> tuple[str, str, list[str]]:
        """``(episode key, query, names found by tool searches in the episode)`` for the current turns."""
        query = conversation_query(turns, self.history_turns)
        start = last_user_turn(turns)
        payload = json.dumps([start, query], ensure_ascii=False)
        key = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        found: list[str] = []
        if start is not None and self.search_tool_name is not None:
            for t in turns[start + 1 :]:
                if t.role == "tool" and t.tool_name == self.search_tool_name:
                    found.extend(n for n in t.found if n not in found)
        return key, query, found

    def _offer(self, selection: Selection, found: Sequence[str]) -> list[T]:
        chosen: dict[str, T] = {}
        for n in [*selection.names, *found]:
            tool = self.selector.get(n)
            if tool is not None:  # a name the catalog no longer has is skipped
                chosen.setdefault(n, tool)
        return list(chosen.values())

    def _selection(self, key: str, query: str, selected: Selected[T], previous: Selection | None) -> Selection:
        names = tuple(self.selector.tool_name(t) for t in selected.tools)
        if self.stable and previous is not None:
            names = stable_offer(previous.names, names, max_offered=self.max_offered, on_full=self.on_full).names
        return Selection(key, names, query, selected.reason)

    def _reuse(self, turns: Sequence[Turn], previous: Selection | None) -> tuple[Selection | None, str, str, list[str]]:
        key, query, found = self.episode(turns)
        kept = previous if previous is not None and previous.episode == key else None
        if kept is not None and self.stable and found:
            # the tools a search found are offered from now on: they join the conversation's list, in place
            names = stable_offer(kept.names, found, max_offered=self.max_offered, on_full=self.on_full).names
            if names != kept.names:
                kept = Selection(kept.episode, names, kept.query, kept.reason)
        return kept, key, query, found

    def select(
        self, turns: Sequence[Turn], previous: Selection | None = None, *, llm: Any = None
    ) -> tuple[list[T], Selection]:
        """The tools to offer now and the episode's selection (to keep in the framework's state).

        ``previous`` is the selection kept from an earlier model call: when it belongs to the same episode it
        is reused without a search. ``llm``: the LLM port the search's LLM stages use (the agent's model).
        """
        kept, key, query, found = self._reuse(turns, previous)
        if kept is None:
            kept = self._selection(key, query, self.selector.select_detailed(query, llm=llm), previous)
        return self._offer(kept, found), kept

    async def aselect(
        self, turns: Sequence[Turn], previous: Selection | None = None, *, llm: Any = None
    ) -> tuple[list[T], Selection]:
        """Async twin of :meth:`select` (same tools)."""
        kept, key, query, found = self._reuse(turns, previous)
        if kept is None:
            kept = self._selection(key, query, await self.selector.aselect_detailed(query, llm=llm), previous)
        return self._offer(kept, found), kept

    def replace_catalog_tools(
        self, current: Sequence[Any], chosen: Sequence[T], name: Callable[[Any], Any]
    ) -> list[Any]:
        """The tool list for the model: ``chosen``, then the tools of ``current`` that are not catalog tools
        (``name(tool)`` not a catalog tool's name: the agent's other tools, provider tools, a tool-search tool)
        in their order. Every catalog tool in ``current`` is replaced by the selection."""
        catalog = self.selector.tools_by_name
        return [*chosen, *(t for t in current if name(t) not in catalog)]
