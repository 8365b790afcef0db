"""``toolrerank mcp-proxy`` end to end (issue 31): the official SDK's client starts the proxy over stdio, exactly as
Claude Desktop or Cursor would, and the proxy fronts real MCP servers from PyPI (``mcp-server-time``,
``mcp-server-git``) plus a "lab" server written here with the SDK's low-level ``Server`` (a slow tool, a tool that
fails with a JSON-RPC error, one that returns an error result, one that changes the tool list), over stdio and over
streamable HTTP, and a server that cannot start.

Checks: a found tool is called and its real result comes back (git's commit log of a real repository, the time
in a real time zone); errors and error results pass through; a cancelled call is cancelled upstream; a tool-list
change upstream reaches the engine; an upstream killed mid-session (SIGKILL) is reported while the rest keep
working; in ``tools`` mode found tools are appended to the offered list (cache-stable) and the client is told.
Skipped, with the reason, only where the servers cannot be installed (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

_MISSING = [m for m in ("mcp", "mcp_server_time", "mcp_server_git") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(
        f"MCP SDK or servers not installed ({', '.join(_MISSING)}): pip install -e '.[test]'", allow_module_level=True
    )
if shutil.which("git") is None:
    pytest.skip("mcp-server-git needs the git executable, which is not on PATH", allow_module_level=True)

from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client  # noqa: E402

COMMITS = 4
#: Starts the module named in argv[2] after writing this process's pid to argv[1] (exec keeps the pid), so a
#: test can kill that upstream server mid-session.
PID_WRAPPER = """
import os, sys
open(sys.argv[1], "w").write(str(os.getpid()))
os.execv(sys.executable, [sys.executable, "-m", *sys.argv[2:]])
"""
#: A real MCP server (the SDK's low-level Server) with tools that misbehave on purpose; argv: marks folder,
#: then "stdio" or "http PORT".
LAB_SERVER = """
import pathlib, sys
import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError

MARKS = pathlib.Path(sys.argv[1])


def tool(name, description, **props):
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}, "required": list(props)}
    return types.Tool(name=name, description=description, input_schema=schema)


def text(value, error=False):
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)], is_error=error)


TOOLS = {t.name: t for t in [
    tool("sleep_for", "Wait for a number of seconds before answering", seconds="number"),
    tool("open_the_vault", "Open the bank vault (always refused with a JSON-RPC error)"),
    tool("validate_invoice", "Validate an invoice number and report problems", number="string"),
    tool("install_weather_plugin", "Install the weather plugin in place of the stock plugin"),
    tool("stock_price", "Get the latest stock price for a ticker symbol", symbol="string"),
]}


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=list(TOOLS.values()))


async def call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "sleep_for":
        (MARKS / "started").write_text("started")
        try:
            await anyio.sleep(float(args["seconds"]))
        except anyio.get_cancelled_exc_class():
            (MARKS / "cancelled").write_text("cancelled")
            raise
        return text("slept")
    if params.name == "open_the_vault":
        raise MCPError(code=-32042, message="the vault is closed on Sundays", data={"retry": "monday"})
    if params.name == "validate_invoice":
        return text(f"invoice {args.get('number')!r} has no customer", error=True)
    if params.name == "install_weather_plugin":
        TOOLS.pop("stock_price", None)
        TOOLS["weather_forecast"] = tool("weather_forecast", "Get the weather forecast for a city", city="string")
        await ctx.session.send_tool_list_changed()
        return text("installed")
    if params.name == "weather_forecast":
        return text(f"sunny in {args.get('city')}")
    return text(f"unknown tool {params.name}", error=True)


server = Server("lab", on_list_tools=list_tools, on_call_tool=call_tool)

if sys.argv[2] == "stdio":
    from mcp.server.stdio import stdio_server

    async def main():
        async with stdio_server() as (read, write):
            options = server.create_initialization_options(NotificationOptions(tools_changed=True))
            await server.run(read, write, options)

    anyio.run(main)
