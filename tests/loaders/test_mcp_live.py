"""End to end against real MCP servers from PyPI (``mcp-server-time``, ``mcp-server-git``), started over stdio by
the official SDK (``stdio_client`` + ``ClientSession``), and a paging server whose tool list changes mid-session
(written with the SDK's low-level ``Server`` below).

Checks: the parameter (and output) schemas survive the trip into the catalog, whatever SDK shape is handed to
``from_mcp_tools``; natural requests find the right tool over the combined catalog; the tool found runs on its
server; ``catalog_from_mcp_sessions`` follows ``nextCursor``; and ``Engine.sync`` follows a server whose tool list
changes, re-encoding only what changed. Skipped, with the reason, only where the servers cannot be installed
(``pip install -e '.[test]'`` installs them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

_MISSING = [m for m in ("mcp", "mcp_server_time", "mcp_server_git") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(
        f"MCP SDK or servers not installed ({', '.join(_MISSING)}): pip install 'mcp>=2' mcp-server-time "
        "mcp-server-git (or pip install -e '.[test]')",
        allow_module_level=True,
    )
if shutil.which("git") is None:
    pytest.skip("mcp-server-git needs the git executable, which is not on PATH", allow_module_level=True)

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from toolrerank_plugins import Catalog, Engine, EngineConfig, from_mcp_tools  # noqa: E402
from toolrerank_plugins.loaders import catalog_from_mcp_sessions  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402
from toolrerank_plugins.records import thaw  # noqa: E402
from toolrerank_plugins.testing import FakeEmbedder  # noqa: E402

COMMITS = 7
#: A real MCP server (the SDK's low-level ``Server``) that pages its tools/list two tools at a time and, when
#: ``install_weather_plugin`` is called, swaps the stock tool for a weather tool, rewords ``echo`` and sends
#: ``notifications/tools/list_changed``.
PLUGINS_SERVER = """
import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server


def tool(name, description, **props):
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}, "required": list(props)}
    return types.Tool(name=name, description=description, input_schema=schema)


TOOLS = {t.name: t for t in [
    tool("echo", "Repeat the given text back", text="string"),
    tool("stock_price", "Get the latest stock price for a ticker symbol", symbol="string"),
    tool("install_weather_plugin", "Install the weather plugin in place of the stock plugin"),
]}
PAGE = 2


async def list_tools(ctx, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    more = start + PAGE < len(TOOLS)
    page = [TOOLS[n] for n in list(TOOLS)[start : start + PAGE]]
    return types.ListToolsResult(tools=page, next_cursor=str(start + PAGE) if more else None)


async def call_tool(ctx, params):
    if params.name == "install_weather_plugin":
        del TOOLS["stock_price"]
        TOOLS["weather_forecast"] = tool("weather_forecast", "Get the weather forecast for a city", city="string")
        TOOLS["echo"] = tool("echo", "Repeat the given text back in upper case", text="string")
        await ctx.session.send_tool_list_changed()
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


server = Server("plugins", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))


anyio.run(main)
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with ``COMMITS`` commits, messages ``commit 1`` .. ``commit 7``."""
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


def _commands(repo: Path, tmp: Path) -> dict[str, list[str]]:
    plugins = tmp / "plugins_server.py"
    plugins.write_text(PLUGINS_SERVER, encoding="utf-8")
    return {
        "time": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "git": ["-m", "mcp_server_git", "--repository", str(repo)],
        "plugins": [str(plugins)],
    }


@contextlib.asynccontextmanager
async def _sessions(
    commands: dict[str, list[str]], names: Sequence[str], errlog: Path, **session_kwargs: Any
) -> AsyncIterator[dict[str, ClientSession]]:
    """Start the named servers over stdio and yield initialized client sessions (closed on exit)."""
    async with contextlib.AsyncExitStack() as stack:
        log = stack.enter_context(errlog.open("a", encoding="utf-8"))
        sessions = {}
        for name in names:
            params = StdioServerParameters(command=sys.executable, args=commands[name])
            read, write = await stack.enter_async_context(stdio_client(params, errlog=log))
            session = await stack.enter_async_context(ClientSession(read, write, **session_kwargs))
            with anyio.fail_after(60):
                await session.initialize()
            sessions[name] = session
        yield sessions


@pytest.fixture(scope="module")
def listed(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The catalog of the time and git servers, and their raw ``ListToolsResult`` objects."""
    tmp = tmp_path_factory.mktemp("servers")

    async def main() -> dict[str, Any]:
        async with _sessions(_commands(repo, tmp), ["time", "git"], tmp / "stderr.log") as sessions:
            catalog = await catalog_from_mcp_sessions(sessions)
            results = {name: await s.list_tools() for name, s in sessions.items()}
        return {"catalog": catalog, "results": results}

    return anyio.run(main)


