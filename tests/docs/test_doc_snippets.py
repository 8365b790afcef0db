"""Every README and docs snippet runs as written: each page's ```python blocks, in order, as one script.

What a reader does is copy a page's blocks into a file and run it, so that is the test: the blocks of a page
(README.md, docs/*.md except the benchmark pages, integrations/*/README.md) are written to one script, each
block on the line numbers it has in the page (a traceback's line number is the page's), and run with the
interpreter in a subprocess, from an empty temporary directory, with the Hugging Face hub switched off. No
top-level ``await``, no names the test provides, no patching undone behind the reader's back.

* A block that genuinely needs what a test machine does not have (a benchmark folder, a real LLM endpoint)
  is left out with a marker right before it, visible in the page: ``<!-- snippet: skip REASON -->``.
* A page whose script imports an optional package that is not installed (an adapter, langgraph-bigtool, the
  MCP SDK) is skipped, saying which.
* ``print(x)  # shown`` promises what the reader sees: the script's output must have a line ``shown`` (or the
  comment is ``shown: explanation``), in the order of the prints.
* A warning the library logs while the script runs (logger ``toolrerank_plugins``, WARNING and above) is
  something the reader sees too: the page must show it (its text appears in the page), or the snippet must
  not cause it. The script runs under a small runner (``runpy.run_path``, as ``python script.py`` would) that
  records those log lines.

Bash blocks are not run. Pages that load the bundled MiniLM are marked ``model``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: pages whose snippets load the bundled MiniLM (dense or hybrid retrieval)
MODEL_PAGES = {"README.md", "docs/engine.md", "docs/tgr.md"}
#: optional packages: a page importing one that is not installed is skipped (anything else missing fails)
OPTIONAL = {
    "anyio",
    "bm25s",
    "faiss",
    "langchain",
    "langchain_core",
    "langchain_toolrerank",
    "langgraph",
    "langgraph_bigtool",
    "llama_index",
    "mcp",
    "networkx",
    "pydantic_ai",
    "pydantic_ai_toolrerank",
    "scipy",
    "sentence_transformers",
    "torch",
}
#: pages other people own whose snippets do not run yet: the reason, until the page is fixed (strict xfail,
#: so a fixed page fails here until its entry is removed)
KNOWN_BROKEN: dict[str, str] = {}

_FENCE = re.compile(r"^```(\S*)\s*$")
_SKIP = re.compile(r"^<!--\s*snippet:\s*skip\s+(?P<reason>\S.*?)\s*-->\s*$")
_SHOWN = re.compile(r"^\s*print\(.*\)  # (?P<shown>.+)$")
_TIMEOUT_S = 300
#: runs the page's script as ``python script.py`` would, recording the library's warnings in a file
_RUNNER = """
import logging, runpy, sys

script, log_path = sys.argv[1:3]


class _Record(logging.Handler):
    def emit(self, record):
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(" ".join(record.getMessage().split()) + "\\n")
        sys.stderr.write(record.getMessage() + "\\n")


logging.getLogger("toolrerank_plugins").addHandler(_Record(logging.WARNING))
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""


@dataclass
class Page:
    path: Path
    script: str = ""  # the page's python blocks at their own line numbers, everything else blank
    blocks: int = 0
    skipped: list[str] = field(default_factory=list)  # "line N: reason" of each block left out
    shown: list[tuple[int, str]] = field(default_factory=list)  # (line, promised output)

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix() if self.path.is_relative_to(ROOT) else self.path.name


def parse(path: Path) -> Page:
    """The page's script: python blocks kept where they are, skip-marked and other blocks blanked out."""
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    out = [""] * len(lines)
    fence: str | None = None  # the open block's language
    keep = False
    previous = ""  # the last non-blank line outside a block
    for n, line in enumerate(lines):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            skip = _SKIP.match(previous)
            keep = fence == "python" and skip is None
            if fence == "python":
                if skip:
                    page.skipped.append(f"line {n + 1}: {skip.group('reason')}")
                else:
                    page.blocks += 1
            continue
        if fence is not None and line.startswith("```"):
            fence, keep = None, False
            previous = ""
            continue
        if fence is None:
            if line.strip():
                previous = line.strip()
            continue
        if keep:
            out[n] = line
            shown = _SHOWN.match(line)
            if shown:
                page.shown.append((n + 1, shown.group("shown")))
    page.script = "\n".join(out) + "\n"
    return page


