"""Every Python snippet of docs/langchain.md and of this package's README runs, in order, as a reader would
run them one after the other (top-level ``await`` included)."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from langgraph.prebuilt import ToolNode

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "docs" / "langchain.md", ROOT / "integrations" / "langchain" / "README.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(page: Path) -> list[str]:
    return [m.group(1) for m in _BLOCK.finditer(page.read_text(encoding="utf-8"))]


def run(code: str, namespace: dict[str, Any], name: str) -> None:
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # noqa: S307 - our own documentation's code
    if inspect.iscoroutine(result):
        asyncio.run(result)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_snippet_runs(page: Path) -> None:
    blocks = snippets(page)
    assert blocks, f"{page} has no python snippets"
    had_inject = hasattr(ToolNode, "inject_tool_args")
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    try:
        for i, code in enumerate(blocks, start=1):
            if "langgraph_bigtool" in code and importlib.util.find_spec("langgraph_bigtool") is None:
                continue  # optional extra not installed (test_lc_bigtool.py says so)
            run(code, namespace, f"{page.name}[{i}]")
    finally:
        if not had_inject and hasattr(ToolNode, "inject_tool_args"):
            del ToolNode.inject_tool_args  # the bigtool snippet's patch stays in the snippet