def test_parameter_and_output_schemas_survive(listed: dict[str, Any]) -> None:
    catalog: Catalog = listed["catalog"]
    results = listed["results"]
    assert {s.tool for s in catalog} == {"time", "git"}
    assert len(catalog) == sum(len(r.tools) for r in results.values()) >= 12
    for server, result in results.items():
        for tool in result.tools:
            spec = catalog[f"{server}/{tool.name}"]
            assert thaw(spec.parameters) == tool.input_schema, tool.name
            assert (thaw(spec.returns) if spec.returns is not None else None) == tool.output_schema, tool.name
            assert spec.description == (tool.description or "")
    convert = catalog["time/convert_time"].parameters
    assert set(convert["required"]) == {"source_timezone", "time", "target_timezone"}
    log = catalog["git/git_log"]
    assert {"repo_path", "max_count"} <= set(log.parameters["properties"])
    assert log.metadata["annotations"]["readOnlyHint"] is True
    assert catalog["time/get_current_time"].returns is not None  # mcp-server-time declares structured output


def test_every_sdk_shape_of_the_real_results_gives_the_same_catalog(listed: dict[str, Any]) -> None:
    results = listed["results"]
    expected = [s.to_dict() for s in listed["catalog"]]
    shapes = {
        "ListToolsResult": dict(results),
        "[Tool]": {n: r.tools for n, r in results.items()},
        "model_dump()": {n: r.model_dump() for n, r in results.items()},
        "model_dump(by_alias=True)": {n: r.model_dump(by_alias=True) for n, r in results.items()},
        "[Tool.model_dump()]": {n: [t.model_dump() for t in r.tools] for n, r in results.items()},
        "JSON": {n: r.model_dump(mode="json", by_alias=True, exclude_none=True) for n, r in results.items()},
    }
    for label, servers in shapes.items():
        assert [s.to_dict() for s in from_mcp_tools(servers, source="<mcp sessions>")] == expected, label


#: Requests and the tool that serves each, with the rank it must at least reach. "what time is it in Tokyo"
#: allows rank 2: convert_time's parameter text names 'Asia/Tokyo' and outranks get_current_time lexically.
REQUESTS = [
    ("what time is it in Tokyo", "time/get_current_time", 2),
    ("show me the last 5 commits", "git/git_log", 1),
    ("convert 3pm New York time to London", "time/convert_time", 1),
    ("what changed in my working directory", "git/git_diff_unstaged", 1),
]


def _ranks(engine: Engine) -> dict[str, list[str]]:
    return {q: [h.id for h in engine.search(q, top_k=3)] for q, _, _ in REQUESTS}


def test_natural_requests_find_the_right_tool(listed: dict[str, Any]) -> None:
    engine = Engine.build(listed["catalog"], pipeline_config("bm25"))
    ranks = _ranks(engine)
    for query, expected, rank in REQUESTS:
        assert expected in ranks[query][:rank], (query, ranks[query])
    assert ranks["what time is it in Tokyo"][0].startswith("time/")


@pytest.mark.model
@pytest.mark.slow  # ~5 s to load MiniLM on an idle CPU, 30 s on a busy one
def test_natural_requests_with_the_dense_engine(listed: dict[str, Any]) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("faiss")
    engine = Engine.build(listed["catalog"], pipeline_config("dense"))  # dense, the bundled MiniLM
    ranks = _ranks(engine)
    for query, expected, rank in REQUESTS[:3]:
        assert expected in ranks[query][:rank], (query, ranks[query])


