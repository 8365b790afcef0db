"""Dev catalogs assembled from public tool lists, in the shared JSONL format, outside the repository.

Third-party OpenAPI specs (their vendors' files; pass the paths) become catalogs through ``from_openapi``, and the
queries of ``benchmarks/openapi_queries.json`` (ours, written before any ranking was looked at; keyed by each
spec's ``info.title``, naming the obvious operationIds) become their labelled ``queries.jsonl`` (split ``dev``).
The transfer table of the default pipeline (``benchmarks/transfer.py``) uses them beside the shared sets.

``--mcp BIN`` also assembles ``pypi-mcp``: the tools of real MCP servers from PyPI, listed live over stdio (the
packages and commands of ``benchmarks/mcp_queries.json``, installed into the environment whose scripts are in
``BIN``; a separate one, they are not our dependencies), with the requests of that file (ours, written from the
tools' names and descriptions before any ranking was looked at).

``--npm-mcp BIN`` assembles ``npm-mcp`` the same way from ``benchmarks/mcp_npm_queries.json``: 241 tools of 21
real MCP servers from npm (installed with ``npm install`` into a folder of their own; ``BIN`` is its
``node_modules/.bin``), several of which serve alike tools (two file servers, two browsers, five web searches);
and ``npm-mcp-tasks``: the same tools with that file's ``tasks``, longer requests of several steps.

Usage::

    python benchmarks/assemble_dev_catalogs.py SPEC... --out runs/dev-catalogs
    python -m venv OUT/mcpvenv && OUT/mcpvenv/bin/pip install mcp-server-git==2026.10.19 ...  # the file's packages
    python benchmarks/assemble_dev_catalogs.py --mcp OUT/mcpvenv/bin --out runs/dev-catalogs
    (cd OUT/mcpnpm && npm install --ignore-scripts @modelcontextprotocol/server-github@2025.4.8 ...)
    python benchmarks/assemble_dev_catalogs.py --npm-mcp OUT/mcpnpm/node_modules/.bin --out runs/dev-catalogs
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _write_queries(folder: Path, requests: list[tuple[str, list[str]]]) -> None:
    """``queries.jsonl`` of ``folder``: each (request, relevant ids) a dev query ``<folder name>/<n>``."""
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for n, (query, relevant) in enumerate(requests):
            record = {
                "id": f"{folder.name}/{n}",
                "query": query,
                "relevant": sorted(relevant),
                "split": "dev",
                "group": None,
                "calls": None,
            }
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def assemble(spec: Path, out_root: Path) -> Path:
    from toolrerank_plugins.loaders import from_openapi
    from toolrerank_plugins.loaders.jsonl import write_tools_jsonl

    data = json.loads(spec.read_text(encoding="utf-8"))
    title = data["info"]["title"]
    table = json.loads((HERE / "openapi_queries.json").read_text(encoding="utf-8"))
    if title not in table:
        raise SystemExit(f"{spec}: no queries for {title!r} in openapi_queries.json")
    catalog = from_openapi(spec)
    by_name: dict[str, list[str]] = {}
    for s in catalog:
        by_name.setdefault(s.name, []).append(s.id)
    folder = out_root / _slug(title)
    folder.mkdir(parents=True, exist_ok=True)
    write_tools_jsonl(list(catalog), folder / "tools.jsonl")
    _write_queries(folder, [(q["query"], [i for name in q["expected"] for i in by_name[name]]) for q in table[title]])
    (folder / "README.md").write_text(f"Assembled by benchmarks/assemble_dev_catalogs.py from {spec.name} ({title}).\n")
    return folder


async def _mcp_tools(bin_dir: Path, servers: dict[str, Any], env: dict[str, str]) -> list[Any]:
    from contextlib import AsyncExitStack

    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from toolrerank_plugins.loaders.mcp import catalog_from_mcp_sessions

    specs: list[Any] = []
    for name, server in servers.items():
        async with AsyncExitStack() as stack:
            folder = stack.enter_context(tempfile.TemporaryDirectory())  # '{folder}': an empty folder to serve
            command, *args = (part.replace("{folder}", folder) for part in server["command"])
            params = StdioServerParameters(command=str(bin_dir / command), args=args, env={**os.environ, **env})
            errlog = stack.enter_context(tempfile.TemporaryFile("w+"))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(120):
                await session.initialize()
                catalog = await catalog_from_mcp_sessions({name: session})
        # the wikipedia server serves every tool twice, once under a "wikipedia_" alias: the aliases are left out
        specs += [s for s in catalog if not (name == "wikipedia" and s.name.startswith("wikipedia_"))]
    return specs


def assemble_mcp(
    bin_dir: Path, out_root: Path, *, table_name: str = "mcp_queries.json", name: str = "pypi-mcp"
) -> Path:
    """The catalog ``out_root/name`` of the servers of ``benchmarks/table_name`` (their commands in ``bin_dir``),
    with that file's requests."""
    import anyio

    from toolrerank_plugins.loaders.jsonl import write_tools_jsonl

    table = json.loads((HERE / table_name).read_text(encoding="utf-8"))
    specs = anyio.run(_mcp_tools, bin_dir, table["servers"], table.get("env", {}))
    ids = {s.id for s in specs}
    folder = out_root / name
    folder.mkdir(parents=True, exist_ok=True)
    write_tools_jsonl(specs, folder / "tools.jsonl")
    missing = [t for key in ("queries", "tasks") for q in table.get(key, ()) for t in q["expected"] if t not in ids]
    if missing:
        raise SystemExit(f"{table_name}: {missing} not served (check the packages' versions)")
    packages = ", ".join(s["package"] for s in table["servers"].values())
    about = f"Assembled by benchmarks/assemble_dev_catalogs.py from {table_name}: {packages}.\n"
    _write_queries(folder, [(q["query"], q["expected"]) for q in table["queries"]])
    (folder / "README.md").write_text(about)
    if table.get("tasks"):  # the same tools, asked for by the file's longer, several-step tasks
        tasks = out_root / f"{name}-tasks"
        tasks.mkdir(parents=True, exist_ok=True)
        write_tools_jsonl(specs, tasks / "tools.jsonl")
        _write_queries(tasks, [(q["query"], q["expected"]) for q in table["tasks"]])
        (tasks / "README.md").write_text(about.replace(".\n", " (its tasks).\n"))
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", type=Path)
    ap.add_argument("--mcp", type=Path, metavar="BIN", help="the scripts folder of an environment with the MCP servers")
    ap.add_argument("--npm-mcp", type=Path, metavar="BIN", help="the node_modules/.bin folder of the npm MCP servers")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for spec in args.specs:
        print(assemble(spec, args.out))
    if args.mcp:
        print(assemble_mcp(args.mcp, args.out))
    if args.npm_mcp:
        print(assemble_mcp(args.npm_mcp, args.out, table_name="mcp_npm_queries.json", name="npm-mcp"))


if __name__ == "__main__":
    main()
