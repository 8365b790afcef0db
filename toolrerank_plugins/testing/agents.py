"""Scripted agents for tests and examples: what a fake model does next, and a framework-free agent port.

* :class:`ToolScript` — a plan of tool calls, choosing among the offered tools (the adapters' scripted
  chat models follow it).
* :class:`ToolPlan` — the one-call plan of the LlamaIndex scripted agent LLMs.
* :class:`ScriptedAgentPort` with :class:`CallableTool` — :class:`toolrerank_plugins.agents.AgentPort` over
  plain dict messages and Python callables, to run the core agent loops with no framework.

Example:
    >>> from toolrerank_plugins.agents import BaseToolSelector, run_tool_loop
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import fake_implementation, tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    >>> specs = [engine.catalog[i] for i in engine.catalog.ids]
    >>> tools = {s.id: CallableTool(s.name, fake_implementation(s)) for s in specs}
    >>> selector = BaseToolSelector(engine, tools, name=lambda t: t.name, max_tools=2)
    >>> port = ScriptedAgentPort(ToolScript([{"tools": ["send_email"], "args": {"to": "boss"}}]))
    >>> run = run_tool_loop(port, selector, "send an email to my boss")
    >>> run.called, run.answer.startswith("Final answer:")
    (['send_email'], True)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolrerank_plugins.agents import AgentPort, BaseToolSelector, ModelReply, ToolCall, ToolOutcome


@dataclass
class ToolScript:
    """A plan of tool calls, choosing among the tools offered.

    Each plan step is ``{"tools": [names in order of preference], "args": {...}, "search": "query"}``.
    :meth:`next` takes the first step whose tools have not succeeded yet and calls the first of its tools
    that is offered and has not failed; when none is offered it calls an offered search tool
    (``search_tool_name``) with the step's ``search`` text, or gives up. After the last step it answers
    ``answer_prefix`` followed by the last tool result (or calls an offered ``finish_tool_name`` tool with
    that answer, DFSDT style).
    """

    plan: Sequence[Mapping[str, Any]]
    answer_prefix: str = "Final answer: "
    search_tool_name: str = "search_tools"
    finish_tool_name: str = "Finish"

    def next(
        self,
        offered: Collection[str],
        succeeded: Collection[str | None],
        failed: Collection[str | None],
        last_result: str | None,
    ) -> ToolCall | str:
        """The next tool call, or the final answer text, given the names of the tools offered, of those
        that succeeded and failed so far, and the last successful result."""
        for step in self.plan:
            names = list(step["tools"])
            if set(succeeded) & set(names):
                continue
            usable = [t for t in names if t in offered and t not in failed]
            if usable:
                return ToolCall(usable[0], dict(step.get("args", {})))
            if self.search_tool_name in offered:
                return ToolCall(self.search_tool_name, {"query": step.get("search", names[0])})
            return self._finish("give_up_and_restart", "", offered)
        return self._finish("give_answer", self.answer_prefix + (last_result or ""), offered)

    def _finish(self, kind: str, answer: str, offered: Collection[str]) -> ToolCall | str:
        if self.finish_tool_name in offered:
            return ToolCall(self.finish_tool_name, {"return_type": kind, "final_answer": answer})
        return answer or "I could not find a tool for this."


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


@dataclass(frozen=True)
class CallableTool:
    """A framework-free tool: ``func(**args)``; with ``artifact=True`` it returns ``(content, artifact)``."""

    name: str
    func: Callable[..., Any]
    description: str = ""
    artifact: bool = False


def search_tool(selector: BaseToolSelector[CallableTool], *, k: int = 3, name: str = "search_tools") -> CallableTool:
    """A tool-search :class:`CallableTool` over ``selector``: content ``name: description`` lines, artifact
    the names found."""

    def search(query: str) -> tuple[str, list[str]]:
        tools = selector.find(query, k)
        return "\n".join(f"{t.name}: {t.description}" for t in tools) or "no tools found", [t.name for t in tools]

    return CallableTool(name, search, "Search for more tools by describing what you need to do.", artifact=True)


class ScriptedAgentPort(AgentPort[dict[str, Any], CallableTool]):
    """An agent port with dict messages (``role``, ``content``; tool messages add ``name`` and ``failed``)
    whose model follows a :class:`ToolScript`. ``offered`` records the tool names of each model call,
    ``calls`` the calls it made."""

    def __init__(self, script: ToolScript) -> None:
        self.script = script
        self.offered: list[list[str]] = []
        self.calls: list[str] = []

    def tool_name(self, tool: CallableTool) -> str:
        return tool.name

    def user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def system_message(self, text: str) -> dict[str, Any]:
        return {"role": "system", "content": text}

    def ask(self, messages: Sequence[dict[str, Any]], tools: Sequence[CallableTool]) -> ModelReply[dict[str, Any]]:
        offered = [t.name for t in tools]
        self.offered.append(offered)
        results = [m for m in messages if m["role"] == "tool"]
        ok = [m for m in results if not m["failed"]]
        step = self.script.next(
            offered,
            {m["name"] for m in ok},
            {m["name"] for m in results if m["failed"]},
            ok[-1]["content"] if ok else None,
        )
        if isinstance(step, str):
            return ModelReply({"role": "assistant", "content": step}, step)
        self.calls.append(step.name)
        call = ToolCall(step.name, step.args, f"call_{len(self.offered)}_{step.name}")
        return ModelReply({"role": "assistant", "content": "", "calls": [call]}, "", (call,))

    def call_tool(self, tool: CallableTool | None, call: ToolCall) -> ToolOutcome[dict[str, Any]]:
        def message(content: str, failed: bool) -> dict[str, Any]:
            return {"role": "tool", "name": call.name, "content": content, "failed": failed, "id": call.id}

        if tool is None:
            return ToolOutcome(message(f"Tool {call.name!r} is not available", True), failed=True)
        try:
            out = tool.func(**call.args)
        except Exception as exc:  # a failing tool is an observation for the model
            return ToolOutcome(message(f"Error: {exc}", True), failed=True)
        content, artifact = out if tool.artifact else (out, None)
        return ToolOutcome(message(str(content), False), artifact=artifact)

    def keep_call(self, reply: ModelReply[dict[str, Any]], call: ToolCall) -> dict[str, Any]:
        return {**reply.message, "calls": [call]}
