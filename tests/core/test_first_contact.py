"""What a newcomer meets first: `toolrerank index` shows its progress on a terminal (quiet otherwise or with
--quiet), every command taking --pipeline lists the pipeline names in its --help, the missing-extra message
gives a command that works from a clone, and the README's Python snippet runs."""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins._extras import EXTRA_FOR_MODULE, _missing_extra
from toolrerank_plugins.cli import main
from toolrerank_plugins.cli.main import build_parser
from toolrerank_plugins.encoders import SentenceTransformerEmbedder, encode_progress, progress_default
from toolrerank_plugins.loaders import write_tools_jsonl
from toolrerank_plugins.pipelines import known_pipelines
from toolrerank_plugins.testing import tiny_catalog

ROOT = Path(__file__).resolve().parents[2]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    d = tmp_path / "catalog"
    d.mkdir()
    write_tools_jsonl(tiny_catalog(), d / "tools.jsonl")
    return d


# -- progress ----------------------------------------------------------------------------------------------


class _RecordingModel:
    """Stands in for the sentence-transformers model (not the unit under test): records encode's options."""

    def __init__(self) -> None:
        self.shown: list[bool] = []

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        self.shown.append(kwargs["show_progress_bar"])
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.mark.parametrize(
    ("own", "context", "expected"),
    [(None, None, False), (None, True, True), (None, False, False), (False, True, False), (True, False, True)],
)
def test_encode_progress_sets_the_bar_unless_the_embedder_does(
    tmp_path: Path, own: bool | None, context: bool | None, expected: bool
) -> None:
    pytest.importorskip("torch")
    embedder = SentenceTransformerEmbedder(str(tmp_path), show_progress_bar=own)
    embedder._model = model = _RecordingModel()
    with encode_progress(context):
        assert progress_default() is context
        embedder.encode(["a", "b"])
    assert progress_default() is None and model.shown == [expected]


@pytest.mark.parametrize(("terminal", "quiet"), [(True, False), (True, True), (False, False)])
def test_index_announces_a_long_job_only_on_a_terminal(
    catalog_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool, quiet: bool
) -> None:
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    argv = ["index", str(catalog_dir), "--out", str(tmp_path / "engine"), "--pipeline", "bm25"]
    assert main(argv + (["--quiet"] if quiet else [])) == 0
    announced = "indexing 10 APIs (pipeline bm25)" in err.getvalue()
    assert announced == (terminal and not quiet)
    if announced:
        assert "20-70 min on 2 cores" in err.getvalue()


def _run_on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``toolrerank argv`` in a subprocess whose stderr is a pseudo-terminal; returns (code, stderr)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    # a terminal of 24 x 100 (a fresh pseudo-terminal is 0 columns wide, and tqdm draws nothing in 0 columns)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "toolrerank_plugins.cli", *argv]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=300, check=False)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.model
@pytest.mark.slow  # three processes load MiniLM
@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_index_shows_an_encoding_progress_bar_on_a_terminal(catalog_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    base = ["index", str(catalog_dir), "--pipeline", "dense"]
    code, shown = _run_on_a_terminal([*base, "--out", str(tmp_path / "a")])
    assert code == 0, shown[-2000:]
    assert "indexing 10 APIs" in shown and re.search(r"Batches: +100%", shown), shown[-2000:]
    code, quiet = _run_on_a_terminal([*base, "--out", str(tmp_path / "b"), "--quiet"])
    assert code == 0 and "Batches" not in quiet and "indexing" not in quiet, quiet[-2000:]
    # not a terminal: no bar either
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "toolrerank_plugins.cli", *base, "--out", str(tmp_path / "c")]
    piped = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert piped.returncode == 0 and "Batches" not in piped.stderr and "indexing 10" not in piped.stderr


# -- --help and messages -----------------------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(_commands(sub, f"{prefix}{name} "))
    return out


def test_every_command_taking_a_pipeline_lists_the_pipeline_names() -> None:
    commands = _commands(build_parser())
    with_pipeline = {name for name, p in commands.items() if any("--pipeline" in a.option_strings for a in p._actions)}
    assert {"index", "eval", "demo"} <= with_pipeline
    for name in with_pipeline:
        # argparse wraps lines, also right after the hyphen of a name like dense-hierarchy
        text = " ".join(commands[name].format_help().split()).replace("- ", "-")
        missing = [p for p in known_pipelines() if p not in text]
        assert not missing, f"`toolrerank {name} --help` does not name {missing}"


@pytest.mark.parametrize("module", sorted(EXTRA_FOR_MODULE))
def test_the_missing_extra_message_gives_a_command_that_works_from_a_clone(module: str) -> None:
    extra, dist = EXTRA_FOR_MODULE[module]
    message = str(_missing_extra(module, ImportError(f"No module named {module!r}")))
    assert f'pip install -e ".[{extra}]" from the root of the toolrerank-plugins clone' in message
    assert f"toolrerank-plugins[{extra}]" in message and dist in message
    assert ("torch==2.13.0" in message) == (extra in {"dense", "rerank"})


# -- docs --------------------------------------------------------------------------------------------------

_MACHINE_PATHS = re.compile(r"(?<![\w.])/(?:work|root|tmp|home)/")


def test_docs_name_no_machine_specific_paths() -> None:
    # The user-facing pages (the measurement write-ups under docs/benchmarks/ record where raw results lay).
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "integrations").glob("*/README.md"))
    pages += [ROOT / "examples" / "README.md", ROOT / "benchmarks" / "README.md"]
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        if page.exists()
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
        if _MACHINE_PATHS.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.model
def test_the_readme_python_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    monkeypatch.setattr(sys, "stdout", printed)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})  # noqa: S102
    assert (tmp_path / "my_engine").is_dir() and printed.getvalue().count("\n") >= 5