else:
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with ``COMMITS`` commits, messages ``commit 1`` .. ``commit 4``."""
    path = tmp_path_factory.mktemp("repo")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    for i in range(1, COMMITS + 1):
        (path / "notes.txt").write_text(f"line {i}\n", encoding="utf-8")
        subprocess.run(["git", "-C", str(path), "add", "notes.txt"], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", f"commit {i}"], check=True, env=env)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Setup:
    """The files of one proxy run: its config, the lab's marks, the upstream pids and the stderr log."""

    def __init__(self, tmp: Path, repo: Path, settings: dict[str, Any], *, lab_url: str | None = None) -> None:
        self.tmp = tmp
        self.marks = tmp / "marks"
        self.marks.mkdir()
        (tmp / "pid_wrapper.py").write_text(PID_WRAPPER, encoding="utf-8")
        (tmp / "lab_server.py").write_text(LAB_SERVER, encoding="utf-8")
        self.stderr = tmp / "proxy-stderr.log"
        wrap = [str(tmp / "pid_wrapper.py")]
        servers: dict[str, Any] = {
            "time": {
                "command": sys.executable,
                "args": [*wrap, str(tmp / "time.pid"), "mcp_server_time", "--local-timezone", "UTC"],
            },
            "git": {
                "command": sys.executable,
                "args": [*wrap, str(tmp / "git.pid"), "mcp_server_git", "--repository", str(repo)],
            },
            "lab": {"command": sys.executable, "args": [str(tmp / "lab_server.py"), str(self.marks), "stdio"]},
            "broken": {"command": str(tmp / "no-such-server")},
        }
        if lab_url is not None:
            servers["lab"] = {"url": lab_url}
        self.config = tmp / "proxy.json"
        self.config.write_text(
            json.dumps({"mcpServers": servers, "toolrerank": {"pipeline": "bm25", **settings}}), encoding="utf-8"
        )

    def pid(self, server: str) -> int:
        return int((self.tmp / f"{server}.pid").read_text())


