"""Offline fakes for tests and examples: deterministic tool implementations and scripted agent LLMs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

# Framework-neutral fakes live in the core; re-exported here for this package's tests and examples.
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
