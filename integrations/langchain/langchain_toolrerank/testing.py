"""Offline fakes for tests and examples: deterministic tool implementations and a scripted tool-calling model.

Nothing here calls a network or a real model.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import keyword
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

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

    path: Path = default_catalog_path()
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
