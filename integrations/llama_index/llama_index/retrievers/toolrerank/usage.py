"""Opt-in usage recording for LlamaIndex agents: run a ``FunctionAgent`` / ``ReActAgent`` (any agent workflow)
and log the request and the tool calls that served it (with success) to a
:class:`toolrerank_plugins.usage.UsageRecorder`.

The log is what ``engine.learn`` / ``toolrerank learn ENGINE --log FILE`` learns from (``docs/usage.md``).
Nothing is recorded unless you run the agent through a :class:`AgentUsageRecorder`.

Example (offline, with a scripted LLM)::

    from llama_index.retrievers.toolrerank.usage import AgentUsageRecorder

    recorder = AgentUsageRecorder("usage.jsonl", engine=engine)      # tool names -> catalog ids
    answer = await recorder.run(agent, "weather in Oslo")             # = await agent.run(user_msg=...)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import ToolCallResult

from toolrerank_plugins.interop import ids_by_function_name
from toolrerank_plugins.usage import UsageRecord, UsageRecorder

__all__ = ["AgentUsageRecorder"]


class AgentUsageRecorder:
    """Runs an agent workflow and records its request and tool calls (a call fails when its ``ToolOutput``
    is an error).

    Args:
        recorder: a :class:`~toolrerank_plugins.usage.UsageRecorder` or the path of its log.
        engine: the engine whose tools the agent calls; maps tool names
            (:func:`~toolrerank_plugins.interop.function_names`) back to catalog ids.
        tool_ids: explicit ``{tool name: catalog id}`` (wins over ``engine``); other names are logged as they
            are (``learn`` skips and counts ids its catalog does not know).
        skip_tools: tool names that never serve a request (a tool-search tool).

    The events of the run are read from ``handler.stream_events()`` (the recorder consumes the stream). A
    run that raises is recorded as not served (``success=False``) and the error propagates; a run without
    tool calls is not recorded.
    """

    def __init__(
        self,
        recorder: UsageRecorder | str | Path,
        *,
        engine: Any = None,
        tool_ids: Mapping[str, str] | None = None,
        skip_tools: Iterable[str] = ("search_tools",),
    ) -> None:
        self.recorder = recorder if isinstance(recorder, UsageRecorder) else UsageRecorder(recorder)
        self.tool_ids = ids_by_function_name(engine, tool_ids)
        self.skip_tools = frozenset(skip_tools)
        self.records: list[UsageRecord] = []  # what this recorder wrote (for inspection)

    async def run(self, agent: Any, user_msg: str, **kwargs: Any) -> Any:
        """``await agent.run(user_msg=user_msg, **kwargs)``, recording the request and its tool calls."""
        handler = agent.run(user_msg=user_msg, **kwargs)
        outcomes: list[tuple[str, bool]] = []
        finished = False
        try:
            async for event in handler.stream_events():
                if isinstance(event, ToolCallResult) and event.tool_name not in self.skip_tools:
                    ok = not bool(getattr(event.tool_output, "is_error", False))
                    outcomes.append((self.tool_ids.get(event.tool_name, event.tool_name), ok))
            result = await handler
            finished = True
            return result
        finally:
            if outcomes:
                calls = [t for t, _ in outcomes]
                served = {t for t, ok in outcomes if ok}
                failed = [t for t in dict.fromkeys(calls) if t not in served]
                self.records.append(
                    self.recorder.record(user_msg, calls, failed=failed, success=finished and bool(served))
                )
