"""One upstream MCP server, seen from the proxy: started (stdio) or reached (streamable HTTP) by the official
SDK's client, kept open in a task of its own, its tool list followed through ``notifications/tools/list_changed``,
and its calls forwarded with their results, errors and cancellation.

A server that fails to start, or whose connection breaks later, is marked ``down`` with the reason; nothing of
it escapes into the proxy's other tasks, so one dead upstream never takes the proxy down.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TextIO

import anyio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types

from toolrerank_plugins.loaders.mcp import _list_all_tools
from toolrerank_plugins.mcp_proxy.config import UpstreamConfig

if sys.version_info < (3, 11):  # pragma: no cover - anyio installs the backport there
    from exceptiongroup import BaseExceptionGroup

logger = logging.getLogger(__name__)

Status = Literal["starting", "up", "down", "stopped"]

#: The JSON-RPC error code the SDK gives a request whose connection closed (mcp_types.CONNECTION_CLOSED).
CONNECTION_CLOSED = getattr(mcp_types, "CONNECTION_CLOSED", -32000)


class UpstreamDown(Exception):
    """A call went to a server that is not up (it failed to start, or its connection broke)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"upstream server {server!r} is down: {reason}")
        self.server = server
        self.reason = reason


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups (anyio task groups raise them)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, MCPError) else f"{type(exc).__name__}: {text}"


