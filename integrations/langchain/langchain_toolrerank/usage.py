"""Opt-in usage recording for LangChain agents: a ``create_agent`` middleware that logs each request and the
tool calls that served it (with success) to a :class:`toolrerank_plugins.usage.UsageRecorder`.

The log is what ``engine.learn`` / ``toolrerank learn ENGINE --log FILE`` learns from (``docs/usage.md``).
Nothing is recorded unless you add the middleware.

Example (offline, with a scripted model)::

    from langchain.agents import create_agent
    from langchain_toolrerank.usage import UsageRecorderMiddleware

    recorder = UsageRecorderMiddleware("usage.jsonl", engine=engine)   # tool names -> catalog ids
    agent = create_agent(model, tools, middleware=[recorder])
    agent.invoke({"messages": [{"role": "user", "content": "weather in Oslo"}]})
    # usage.jsonl: {"query": "weather in Oslo", "relevant": ["Weather/SkyCast/forecast"], "calls": [...], ...}
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from toolrerank_plugins.interop import ids_by_function_name
from toolrerank_plugins.usage import UsageRecord, UsageRecorder

__all__ = ["UsageRecorderMiddleware"]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [p.get("text") if isinstance(p, Mapping) else p for p in content]
    return " ".join(p for p in parts if isinstance(p, str) and p)  # a non-text block is not the request


class UsageRecorderMiddleware(AgentMiddleware):
    """Records each agent run: the user's request and the tools called for it, failed calls marked.

    Args:
        recorder: a :class:`~toolrerank_plugins.usage.UsageRecorder` or the path of its log.
        engine: the engine whose tools the agent calls; maps the tool-calling names
            (:func:`~toolrerank_plugins.interop.function_names`) back to catalog ids. Tools made by this
            package carry their id (metadata ``tool_id``), which is used first.
        tool_ids: explicit ``{tool name: catalog id}`` (wins over ``engine``); other names are logged as
            they are (``learn`` skips and counts ids its catalog does not know).
        skip_tools: tool names that never serve a request (the agent's tool-search tool).

    A call fails when the tool raised or returned a ``ToolMessage`` with ``status="error"``. The record is
    written when the run ends (``after_agent``), one per invocation: the last human message and the calls
    made after it. A run without tool calls is not recorded.
    """

    def __init__(
        self,
        recorder: UsageRecorder | str | Path,
        *,
        engine: Any = None,
        tool_ids: Mapping[str, str] | None = None,
        skip_tools: Iterable[str] = ("search_tools",),
    ) -> None:
        super().__init__()
        self.recorder = recorder if isinstance(recorder, UsageRecorder) else UsageRecorder(recorder)
        self.tool_ids = ids_by_function_name(engine, tool_ids)
        self.skip_tools = frozenset(skip_tools)
        self._failed: dict[str, bool] = {}  # tool_call id -> the call failed (its run may not reach a message)
        self._call_ids: dict[str, str] = {}  # tool_call id -> the tool's catalog id (tool metadata "tool_id")
        self._lock = threading.Lock()
        self.records: list[UsageRecord] = []  # what this middleware wrote (for inspection)

    # -- tool calls ----------------------------------------------------------------------------------
    def _note(self, request: Any, ok: bool) -> None:
        call_id = request.tool_call.get("id")
        if call_id:
            tool_id = (getattr(request.tool, "metadata", None) or {}).get("tool_id")
            with self._lock:
                self._failed[call_id] = not ok
                if isinstance(tool_id, str) and tool_id:
                    self._call_ids[call_id] = tool_id

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            result = handler(request)
        except BaseException:
            self._note(request, False)
            raise  # recording never changes what the agent sees
        self._note(request, not (isinstance(result, ToolMessage) and result.status == "error"))
        return result

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            result = await handler(request)
        except BaseException:
            self._note(request, False)
            raise
        self._note(request, not (isinstance(result, ToolMessage) and result.status == "error"))
        return result

    # -- end of a run --------------------------------------------------------------------------------
    def _record(self, state: Any) -> None:
        messages = list(state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", []))
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
        if start is None:
            return
        statuses = {m.tool_call_id: m.status for m in messages[start:] if isinstance(m, ToolMessage)}
        calls: list[str] = []
        failed: list[str] = []
        outcomes: list[tuple[str, bool]] = []
        for m in messages[start:]:
            if not isinstance(m, AIMessage):
                continue
            for call in m.tool_calls:
                name = call["name"]
                if name in self.skip_tools:
                    continue
                call_id = call.get("id") or ""
                with self._lock:
                    raised = self._failed.pop(call_id, None)
                    tid = self._call_ids.pop(call_id, None) or self.tool_ids.get(name, name)
                bad = raised if raised is not None else statuses.get(call_id) in ("error", None)
                calls.append(tid)
                outcomes.append((tid, not bad))
                if bad:
                    failed.append(tid)
        if calls:
            served = {t for t in calls if t not in failed} | {t for t, ok in outcomes if ok}
            failed = [t for t in dict.fromkeys(failed) if t not in served]  # a retry that worked served it
            record = self.recorder.record(_text(messages[start]), calls, failed=failed)
            self.records.append(record)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._record(state)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._record(state)
        return None