@contextlib.asynccontextmanager
async def proxy_session(setup: Setup, **session_kwargs: Any) -> AsyncIterator[ClientSession]:
    """The SDK's client, starting ``toolrerank mcp-proxy CONFIG`` over stdio, initialized."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "toolrerank_plugins.cli", "mcp-proxy", str(setup.config)]
    )
    with setup.stderr.open("a", encoding="utf-8") as log:
        async with stdio_client(params, errlog=log) as (read, write):
            async with ClientSession(read, write, **session_kwargs) as session:
                with anyio.fail_after(120):
                    await session.initialize()
                yield session


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def _call(session: ClientSession, name: str, arguments: dict[str, Any] | None = None) -> Any:
    with anyio.fail_after(120):
        return await session.call_tool(name, arguments or {})


# -- meta mode: search, call, list servers, a dead upstream ------------------------------------------------
def test_a_found_tool_is_called_and_its_real_result_comes_back(repo: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path, repo, {"mode": "meta"})

    async def main() -> dict[str, Any]:
        async with proxy_session(setup) as session:
            listed = [t.name for t in (await session.list_tools()).tools]
            found = await _call(session, "search_tools", {"query": "show me the last 3 commits", "limit": 3})
            name = found.structured_content["tools"][0]["name"]
            log = await _call(
                session, "call_tool", {"name": name, "arguments": {"repo_path": str(repo), "max_count": 3}}
            )
            when = await _call(session, "search_tools", {"query": "what time is it in Tokyo"})
            time_tools = [t["name"] for t in when.structured_content["tools"]]
            now = await _call(
                session, "call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
            )
            servers = await _call(session, "list_servers")
        return {
            "listed": listed,
            "found": found,
            "name": name,
            "log": log,
            "time_tools": time_tools,
            "now": now,
            "servers": servers,
        }

    out = anyio.run(main)
    assert out["listed"] == ["search_tools", "call_tool", "list_servers"]
    assert out["name"] == "git__git_log"
    schema = out["found"].structured_content["tools"][0]["input_schema"]
    assert {"repo_path", "max_count"} <= set(schema["properties"])  # the upstream's own schema
    assert not out["log"].is_error
    log = _text(out["log"])
    assert [f"commit {i}" in log for i in range(COMMITS, 0, -1)] == [True] * 3 + [False] * (COMMITS - 3)
    assert "time__get_current_time" in out["time_tools"][:2]
    assert not out["now"].is_error
    assert json.loads(_text(out["now"]))["timezone"] == "Asia/Tokyo"  # the real server's answer
    servers = {s["name"]: s for s in out["servers"].structured_content["servers"]}
    assert {n: s["status"] for n, s in servers.items()} == {"time": "up", "git": "up", "lab": "up", "broken": "down"}
    assert "No such file" in servers["broken"]["error"] or "no-such-server" in servers["broken"]["error"]
    assert servers["git"]["tools"] >= 10 and servers["git"]["calls"] == 1


def test_an_upstream_killed_mid_session_is_reported_and_the_rest_keep_working(repo: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path, repo, {"mode": "meta"})

    async def main() -> dict[str, Any]:
        async with proxy_session(setup) as session:
            first = await _call(session, "call_tool", {"name": "git/git_status", "arguments": {"repo_path": str(repo)}})
            os.kill(setup.pid("git"), signal.SIGKILL)
            await anyio.sleep(0.5)
            dead = await _call(session, "call_tool", {"name": "git__git_log", "arguments": {"repo_path": str(repo)}})
            again = await _call(
                session, "call_tool", {"name": "git__git_status", "arguments": {"repo_path": str(repo)}}
            )
            servers = await _call(session, "list_servers")
            search = await _call(session, "search_tools", {"query": "show me the last 3 commits"})
            now = await _call(
                session, "call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
            )
        return {"first": first, "dead": dead, "again": again, "servers": servers, "search": search, "now": now}

    out = anyio.run(main)
    assert not out["first"].is_error and "On branch main" in _text(out["first"])
    assert out["dead"].is_error and "'git' is down" in _text(out["dead"])
    assert out["again"].is_error and "'git' is down" in _text(out["again"])
    git = next(s for s in out["servers"].structured_content["servers"] if s["name"] == "git")
    assert git["status"] == "down" and git["error"]
    found = [t["server"] for t in out["search"].structured_content["tools"]]
    assert "git" not in found and "git" in out["search"].structured_content["down"]
    assert "Servers down" in _text(out["search"])
    assert not out["now"].is_error and json.loads(_text(out["now"]))["timezone"] == "UTC"  # the others keep working
    assert "is down" in setup.stderr.read_text(encoding="utf-8")  # reported in the proxy's log too


def test_errors_and_error_results_pass_through_and_a_cancelled_call_is_cancelled_upstream(
    repo: Path, tmp_path: Path
) -> None:
    setup = Setup(tmp_path, repo, {"mode": "meta"})

    async def main() -> dict[str, Any]:
        async with proxy_session(setup) as session:
            with pytest.raises(MCPError) as refused:
                await _call(session, "call_tool", {"name": "lab__open_the_vault", "arguments": {}})
            invalid = await _call(session, "call_tool", {"name": "lab__validate_invoice", "arguments": {"number": "7"}})
            with anyio.move_on_after(2):
                await session.call_tool("call_tool", {"name": "lab__sleep_for", "arguments": {"seconds": 60}})
            started = (setup.marks / "started").exists()
            with anyio.move_on_after(20):
                while not (setup.marks / "cancelled").exists():
                    await anyio.sleep(0.1)
            after = await _call(session, "call_tool", {"name": "lab__sleep_for", "arguments": {"seconds": 0}})
        return {"refused": refused.value, "invalid": invalid, "started": started, "after": after}

    out = anyio.run(main)
    assert out["refused"].code == -32042 and out["refused"].message == "the vault is closed on Sundays"
    assert out["refused"].data == {"retry": "monday"}
    assert out["invalid"].is_error and _text(out["invalid"]) == "invoice '7' has no customer"
    assert out["started"]
    assert (setup.marks / "cancelled").read_text() == "cancelled"  # the upstream handler was cancelled
    assert _text(out["after"]) == "slept"  # and the lab server still serves


def test_a_call_past_call_timeout_s_is_an_error_result_and_the_upstream_is_cancelled(
    repo: Path, tmp_path: Path
) -> None:
    setup = Setup(tmp_path, repo, {"mode": "meta", "call_timeout_s": 1})

    async def main() -> Any:
        async with proxy_session(setup) as session:
            slow = await _call(session, "call_tool", {"name": "lab__sleep_for", "arguments": {"seconds": 60}})
            with anyio.move_on_after(20):
                while not (setup.marks / "cancelled").exists():
                    await anyio.sleep(0.1)
            return slow

    slow = anyio.run(main)
    assert slow.is_error and _text(slow) == "lab__sleep_for: no answer within 1 s"
    assert (setup.marks / "cancelled").exists()  # the abandoned upstream call was cancelled


def test_an_upstream_tool_list_change_reaches_the_search(repo: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path, repo, {"mode": "meta"})

    async def main() -> dict[str, Any]:
        async with proxy_session(setup) as session:
            before = await _call(session, "search_tools", {"query": "stock price of ACME", "limit": 2})
            await _call(session, "call_tool", {"name": "lab__install_weather_plugin"})
            after: Any = None
            with anyio.move_on_after(30):  # the proxy re-lists the lab's tools and syncs its engine
                while True:
                    after = await _call(session, "search_tools", {"query": "weather forecast for Paris", "limit": 1})
                    if after.structured_content["tools"][:1] and after.structured_content["tools"][0]["name"] == (
                        "lab__weather_forecast"
                    ):
                        break
                    await anyio.sleep(0.2)
            gone = await _call(session, "search_tools", {"query": "stock price of ACME", "limit": 5})
            sunny = await _call(session, "call_tool", {"name": "lab__weather_forecast", "arguments": {"city": "Oslo"}})
        return {"before": before, "after": after, "gone": gone, "sunny": sunny}

    out = anyio.run(main)
    assert out["before"].structured_content["tools"][0]["name"] == "lab__stock_price"
    assert out["after"].structured_content["tools"][0]["name"] == "lab__weather_forecast"
    assert "lab__stock_price" not in [t["name"] for t in out["gone"].structured_content["tools"]]
    assert _text(out["sunny"]) == "sunny in Oslo"


# -- tools mode: the selected tools themselves, cache-stable ---------------------------------------------
def test_tools_mode_appends_found_tools_and_tells_the_client(repo: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path, repo, {"mode": "tools", "pin_servers": ["time"], "search_k": 2})
    notified: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None)
        if method == "notifications/tools/list_changed":
            notified.append(method)

    async def main() -> dict[str, Any]:
        async with proxy_session(setup, message_handler=on_message) as session:
            first = [t.name for t in (await session.list_tools()).tools]
            await _call(session, "search_tools", {"query": "show me the last commits of the repository"})
            with anyio.move_on_after(10):
                while not notified:
                    await anyio.sleep(0.05)
            second = [t.name for t in (await session.list_tools()).tools]
            await _call(session, "search_tools", {"query": "create a new branch"})
            third = [t.name for t in (await session.list_tools()).tools]
            log = await _call(session, "git__git_log", {"repo_path": str(repo), "max_count": 1})
            now = await _call(session, "time__get_current_time", {"timezone": "Europe/Paris"})
        return {"first": first, "second": second, "third": third, "log": log, "now": now}

    out = anyio.run(main)
    meta, pinned = ["search_tools", "list_servers"], ["time__get_current_time", "time__convert_time"]
    assert out["first"] == [*meta, *pinned]
    assert notified  # the client was told its tool list changed
    assert out["second"][:4] == out["first"] and "git__git_log" in out["second"][4:]
    assert out["third"][: len(out["second"])] == out["second"]  # cache-stable: the prefix never changes
    assert "git__git_create_branch" in out["third"][len(out["second"]) :]
    assert "commit 4" in _text(out["log"]) and "commit 3" not in _text(out["log"])
    assert json.loads(_text(out["now"]))["timezone"] == "Europe/Paris"


# -- a streamable-HTTP upstream ----------------------------------------------------------------------------
def test_a_streamable_http_upstream_is_fronted_too(repo: Path, tmp_path: Path) -> None:
    port = _free_port()
    marks = tmp_path / "http-marks"
    marks.mkdir()
    script = tmp_path / "lab_http.py"
    script.write_text(LAB_SERVER, encoding="utf-8")
    with (tmp_path / "lab-http.log").open("w") as log:
        lab = subprocess.Popen([sys.executable, str(script), str(marks), "http", str(port)], stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert lab.poll() is None and time.monotonic() < deadline, (tmp_path / "lab-http.log").read_text()
            time.sleep(0.2)
        setup = Setup(tmp_path, repo, {"mode": "meta"}, lab_url=f"http://127.0.0.1:{port}/mcp")

        async def main() -> dict[str, Any]:
            async with proxy_session(setup) as session:
                found = await _call(session, "search_tools", {"query": "validate an invoice number", "limit": 1})
                result = await _call(
                    session, "call_tool", {"name": "lab__validate_invoice", "arguments": {"number": "A-1"}}
                )
                servers = await _call(session, "list_servers")
            return {"found": found, "result": result, "servers": servers}

        out = anyio.run(main)
    finally:
        lab.terminate()
        lab.wait(timeout=30)
    assert out["found"].structured_content["tools"][0]["name"] == "lab__validate_invoice"
    assert out["result"].is_error and _text(out["result"]) == "invoice 'A-1' has no customer"
    lab_report = next(s for s in out["servers"].structured_content["servers"] if s["name"] == "lab")
    assert lab_report["transport"] == "streamable-http" and lab_report["status"] == "up"
