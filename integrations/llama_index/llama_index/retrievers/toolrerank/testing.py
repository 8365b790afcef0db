"""Offline fakes for tests and examples: deterministic tool implementations and scripted agent LLMs."""

from __future__ import annotations

import hashlib
import inspect
import json
import keyword
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.records import ToolSpec

_PY_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def demo_catalog() -> Catalog:
    """The bundled default catalog when it is installed, else the tiny test catalog."""
    from toolrerank_plugins.loaders import load_catalog
    from toolrerank_plugins.testing import default_catalog_path, tiny_catalog

    path = default_catalog_path()
    return load_catalog(path) if (path / "tools.jsonl").is_file() else tiny_catalog()


def fake_result(spec: ToolSpec, arguments: dict[str, Any]) -> str:
    """The deterministic JSON answer of :func:`fake_implementation` for these arguments."""
    payload = json.dumps({"id": spec.id, "args": arguments}, sort_keys=True, default=str)
    token = f"{spec.name}-{hashlib.sha256(payload.encode('utf-8')).hexdigest()[:8]}"
    return json.dumps({"api": spec.id, "arguments": arguments, "result": token}, sort_keys=True, default=str)


def fake_implementation(spec: ToolSpec) -> Callable[..., str]:
    """A Python callable for ``spec`` with a real signature (from its JSON Schema) and a deterministic
    answer, so catalog APIs can run as tools offline."""
    props = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", ()))
    params = []
    for name, prop in props.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            continue  # the callable still takes it through **kwargs
        ann = _PY_TYPES.get(str(prop.get("type")), Any)
        default = inspect.Parameter.empty if name in required else None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

    def call(**kwargs: Any) -> str:
        return fake_result(spec, {k: v for k, v in kwargs.items() if v is not None})

    call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    call.__name__ = spec.name if spec.name.isidentifier() else "call"
    call.__doc__ = spec.description or spec.name
    return call


@dataclass
class ToolPlan:
    """What a scripted agent LLM does: call the first offered tool of ``tools`` with ``args``, then answer
    ``answer_prefix`` + the tool's output. ``offered`` and ``calls`` record what happened."""

    tools: Sequence[str]
    args: dict[str, Any] = field(default_factory=dict)
    answer_prefix: str = "Final answer: "
    offered: list[list[str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def pick(self, offered: Sequence[str]) -> str | None:
        return next((t for t in self.tools if t in offered), None)


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