class Upstream:
    """A live connection to one upstream MCP server.

    :meth:`run` is the connection's lifetime (start it in the proxy's task group); :meth:`wait_ready` returns
    once the server is up with its tools listed, or down. ``on_tools_changed(upstream)`` is awaited after each
    re-listing that a ``notifications/tools/list_changed`` triggered.
    """

    def __init__(
        self,
        name: str,
        config: UpstreamConfig,
        *,
        on_tools_changed: Callable[[Upstream], Awaitable[None]] | None = None,
        errlog: TextIO | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.status: Status = "starting"
        self.error: str | None = None
        self.tools: list[mcp_types.Tool] = []
        self.session: ClientSession | None = None
        self.since = time.time()
        self.calls = 0
        self.failed_calls = 0
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._ready = anyio.Event()
        self._stop = anyio.Event()
        self._changed = anyio.Event()

    # -- lifetime --------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, initialize, list the tools, then serve until :meth:`stop` or until the connection breaks.

        Never raises (but for cancellation): a failure marks the server down with the reason.
        """
        try:
            async with contextlib.AsyncExitStack() as stack:
                # the transports and the session open task groups: they are entered outside the timeout's
                # cancel scope (a scope must not close while a task group opened inside it stays open)
                read, write = await self._connect(stack)
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
                with anyio.fail_after(self.config.startup_timeout_s):
                    await session.initialize()
                    self.tools = await self._list(session)
                self.session = session
                self._set("up")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._follow_changes, session)
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
            if self.status == "up":
                self._set("stopped")
        except TimeoutError:
            self._set("down", f"did not start within {self.config.startup_timeout_s:g} s")
        except Exception as exc:  # noqa: BLE001 - any failure of this server is its own, reported, never the proxy's
            self._set("down", _describe(exc))
        except BaseExceptionGroup as group:  # a task group's failure that is not only cancellation
            if group.subgroup(anyio.get_cancelled_exc_class()) is group:
                raise
            self._set("down", _describe(group))
        finally:
            self.session = None
            self._ready.set()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        cfg = self.config
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=cfg.env, cwd=cfg.cwd)
            errlog = self._errlog if self._errlog is not None else sys.stderr
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            return read, write
        from mcp.client.streamable_http import streamable_http_client

        http_client = None
        if cfg.headers:
            from mcp.shared._httpx_utils import create_mcp_http_client

            http_client = await stack.enter_async_context(create_mcp_http_client(headers=dict(cfg.headers)))
        streams = await stack.enter_async_context(streamable_http_client(str(cfg.url), http_client=http_client))
        return streams[0], streams[1]

    def _set(self, status: Status, error: str | None = None) -> None:
        if status == "down" and self.status == "down":
            return  # the first reason stands
        self.status = status
        self.error = error
        self.since = time.time()
        if status == "down":
            logger.warning("upstream MCP server %r is down: %s", self.name, error)
        else:
            logger.info("upstream MCP server %r is %s (%d tools)", self.name, status, len(self.tools))
        if status != "starting":
            self._ready.set()

    async def wait_ready(self) -> None:
        """Return once the server is up (tools listed) or down."""
        await self._ready.wait()

    def stop(self) -> None:
        """End the connection (a stdio server's process is ended by the SDK)."""
        self._stop.set()

    async def _list(self, session: ClientSession) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages), as SDK ``Tool`` objects."""
        listed = await _list_all_tools(session, self.name, f"<mcp server {self.name}>")
        return [t if isinstance(t, mcp_types.Tool) else mcp_types.Tool.model_validate(t) for t in listed]

    # -- tool list changes ------------------------------------------------------------------------------
    async def _on_message(self, message: Any) -> None:
        # runs in the session's receive loop: only note the change; the listing happens in _follow_changes
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._changed.set()

    async def _follow_changes(self, session: ClientSession) -> None:
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            try:
                self.tools = await self._list(session)
            except Exception as exc:  # noqa: BLE001
                if self._is_closed(exc):
                    self._set("down", _describe(exc))
                    self._stop.set()
                    return
                logger.warning("upstream %r: listing its changed tools failed: %s", self.name, _describe(exc))
                continue
            if self._on_tools_changed is not None:
                await self._on_tools_changed(self)

    # -- calls -----------------------------------------------------------------------------------------
    @staticmethod
    def _is_closed(exc: BaseException) -> bool:
        if isinstance(exc, MCPError):
            return exc.code == CONNECTION_CLOSED
        return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError)

    async def call(
        self, tool: str, arguments: dict[str, Any] | None, *, timeout_s: float | None = None
    ) -> mcp_types.CallToolResult:
        """Forward one ``tools/call`` and return the server's result as it is (``isError`` results included).

        Cancelling the awaiting task cancels the call: the SDK sends the server ``notifications/cancelled``.

        Raises:
            UpstreamDown: the server is not up, or its connection broke during the call (it is then marked
                down).
            MCPError: the server answered with a JSON-RPC error (passed through as it is).
        """
        session = self.session
        if session is None or self.status != "up":
            raise UpstreamDown(self.name, self.error or f"it is {self.status}")
        self.calls += 1
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
        except Exception as exc:
            self.failed_calls += 1
            if self._is_closed(exc):
                reason = _describe(exc)
                self._set("down", f"the connection broke ({reason})")
                self._stop.set()
                raise UpstreamDown(self.name, self.error or reason) from exc
            raise

    async def check(self, timeout_s: float = 5.0) -> None:
        """Ping the server if it is up: a closed connection marks it down (what ``list_servers`` reports)."""
        session = self.session
        if session is None or self.status != "up":
            return
        try:
            with anyio.fail_after(timeout_s):
                await session.send_ping()
        except TimeoutError:
            logger.warning("upstream %r did not answer a ping within %g s", self.name, timeout_s)
        except Exception as exc:  # noqa: BLE001
            if self._is_closed(exc):
                self._set("down", f"the connection broke ({_describe(exc)})")
                self._stop.set()

    def report(self) -> dict[str, Any]:
        """The server's state for ``list_servers``."""
        return {
            "name": self.name,
            "transport": self.config.transport,
            "status": self.status,
            "tools": len(self.tools) if self.status == "up" else 0,
            "error": self.error,
            "calls": self.calls,
            "failed_calls": self.failed_calls,
        }

    def __repr__(self) -> str:
        return f"Upstream({self.name!r}, {self.config.transport}, {self.status}, {len(self.tools)} tools)"
