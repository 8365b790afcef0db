"""Offline fakes for tests and examples: deterministic tool implementations and scripted agent LLMs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

# Framework-neutral fakes live in the core; re-exported here for this package's tests and examples.
from toolrerank_plugins.agents import ToolCall as ToolCall
from toolrerank_plugins.testing.agents import ToolPlan as ToolPlan
from toolrerank_plugins.testing.tools import demo_catalog as demo_catalog
from toolrerank_plugins.testing.tools import fake_implementation as fake_implementation
from toolrerank_plugins.testing.tools import fake_result as fake_result


def scripted_function_calling_llm(plan: ToolPlan) -> MockFunctionCallingLLM:
    """A function-calling LLM for ``FunctionAgent``: it sees the offered tools and follows ``plan``."""

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        tool_results = [m for m in messages if m.role == MessageRole.TOOL]
        if tool_results:
            return ChatMessage(role=MessageRole.ASSISTANT, content=plan.answer_prefix + str(tool_results[-1].content))
        offered = [t.metadata.name for t in kwargs.get("tools") or []]
        plan.offered.append(offered)
        name = plan.pick(offered)
        if name is None:
            return ChatMessage(role=MessageRole.ASSISTANT, content="No suitable tool was offered.")
        plan.calls.append(name)
        call = ToolCallBlock(tool_call_id=f"call_{len(plan.calls)}", tool_name=name, tool_kwargs=dict(plan.args))
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)


def scripted_react_llm(plan: ToolPlan) -> MockFunctionCallingLLM:
    """A text LLM for ``ReActAgent``: it reads the tools listed in the system prompt and follows ``plan``
    in ReAct format (Thought / Action / Action Input, then Answer)."""

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1].content or ""
        if last.startswith("Observation:"):
            text = "Thought: I can answer without using any more tools.\nAnswer: " + plan.answer_prefix
            text += last.removeprefix("Observation:").strip()
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])
        system = next((m.content or "" for m in messages if m.role == MessageRole.SYSTEM), "")
        offered = [line.split(":", 1)[1].strip() for line in system.splitlines() if line.startswith("> Tool Name:")]
        plan.offered.append(offered)
        name = plan.pick(offered)
        if name is None:
            text = "Thought: I can answer without using any more tools.\nAnswer: No suitable tool was offered."
        else:
            plan.calls.append(name)
            text = f"Thought: I need to use a tool.\nAction: {name}\nAction Input: {json.dumps(plan.args)}"
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])

    return MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)


class ScriptedAgentLLM:
    """A scripted agent LLM for several turns (``FunctionAgent``, ``ReActAgent``, agents of an
    ``AgentWorkflow``), which can also answer the prompts of the LLM stages.

    Turn ``i`` of the agent plays ``steps[i]``: a :class:`~toolrerank_plugins.agents.ToolCall` (call that
    tool, whether or not it was offered) or a text (the final answer, followed by the last tool output);
    after the last step it answers ``"done"``. A call that carries no tools and whose last message matches a
    ``stage_rules`` pattern (a regex) is an LLM-stage prompt: it is answered with the rule's text and
    recorded in ``stage_prompts``, not counted as a turn.

    ``offered`` records the tool names offered at each turn (``FunctionAgent``: the tools passed to the
    model; ``ReActAgent``: the ``> Tool Name:`` lines of its system prompt), ``calls`` the tools called.
    Use :attr:`llm` as the agent's ``llm``.
    """

    def __init__(
        self,
        steps: Sequence[ToolCall | str],
        *,
        react: bool = False,
        stage_rules: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.steps = list(steps)
        self.react = react
        self.stage_rules = [(re.compile(p, re.I | re.S), text) for p, text in stage_rules]
        self.offered: list[list[str]] = []
        self.calls: list[str] = []
        self.stage_prompts: list[str] = []
        self.llm = MockFunctionCallingLLM(response_generator=self._respond, is_chat_model=True)

    def _respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1].content or "" if messages else ""
        if not kwargs.get("tools"):
            for pattern, text in self.stage_rules:
                if pattern.search(last):
                    self.stage_prompts.append(last)
                    return ChatMessage(role=MessageRole.ASSISTANT, content=text)
        if self.react:
            system = next((m.content or "" for m in messages if m.role == MessageRole.SYSTEM), "")
            offered = [ln.split(":", 1)[1].strip() for ln in system.splitlines() if ln.startswith("> Tool Name:")]
        else:
            offered = [t.metadata.name for t in kwargs.get("tools") or []]
        turn = len(self.offered)
        self.offered.append(offered)
        step = self.steps[turn] if turn < len(self.steps) else "done"
        if isinstance(step, ToolCall):
            self.calls.append(step.name)
            if self.react:
                args = json.dumps(dict(step.args))
                text = f"Thought: I need to use a tool.\nAction: {step.name}\nAction Input: {args}"
                return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])
            call = ToolCallBlock(tool_call_id=f"call_{turn}", tool_name=step.name, tool_kwargs=dict(step.args))
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        answer = step + self._last_output(messages)
        if self.react:
            text = "Thought: I can answer without using any more tools.\nAnswer: " + answer
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])
        return ChatMessage(role=MessageRole.ASSISTANT, content=answer)

    def _last_output(self, messages: Sequence[ChatMessage]) -> str:
        if self.react:
            seen = [m.content or "" for m in messages if (m.content or "").startswith("Observation:")]
            return seen[-1].removeprefix("Observation:").strip() if seen else ""
        results = [m for m in messages if m.role == MessageRole.TOOL]
        return str(results[-1].content) if results else ""
