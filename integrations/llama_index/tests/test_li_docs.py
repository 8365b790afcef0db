"""Every Python snippet of docs/llama_index.md and of this package's README runs, top to bottom in one
session per page, offline; a ``print(...)  # text`` line must print ``text``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "docs" / "llama_index.md", ROOT / "integrations" / "llama_index" / "README.md"]
_PRINT = re.compile(r"^(\s*)print\((.*)\)  # (.+)$", re.M)


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def checked(block: str) -> str:
    """``print(x)  # shown`` becomes a check that ``x`` prints as ``shown``."""
    return _PRINT.sub(lambda m: f"{m[1]}__check__({m[3]!r}, {m[2]})", block)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_snippet_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    shown: list[tuple[str, str]] = []

    def check(expected: str, *values: Any) -> None:
        shown.append((expected, " ".join(map(str, values))))

    blocks = python_blocks(page)
    assert blocks, f"no python snippets in {page}"
    namespace: dict[str, Any] = {"__name__": "__snippets__", "__check__": check}
    for i, block in enumerate(blocks):
        exec(compile(checked(block), f"{page.name} snippet {i + 1}", "exec"), namespace)  # noqa: S102
    assert shown, "no `print(...)  # output` line to check"
    assert [got for _, got in shown] == [expected for expected, _ in shown]