def _pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if not p.name.startswith("benchmarks")]
    return [ROOT / "README.md", *docs, *sorted((ROOT / "integrations").glob("*/README.md"))]


PAGES = [p for p in map(parse, _pages()) if p.blocks or p.skipped]


def _param(page: Page) -> object:
    marks: list[pytest.MarkDecorator] = []
    if page.name in MODEL_PAGES:
        marks.append(pytest.mark.model)
    if page.name in KNOWN_BROKEN:
        marks.append(pytest.mark.xfail(reason=KNOWN_BROKEN[page.name], strict=True))
    return pytest.param(page, id=page.name, marks=marks)


def missing_optional(script: str) -> list[str]:
    """Optional packages the script imports that are not installed."""
    roots = set()
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.Import):
            roots.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module)
    missing = []
    for name in sorted(roots):
        root = name.split(".")[0]
        # the LlamaIndex adapter is a namespace portion of llama_index: look for the adapter itself
        probe = "llama_index.retrievers.toolrerank" if name.startswith("llama_index.retrievers.toolrerank") else root
        if root in OPTIONAL and importlib.util.find_spec(probe) is None:
            missing.append(probe)
    return sorted(set(missing))


def check_shown(page: Page, stdout: str) -> list[str]:
    """Each promised output, in order, as a line of ``stdout``; the ones not found."""
    lines = [line.rstrip() for line in stdout.splitlines()]
    at, problems = 0, []
    for n, shown in page.shown:
        for i in range(at, len(lines)):
            if lines[i] and (shown == lines[i] or shown.startswith(lines[i] + ":")):
                at = i + 1
                break
        else:
            problems.append(f"{page.name}:{n}: promised output {shown!r} not printed (in order)")
    return problems


def unshown_warnings(page: Page, logged: str) -> list[str]:
    """The library's logged warnings whose text the page does not show."""
    text = " ".join(page.path.read_text(encoding="utf-8").split())
    return [
        f"{page.name}: logs {line!r}, which the page does not show" for line in logged.splitlines() if line not in text
    ]


def test_the_pages_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "docs/langchain.md", "docs/llama_index.md"} <= names
    assert not any(n.startswith("docs/benchmarks") for n in names)
    assert set(KNOWN_BROKEN) <= names and MODEL_PAGES <= names


def test_a_skip_marker_leaves_its_block_out_and_says_why(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\nprint(x)  # 1\n```\n\n<!-- snippet: skip needs ../shared/data -->\n"
        "```python\nraise SystemExit(3)\n```\n\n```bash\nexit 4\n```\n```python\nprint(x + 1)\n```\n",
        encoding="utf-8",
    )
    parsed = parse(page)
    assert parsed.blocks == 2 and parsed.skipped == ["line 9: needs ../shared/data"]
    assert parsed.script.splitlines()[3:5] == ["x = 1", "print(x)  # 1"]  # at the page's own line numbers
    assert "SystemExit" not in parsed.script and "exit 4" not in parsed.script
    assert parsed.shown == [(5, "1")]
    assert check_shown(parsed, "1\n2\n") == [] and len(check_shown(parsed, "2\n")) == 1
    assert unshown_warnings(parsed, "needs ../shared/data\n") == []  # shown (here, in the marker)
    assert unshown_warnings(parsed, "no LLM named 'default' is registered\n") == [
        "page.md: logs \"no LLM named 'default' is registered\", which the page does not show"
    ]


@pytest.mark.parametrize("page", [_param(p) for p in PAGES])
def test_every_snippet_of_the_page_runs_as_one_script(page: Page, tmp_path: Path) -> None:
    if not page.blocks:
        pytest.skip(f"{page.name}: every python block is marked skip ({'; '.join(page.skipped)})")
    missing = missing_optional(page.script)
    if missing:
        pytest.skip(f"{page.name}: needs {', '.join(missing)} (not installed)")
    # not "langchain.py": the script's folder comes first on sys.path, so the page's name would shadow a package
    script = tmp_path / ("page_" + re.sub(r"\W", "_", page.name) + ".py")
    script.write_text(page.script, encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    logged = tmp_path / "warnings.log"
    logged.touch()
    out = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(script), str(logged)],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
    )
    assert out.returncode == 0, f"{page.name} (line numbers are the page's):\n{out.stderr[-4000:]}"
    problems = check_shown(page, out.stdout) + unshown_warnings(page, logged.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems) + f"\n--- stdout:\n{out.stdout[-3000:]}"