def test_the_tool_found_runs_on_its_server(listed: dict[str, Any], repo: Path, tmp_path: Path) -> None:
    engine = Engine.build(listed["catalog"], pipeline_config("bm25"))
    found = engine.search("show me the last 5 commits", top_k=1)[0].tool

    async def main() -> str:
        async with _sessions(_commands(repo, tmp_path), [found.tool or ""], tmp_path / "stderr.log") as sessions:
            result = await sessions[found.tool or ""].call_tool(found.name, {"repo_path": str(repo), "max_count": 5})
        assert not result.is_error, result
        return "\n".join(block.text for block in result.content if block.type == "text")

    out = anyio.run(main)
    assert found.id == "git/git_log"
    assert [f"commit {i}" in out for i in range(COMMITS, 0, -1)] == [True] * 5 + [False] * (COMMITS - 5)


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__(dimension=64)
        self.seen: list[str] = []

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        self.seen.extend(texts)
        return super().encode(texts, **kwargs)


def test_sync_follows_a_server_whose_tool_list_changes(repo: Path, tmp_path: Path) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async def main() -> dict[str, Any]:
        names = ["time", "plugins"]
        async with _sessions(_commands(repo, tmp_path), names, tmp_path / "stderr.log", message_handler=on_message) as (
            sessions
        ):
            first = await catalog_from_mcp_sessions(sessions)
            embedder = CountingEmbedder()
            engine = Engine.build(first, EngineConfig(retriever="dense"), embedder=embedder)  # type: ignore[arg-type]
            before = engine.catalog
            embedder.seen.clear()
            await sessions["plugins"].call_tool("install_weather_plugin", {})
            with anyio.fail_after(30):
                await changed.wait()
            report = engine.sync(await catalog_from_mcp_sessions({"plugins": sessions["plugins"]}), tool="plugins")
        return {"first": first, "before": before, "engine": engine, "embedder": embedder, "report": report}

    out = anyio.run(main)
    first, before, engine, report = out["first"], out["before"], out["engine"], out["report"]
    # the paging server's three tools arrived over two pages
    assert [i for i in first.ids if i.startswith("plugins/")] == [
        "plugins/echo",
        "plugins/stock_price",
        "plugins/install_weather_plugin",
    ]
    assert report.added == ("plugins/weather_forecast",)
    assert report.removed == ("plugins/stock_price",)
    assert report.updated == report.reencoded == ("plugins/echo",)
    after = engine.catalog
    assert after.ids == [i for i in before.ids if i != "plugins/stock_price"] + ["plugins/weather_forecast"]
    for api in before:  # the time server's APIs and the unchanged plugin are the very same records
        if api.id not in ("plugins/echo", "plugins/stock_price"):
            assert after[api.id] is api
    assert out["embedder"].seen == [
        engine.render(after["plugins/echo"]),
        engine.render(after["plugins/weather_forecast"]),
    ]
    assert engine.search("weather forecast for Paris", top_k=1)[0].id == "plugins/weather_forecast"
    assert "plugins/stock_price" not in [h.id for h in engine.search("stock price of ACME", top_k=5)]


def test_the_docs_snippet_runs(repo: Path) -> None:
    """docs/catalog.md, "MCP servers": the snippet runs from inside a git repository and prints what it shows."""
    docs = (Path(__file__).parents[2] / "docs" / "catalog.md").read_text(encoding="utf-8")
    section = docs[docs.index("## MCP servers") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"```text\n(.*?)```", section, re.S)
    assert code is not None and shown is not None
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if shutil.which("mcp-server-time", path=path) is None or shutil.which("mcp-server-git", path=path) is None:
        pytest.skip("the mcp-server-time / mcp-server-git commands are not next to this Python nor on PATH")
    run = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        cwd=repo,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == shown.group(1)
