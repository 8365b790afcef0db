"""Tool agents on top of tool selection: a tool-calling loop, a ToolBench retriever drop-in and a DFSDT runner.

* :func:`run_tool_calling_agent` — bind the tools selected for the request (plus a tool-search tool),
  call them, feed results back, until the model answers.
* :class:`ToolBenchRetriever` — ToolBench's ``retrieving(query, top_k, excluded_tools)`` interface over an
  engine, so ToolLLM's DFSDT / CoT runners use our pipeline unchanged.
* :class:`DFSDTRunner` — a small depth-first search decision tree (ToolLLM): every node retrieves its tools,
  a failed call or a give-up backtracks to the parent, which tries a sibling without the failed tool.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from langchain_toolrerank._convert import message_text
from langchain_toolrerank.tools import ToolSelector
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.records import ToolSpec

logger = logging.getLogger(__name__)


# -- a tool-calling agent loop ---------------------------------------------------------------------
@dataclass
class AgentRun:
    """What happened in one agent episode."""

    answer: str | None
    messages: list[BaseMessage]
    offered: list[list[str]] = field(default_factory=list)  # tool names bound on each model turn
    called: list[str] = field(default_factory=list)  # tool names the model called, in order


def _invoke_tool(tool: BaseTool | None, call: ToolCall) -> ToolMessage:
    if tool is None:
        return ToolMessage(
            content=f"Tool {call['name']!r} is not available; call one of the tools you were given.",
            name=call["name"],
            tool_call_id=call["id"] or "",
            status="error",
        )
    try:
        out = tool.invoke(call)
    except Exception as exc:  # a failing tool is an observation for the agent, not a crash
        return ToolMessage(content=f"Error: {exc}", name=call["name"], tool_call_id=call["id"] or "", status="error")
    return (
        out if isinstance(out, ToolMessage) else ToolMessage(str(out), name=call["name"], tool_call_id=call["id"] or "")
    )


def run_tool_calling_agent(
    model: BaseChatModel,
    selector: ToolSelector,
    query: str,
    *,
    max_steps: int = 6,
    search_tool: bool = True,
    search_k: int = 3,
    system_prompt: str | None = None,
) -> AgentRun:
    """Answer ``query`` with a tool-calling model that only sees the tools selected for it.

    Each turn binds the selected tools (plus the tool-search tool when ``search_tool``); tools found by a
    search are bound from the next turn on. A call to any tool in the selector resolves, so a tool the
    model was offered is always found.

    Example:
        >>> from toolrerank_plugins.engine import Engine, EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
        >>> selector = ToolSelector.from_engine(engine, impls, max_tools=2)
        >>> model = ScriptedToolCallingModel(plan=[{"tools": ["send_email"], "args": {"to": "boss"}}])
        >>> run = run_tool_calling_agent(model, selector, "send an email to my boss")
        >>> run.called, run.answer.startswith("Final answer:")
        (['send_email'], True)
    """
    finder = selector.search_tool(k=search_k) if search_tool else None
    active = {t.name: t for t in selector.select(query)}
    messages: list[BaseMessage] = [SystemMessage(system_prompt)] if system_prompt else []
    messages.append(HumanMessage(query))
    run = AgentRun(answer=None, messages=messages)
    for _ in range(max_steps):
        offered = [*active.values(), *([finder] if finder else [])]
        run.offered.append([t.name for t in offered])
        reply = model.bind_tools(offered).invoke(messages)
        messages.append(reply)
        calls = reply.tool_calls if isinstance(reply, AIMessage) else []
        if not calls:
            run.answer = message_text(reply)
            return run
        for call in calls:
            run.called.append(call["name"])
            tool = finder if finder is not None and call["name"] == finder.name else selector.get(call["name"])
            result = _invoke_tool(tool, call)
            messages.append(result)
            if tool is finder and isinstance(result.artifact, list):
                for name in result.artifact:
                    found = selector.get(name)
                    if found is not None:
                        active.setdefault(name, found)
    logger.warning("agent stopped after max_steps=%d without an answer", max_steps)
    return run


# -- ToolBench's retriever interface ---------------------------------------------------------------
_RESERVED = {"from", "class", "return", "false", "true", "id", "and"}


def toolbench_name(name: str) -> str:
    """A tool or API name the way ToolBench files it: lower case, ``_`` for other characters, ``get_`` before
    a leading digit, ``is_`` before a Python-reserved word."""
    s = re.sub(r"[^\u4e00-\u9fa5A-Za-z0-9_]", "_", name)
    s = re.sub(r"_+", "_", s).lower().strip("_")
    if s and s[0].isdigit():
        s = "get_" + s
    return "is_" + s if s in _RESERVED else s


def toolbench_category(category: str) -> str:
    """A category name the way ToolBench files it (spaces, commas and slashes become ``_``)."""
    s = re.sub(r"[ ,/]", "_", category)
    return s.replace("__", "_")


class ToolBenchRetriever:
    """Drop-in for ToolBench's ``ToolRetriever``: ``retrieving(query, top_k, excluded_tools)``.

    Returns ``[{"category", "tool_name", "api_name", "tool_id", "score"}, ...]`` from the engine's full
    pipeline. ``excluded_tools`` maps a category to tool names (ToolBench passes the tools of the query
    under test); they are left out and the search goes deep enough that ``top_k`` others come back.

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
        self._sizes: dict[tuple[str, str], int] = {}
        self._sized_for = -1

    def _names(self, spec: ToolSpec) -> tuple[str, str, str]:
        category, tool = spec.category or "", spec.tool or spec.name
        if not self.standardize:
            return category, tool, spec.name
        return toolbench_category(category), toolbench_name(tool), toolbench_name(spec.name)

    def _tool_sizes(self) -> dict[tuple[str, str], int]:
        if self._sized_for != len(self.engine.catalog):  # the catalog changed (engine.add/remove)
            sizes: dict[tuple[str, str], int] = {}
            for tid in self.engine.catalog.ids:
                key = self._names(self.engine.catalog[tid])[:2]
                sizes[key] = sizes.get(key, 0) + 1
            self._sizes, self._sized_for = sizes, len(self.engine.catalog)
        return self._sizes

    def retrieving(
        self, query: str, top_k: int = 5, excluded_tools: Mapping[str, Sequence[str]] | None = None
    ) -> list[dict[str, Any]]:
        excluded = {(c, t) for c, tools in (excluded_tools or {}).items() for t in tools}
        sizes = self._tool_sizes()
        depth = top_k + sum(sizes.get(key, 0) for key in excluded)
        out: list[dict[str, Any]] = []
        for st in self.engine.search(query, top_k=depth):
            category, tool, api = self._names(st.tool)
            if (category, tool) in excluded:
                continue
            out.append(
                {"category": category, "tool_name": tool, "api_name": api, "tool_id": st.tool.id, "score": st.score}
            )
            if len(out) == top_k:
                break
        return out


