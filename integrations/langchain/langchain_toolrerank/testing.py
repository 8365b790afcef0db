"""Offline fakes for tests and examples: deterministic tool implementations and a scripted tool-calling model.

Nothing here calls a network or a real model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

# Framework-neutral fakes live in the core; re-exported here for this package's tests and examples.
from toolrerank_plugins.testing.tools import demo_catalog as demo_catalog
from toolrerank_plugins.testing.tools import fake_implementation as fake_implementation
from toolrerank_plugins.testing.tools import fake_result as fake_result


class ScriptedToolCallingModel(BaseChatModel):
    """A chat model that follows a plan of tool calls, choosing among the tools it is offered.

    Each plan step is ``{"tools": [names in order of preference], "args": {...}, "search": "query"}``.
    On every turn the model takes the first step not yet done and calls the first of its tools that is
    bound and has not failed; when none is bound it calls a bound search tool (``search_tool_name``) with
    the step's ``search`` text, or gives up. After the last step it answers ``answer_prefix`` followed
    by the last tool result (or calls a bound ``finish_tool_name`` tool with that answer, DFSDT style).

    ``offered`` records the tool names bound on each turn; ``calls`` the tool calls it made.
    """

    plan: list[dict[str, Any]]
    answer_prefix: str = "Final answer: "
    search_tool_name: str = "search_tools"
    finish_tool_name: str = "Finish"
    offered: list[list[str]] = Field(default_factory=list)
    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-calling"

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _next(self, messages: list[BaseMessage], offered: list[str]) -> AIMessage:
        ok = {m.name for m in messages if isinstance(m, ToolMessage) and m.status != "error"}
        failed = {m.name for m in messages if isinstance(m, ToolMessage) and m.status == "error"}
        results = [m for m in messages if isinstance(m, ToolMessage) and m.status != "error"]
        n = len([m for m in messages if isinstance(m, AIMessage)])
        for step in self.plan:
            names = list(step["tools"])
            if ok & set(names):
                continue
            usable = [t for t in names if t in offered and t not in failed]
            if usable:
                return self._call(usable[0], dict(step.get("args", {})), n)
            if self.search_tool_name in offered:
                return self._call(self.search_tool_name, {"query": step.get("search", names[0])}, n)
            return self._finish("give_up_and_restart", "", offered, n)
        answer = self.answer_prefix + (str(results[-1].content) if results else "")
        return self._finish("give_answer", answer, offered, n)

    def _call(self, name: str, args: dict[str, Any], n: int) -> AIMessage:
        self.calls.append(name)
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{n}_{name}"}])

    def _finish(self, kind: str, answer: str, offered: list[str], n: int) -> AIMessage:
        if self.finish_tool_name in offered:
            return self._call(self.finish_tool_name, {"return_type": kind, "final_answer": answer}, n)
        return AIMessage(content=answer or "I could not find a tool for this.")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        offered = [t["function"]["name"] for t in kwargs.get("tools", [])]
        self.offered.append(offered)
        return ChatResult(generations=[ChatGeneration(message=self._next(messages, offered))])
