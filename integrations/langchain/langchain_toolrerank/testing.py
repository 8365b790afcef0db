"""Offline fakes for tests and examples: deterministic tool implementations and a scripted tool-calling model.

Nothing here calls a network or a real model.
"""

from __future__ import annotations

import re
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

from langchain_toolrerank._convert import message_text

# Framework-neutral fakes live in the core; re-exported here for this package's tests and examples.
from toolrerank_plugins.testing.agents import ToolScript
from toolrerank_plugins.testing.tools import demo_catalog as demo_catalog
from toolrerank_plugins.testing.tools import fake_implementation as fake_implementation
from toolrerank_plugins.testing.tools import fake_result as fake_result


class ScriptedToolCallingModel(BaseChatModel):
    """A chat model that follows a plan of tool calls, choosing among the tools it is offered.

    The plan and what the model does next are :class:`toolrerank_plugins.testing.agents.ToolScript`'s
    (``{"tools": [names in order of preference], "args": {...}, "search": "query"}`` per step), over the
    tools bound on the turn and the ``ToolMessage`` results so far.

    ``offered`` records the tool names bound on each turn; ``calls`` the tool calls it made.

    ``replies`` answers other prompts, such as an LLM stage's: ``(regex, answer)`` pairs tried on the text of
    the call's messages; a match answers ``answer`` as plain text and records the text in ``prompted``
    (not in ``offered``).
    """

    plan: list[dict[str, Any]]
    answer_prefix: str = "Final answer: "
    search_tool_name: str = "search_tools"
    finish_tool_name: str = "Finish"
    offered: list[list[str]] = Field(default_factory=list)
    calls: list[str] = Field(default_factory=list)
    replies: list[tuple[str, str]] = Field(default_factory=list)
    prompted: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-calling"

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _next(self, messages: list[BaseMessage], offered: list[str]) -> AIMessage:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        ok = [m for m in results if m.status != "error"]
        script = ToolScript(self.plan, self.answer_prefix, self.search_tool_name, self.finish_tool_name)
        step = script.next(
            offered,
            {m.name for m in ok},
            {m.name for m in results if m.status == "error"},
            str(ok[-1].content) if ok else None,
        )
        if isinstance(step, str):
            return AIMessage(content=step)
        self.calls.append(step.name)
        n = len([m for m in messages if isinstance(m, AIMessage)])
        return AIMessage(
            content="", tool_calls=[{"name": step.name, "args": dict(step.args), "id": f"call_{n}_{step.name}"}]
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = "\n".join(message_text(m) for m in messages)
        for pattern, answer in self.replies:
            if re.search(pattern, text, re.S):
                self.prompted.append(text)
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])
        offered = [t["function"]["name"] for t in kwargs.get("tools", [])]
        self.offered.append(offered)
        return ChatResult(generations=[ChatGeneration(message=self._next(messages, offered))])
