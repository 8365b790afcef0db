"""LangChain tool agents: the core's agent loop and DFSDT search (:mod:`toolrerank_plugins.agents`) run on a
LangChain chat model and tools. This module only converts (messages, tool calls, tool results).

``ToolBenchRetriever``, ``toolbench_name`` and ``toolbench_category`` live in :mod:`toolrerank_plugins.toolbench`
(no LangChain needed); they are re-exported here for old imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from langchain_toolrerank._convert import from_tool_call, message_text, to_tool_call, tool_outcome
from langchain_toolrerank.tools import ToolSelector
from toolrerank_plugins.agents import (
    AgentPort,
    AgentRun,
    DFSDTResult,
    DFSDTSearch,
    ModelReply,
    ToolCall,
    ToolOutcome,
    run_tool_loop,
)
from toolrerank_plugins.toolbench import ToolBenchRetriever, toolbench_category, toolbench_name

__all__ = [
    "AgentRun",
    "DFSDTResult",
    "DFSDTRunner",
    "LangChainAgentPort",
    "ToolBenchRetriever",
    "run_tool_calling_agent",
    "toolbench_category",
    "toolbench_name",
]


class LangChainAgentPort(AgentPort[BaseMessage, BaseTool]):
    """A chat model and LangChain tools as the core loops' :class:`~toolrerank_plugins.agents.AgentPort`."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def tool_name(self, tool: BaseTool) -> str:
        return tool.name

    def user_message(self, text: str) -> BaseMessage:
        return HumanMessage(text)

    def system_message(self, text: str) -> BaseMessage:
        return SystemMessage(text)

    def ask(self, messages: Sequence[BaseMessage], tools: Sequence[BaseTool]) -> ModelReply[BaseMessage]:
        reply = self.model.bind_tools(tools).invoke(list(messages))
        calls = reply.tool_calls if isinstance(reply, AIMessage) else []
        return ModelReply(reply, message_text(reply), tuple(to_tool_call(c) for c in calls))

    def call_tool(self, tool: BaseTool | None, call: ToolCall) -> ToolOutcome[BaseMessage]:
        ids = {"name": call.name, "tool_call_id": call.id or ""}
        if tool is None:
            text = f"Tool {call.name!r} is not available; call one of the tools you were given."
            return tool_outcome(ToolMessage(content=text, status="error", **ids))
        try:
            out = tool.invoke(from_tool_call(call))
        except Exception as exc:  # a failing tool is an observation for the agent, not a crash
            return tool_outcome(ToolMessage(content=f"Error: {exc}", status="error", **ids))
        return tool_outcome(out if isinstance(out, ToolMessage) else ToolMessage(str(out), **ids))

    def keep_call(self, reply: ModelReply[BaseMessage], call: ToolCall) -> BaseMessage:
        return AIMessage(content=reply.message.content, tool_calls=[from_tool_call(call)])


def run_tool_calling_agent(
    model: BaseChatModel,
    selector: ToolSelector,
    query: str,
    *,
    max_steps: int = 6,
    search_tool: bool = True,
    search_k: int = 3,
    system_prompt: str | None = None,
) -> AgentRun[BaseMessage]:
    """Answer ``query`` with a tool-calling model that only sees the tools selected for it
    (:func:`toolrerank_plugins.agents.run_tool_loop`, plus the selector's tool-search tool when ``search_tool``).

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
    port = LangChainAgentPort(model)
    return run_tool_loop(port, selector, query, finder=finder, max_steps=max_steps, system_prompt=system_prompt)


def _finish_tool(name: str) -> BaseTool:
    def finish(return_type: Literal["give_answer", "give_up_and_restart"], final_answer: str = "") -> str:
        """Finish the task: give the final answer, or give up on this branch and restart from another."""
        return final_answer

    return StructuredTool.from_function(func=finish, name=name)


class DFSDTRunner(DFSDTSearch[BaseMessage, BaseTool]):
    """ToolLLM's DFSDT (:class:`toolrerank_plugins.agents.DFSDTSearch`) on a tool-calling chat model.

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
        super().__init__(
            LangChainAgentPort(model),
            selector,
            _finish_tool(finish_tool_name),
            max_depth=max_depth,
            max_children=max_children,
            max_expansions=max_expansions,
        )
        self.model = model