# -- DFSDT -------------------------------------------------------------------------------------------
@dataclass
class DFSDTResult:
    """The outcome of a DFSDT search: the answer (None when every branch failed) and how it went."""

    answer: str | None
    path: list[str]  # tool calls on the successful branch
    messages: list[BaseMessage]
    expansions: int = 0
    backtracks: int = 0
    failed_calls: list[str] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)  # tools retrieved at each expansion


def _finish_tool(name: str) -> BaseTool:
    def finish(return_type: Literal["give_answer", "give_up_and_restart"], final_answer: str = "") -> str:
        """Finish the task: give the final answer, or give up on this branch and restart from another."""
        return final_answer

    return StructuredTool.from_function(func=finish, name=name)


class DFSDTRunner:
    """Depth-first search over tool-call decisions (ToolLLM's DFSDT), retrieving tools at every node.

    At a node the runner retrieves the tools for the query minus the tools already used on the path and
    those that failed at this node, offers them with a ``Finish`` tool, and runs the model's call. A failed
    call, a ``give_up_and_restart`` or a dead subtree sends the search back up to try a sibling.

    Args:
        model: a tool-calling chat model.
        selector: selects the tools of each node.
        max_depth: most tool calls on one branch.
        max_children: most children tried per node.
        max_expansions: most model calls in all.
        finish_tool_name: name of the finishing tool (ToolBench calls it ``Finish``).
    """

    def __init__(
        self,
        model: BaseChatModel,
        selector: ToolSelector,
        *,
        max_depth: int = 4,
        max_children: int = 2,
        max_expansions: int = 16,
        finish_tool_name: str = "Finish",
    ) -> None:
        self.model = model
        self.selector = selector
        self.max_depth = max_depth
        self.max_children = max_children
        self.max_expansions = max_expansions
        self.finish = _finish_tool(finish_tool_name)

    def run(self, query: str) -> DFSDTResult:
        """Search for an answer to ``query``."""
        result = DFSDTResult(answer=None, path=[], messages=[])
        messages: list[BaseMessage] = [HumanMessage(query)]
        found = self._expand(query, messages, [], 0, result)
        if found is not None:
            result.answer, result.path, result.messages = found
        return result

    def _expand(
        self, query: str, messages: list[BaseMessage], path: list[str], depth: int, result: DFSDTResult
    ) -> tuple[str, list[str], list[BaseMessage]] | None:
        failed: list[str] = []
        for _ in range(self.max_children):
            if depth >= self.max_depth or result.expansions >= self.max_expansions:
                return None
            result.expansions += 1
            tools = self.selector.select(query, exclude=[*path, *failed])
            offered = [*tools, self.finish]
            result.offered.append([t.name for t in tools])
            reply = self.model.bind_tools(offered).invoke(messages)
            calls = reply.tool_calls if isinstance(reply, AIMessage) else []
            if not calls:
                return message_text(reply), path, [*messages, reply]
            call = calls[0]
            if call["name"] == self.finish.name:
                if call["args"].get("return_type") == "give_answer":
                    return str(call["args"].get("final_answer", "")), path, [*messages, reply]
                return None  # the model gave up on this branch: back to the parent
            tool = next((t for t in tools if t.name == call["name"]), None) or self.selector.get(call["name"])
            observation = _invoke_tool(tool, call)
            if observation.status == "error":
                failed.append(call["name"])
                result.failed_calls.append(call["name"])
                result.backtracks += 1
                continue
            reply_one = AIMessage(content=reply.content, tool_calls=[call])
            found = self._expand(query, [*messages, reply_one, observation], [*path, call["name"]], depth + 1, result)
            if found is not None:
                return found
            failed.append(call["name"])
            result.backtracks += 1
        return None
