"""The requests of the assembled dev catalogs (``benchmarks/*_queries.json``) are well formed: every expected tool
names a listed server, every server is pinned, and no request repeats (a typo there would only show as a lower
number in the transfer table)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


PINNED = {  # a PyPI requirement pinned with ==; an npm package (scoped or not) pinned with @
    "mcp_queries.json": r"[\w.-]+==[\w.]+",
    "mcp_npm_queries.json": r"(@[\w.-]+/)?[\w.-]+@\d+(\.\d+)*",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_mcp_requests_name_tools_of_pinned_servers(name: str) -> None:
    table = json.loads((BENCHMARKS / name).read_text(encoding="utf-8"))
    servers = table["servers"]
    assert servers and all(re.fullmatch(PINNED[name], s["package"]) for s in servers.values())
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in table.get("env", {}).items())
    assert all(s["command"] and all(isinstance(part, str) for part in s["command"]) for s in servers.values())
    assert len({q["query"] for q in table["queries"]}) == len(table["queries"]) >= 40
    queries = [*table["queries"], *table.get("tasks", ())]
    assert len({q["query"] for q in queries}) == len(queries)
    for q in queries:
        assert q["query"].strip() and q["expected"], q
        assert len(set(q["expected"])) == len(q["expected"]), q
        for tool in q["expected"]:
            server, _, name = tool.partition("/")
            assert server in servers and name and not name.startswith("wikipedia_"), tool


def test_openapi_requests_are_keyed_by_spec_title() -> None:
    table = json.loads((BENCHMARKS / "openapi_queries.json").read_text(encoding="utf-8"))
    assert table
    for title, queries in table.items():
        if title == "_about":
            continue
        assert title.strip() and queries, title
        assert len({q["query"] for q in queries}) == len(queries), title
        assert all(q["expected"] and all(isinstance(t, str) and t for t in q["expected"]) for q in queries), title
