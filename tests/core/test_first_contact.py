"""What a newcomer meets first: `toolrerank index` shows its progress on a terminal (quiet otherwise or with
--quiet), every command taking --pipeline lists the pipeline names in its --help, the missing-extra message
gives a command that works from a clone, and the README's Python snippet runs; catalog files of every format,
Ctrl-C, --overwrite, empty queries, catalogs given as engines, --explain timings and demo --query (issue 26)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "toolrerank_plugins.cli", *base, "--out", str(tmp_path / "c")]
    with ThreadPoolExecutor(3) as pool:  # the three processes at once: each mostly loads libraries and MiniLM
        on_terminal = pool.submit(_run_on_a_terminal, [*base, "--out", str(tmp_path / "a")])
        quiet_run = pool.submit(_run_on_a_terminal, [*base, "--out", str(tmp_path / "b"), "--quiet"])
        # not a terminal: no bar either
        piped_run = pool.submit(subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    code, shown = on_terminal.result()
    assert code == 0, shown[-2000:]
    assert "indexing 10 APIs" in shown and re.search(r"Batches: +100%", shown), shown[-2000:]
    code, quiet = quiet_run.result()
    assert code == 0 and "Batches" not in quiet and "indexing" not in quiet, quiet[-2000:]
    piped = piped_run.result()
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


# -- issue 26: catalog files of every format, and the CLI's rough edges ---------------------------------------

OPENAPI_DOC: dict[str, Any] = {
    "openapi": "3.0.1",
    "info": {"title": "Texts", "description": "Send and read text messages."},
    "paths": {
        "/Messages.json": {
            "description": "A Message resource represents an inbound or outbound message.",
            "post": {
                "operationId": "CreateMessage",
                "summary": "Send a message",
                "requestBody": {
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "properties": {"To": {"type": "string", "description": "The recipient's phone number"}},
                            }
                        }
                    }
                },
            },
            "get": {"operationId": "ListMessage", "summary": "Retrieve a list of messages"},
        },
        "/Calls.json": {"post": {"operationId": "CreateCall", "summary": "Make a phone call"}},
    },
}
MCP_RESULT = {
    "jsonrpc": "2.0",
    "id": 2,
    "result": {
        "tools": [
            {"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object", "properties": {}}},
            {"name": "git_log", "description": "Show the commit log", "inputSchema": {"type": "object"}},
        ]
    },
}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city"}},
    {"type": "function", "function": {"name": "send_email", "description": "Send an e-mail"}},
]


def _json_file(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "data", "query", "first"),
    [
        ("twilio_like.json", OPENAPI_DOC, "send a message", "CreateMessage"),
        ("mcp_tools_list.json", MCP_RESULT, "show the commit log", "git_log"),
        ("openai_tools.json", OPENAI_TOOLS, "send an e-mail", "send_email"),
    ],
)
def test_index_and_search_take_openapi_mcp_and_openai_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: Any, query: str, first: str
) -> None:
    # was: "twilio_api_v2010.json:1: not valid JSON (...)": every catalog file was read as JSONL
    path = _json_file(tmp_path / name, data)
    engine = tmp_path / "engine"
    assert main(["index", str(path), "--out", str(engine), "--pipeline", "bm25"]) == 0
    assert f"-> {engine}" in capsys.readouterr().out
    assert main(["search", str(engine), query, "--top-k", "1"]) == 0
    assert f"1. {first} " in capsys.readouterr().out


def test_index_takes_a_yaml_spec_and_a_named_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yaml_spec = ROOT / "tests" / "loaders" / "fixtures" / "harbor_petshop_openapi30.yaml"
    out1, out2 = tmp_path / "e1", tmp_path / "e2"
    assert main(["index", str(yaml_spec), "--out", str(out1), "--pipeline", "bm25", "--format", "openapi"]) == 0
    assert main(["index", str(yaml_spec), "--out", str(out2), "--pipeline", "bm25"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split(" (")[0] == printed[1].split(" (")[0]  # same APIs and tools either way


def test_a_format_that_does_not_match_names_what_was_expected_and_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _json_file(tmp_path / "twilio_api_v2010.json", OPENAPI_DOC)
    assert main(["index", str(path), "--out", str(tmp_path / "e"), "--format", "jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"toolrerank: error: {path}: expected a JSONL catalog")
    assert "found an OpenAPI 3.0.1 document" in err and "--format openapi" in err and "not valid JSON" not in err
    assert not (tmp_path / "e").exists()
    with pytest.raises(SystemExit) as info:
        main(["index", str(path), "--out", str(tmp_path / "e"), "--format", "swagger"])
    assert info.value.code == 2 and "invalid choice: 'swagger'" in capsys.readouterr().err


def test_every_command_taking_a_catalog_has_format() -> None:
    commands = _commands(build_parser())
    for name in ("index", "eval", "graph build", "graph stats", "llm datagen", "train feedback-retriever"):
        options = [o for a in commands[name]._actions for o in a.option_strings]
        assert "--format" in options, name


def test_eval_and_graph_build_take_a_spec_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _json_file(tmp_path / "spec.json", OPENAPI_DOC)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        json.dumps({"id": "q", "query": "send an SMS", "relevant": ["Texts:POST /Messages.json"]}) + "\n",
        encoding="utf-8",
    )
    argv = ["eval", "--catalog", str(path), "--pipeline", "bm25", "--k", "1", "--batch-size", "0"]
    assert main([*argv, "--queries", str(queries)]) == 0
    assert "1 queries" in capsys.readouterr().out
    assert main(argv) == 2  # a file holds no queries: said before building anything
    assert "needs --queries" in capsys.readouterr().err
    assert main(["graph", "build", str(path), "--out", str(tmp_path / "g.json")]) == 0
    assert (tmp_path / "g.json").is_file()


def test_ctrl_c_is_one_line_and_exit_130(
    catalog_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolrerank_plugins.engine import Engine

    def interrupted(cls: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Engine, "build", classmethod(interrupted))
    assert main(["index", str(catalog_dir), "--out", str(tmp_path / "e"), "--pipeline", "bm25"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "toolrerank: interrupted (Ctrl-C)\n" and captured.out == ""
    assert not (tmp_path / "e").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_sigint_while_indexing_exits_130_without_a_traceback(catalog_dir: Path, tmp_path: Path) -> None:
    # was a 44-line torch traceback; the index build is made slow (a stand-in for encoding) to be interrupted
    import signal
    import textwrap

    script = textwrap.dedent(
        """
        import signal, sys, time
        from toolrerank_plugins.engine import Engine

        # as in a terminal: a test run started in the background inherits SIGINT ignored (a shell's rule for
        # background jobs), and Python then installs no KeyboardInterrupt handler
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def slow_build(cls, *args, **kwargs):
            sys.stderr.write("building\\n")
            sys.stderr.flush()
            time.sleep(120)

        Engine.build = classmethod(slow_build)
        from toolrerank_plugins.cli import main

        raise SystemExit(main(sys.argv[1:]))
        """
    )
    out = tmp_path / "engine"
    argv = ["index", str(catalog_dir), "--out", str(out), "--pipeline", "bm25"]
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        before: list[str] = []  # whatever importing printed (warnings), then the marker
        while not before or before[-1] != "building\n":
            line = proc.stderr.readline()
            assert line, "".join(before)  # the child ended without starting the build
            before.append(line)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.splitlines() == ["toolrerank: interrupted (Ctrl-C)"] and stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == [catalog_dir]


def test_an_existing_out_names_the_cli_option_before_building(
    catalog_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "engine"
    argv = ["index", str(catalog_dir), "--out", str(out), "--pipeline", "bm25"]
    assert main(argv) == 0
    capsys.readouterr()
    from toolrerank_plugins.engine import Engine

    built: list[bool] = []
    real = Engine.build.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(Engine, "build", classmethod(lambda cls, *a, **k: built.append(True) or real(cls, *a, **k)))
    assert main(argv) == 2
    err = capsys.readouterr().err
    # was "pass overwrite=True to replace it" (the Python argument), after the whole build
    assert "already exists; pass --overwrite to replace it" in err and "overwrite=True" not in err
    assert built == []
    assert main([*argv, "--overwrite"]) == 0 and built == [True]


@pytest.mark.parametrize("query", ["", "   ", "\t"])
def test_an_empty_query_is_a_usage_error(
    catalog_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    # was: nothing printed, exit 0
    with pytest.raises(SystemExit) as info:
        main(["search", str(tmp_path / "engine"), query])
    assert info.value.code == 2
    assert "argument query: the query is empty" in capsys.readouterr().err


def test_search_on_a_catalog_says_to_index_it_first(
    catalog_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _json_file(tmp_path / "spec.json", OPENAPI_DOC)
    for path in (catalog_dir, spec):
        assert main(["search", str(path), "send a message"]) == 2
        err = capsys.readouterr().err
        assert f"{path} is a catalog, not a saved engine" in err
        assert f"toolrerank index {path} --out ENGINE_DIR" in err
    assert main(["eval", "--engine", str(catalog_dir), "--queries", str(catalog_dir / "tools.jsonl")]) == 2
    assert "is a catalog, not a saved engine" in capsys.readouterr().err


def test_explain_timings_leave_model_loading_out(
    catalog_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # was: the first stage's time held the encoder's loading (5,735 ms on 235 APIs). A first search that
    # takes 400 ms longer stands in for a model loading on first use.
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever

    engine = tmp_path / "engine"
    assert main(["index", str(catalog_dir), "--out", str(engine), "--pipeline", "bm25"]) == 0
    real = BM25Retriever.search
    calls: list[int] = []

    def first_call_slow(self: BM25Retriever, queries: Any, depth: int) -> Any:
        if not calls:
            time.sleep(0.4)
        calls.append(1)
        return real(self, queries, depth)

    monkeypatch.setattr(BM25Retriever, "search", first_call_slow)
    capsys.readouterr()
    assert main(["search", str(engine), "send a message", "--explain"]) == 0
    text = capsys.readouterr().out
    first_stage = float(re.search(r"timings \(ms\): first_stage ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    warm = float(re.search(r"untimed first search of ([\d.]+) ms", text).group(1))  # type: ignore[union-attr]
    assert first_stage < 400 <= warm, text
    calls.clear()
    assert main(["search", str(engine), "send a message", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["timings_ms"]["first_stage"] < 400 <= data["setup_ms"]["warm_up"]


def test_demo_with_a_query_answers_it_without_the_evaluation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolrerank_plugins.evaluation as evaluation

    evaluated: list[int] = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: evaluated.append(1) or real(*a, **k))
    assert main(["demo", "--pipeline", "bm25", "--query", "translate this paragraph into German"]) == 0
    text = capsys.readouterr().out
    assert "Query: translate this paragraph into German" in text and "Evaluation" not in text
    assert evaluated == []  # was: the 88-query evaluation after every --query
    assert main(["demo", "--pipeline", "bm25", "--query", "translate this", "--eval"]) == 0
    assert "Evaluation on the 88 labelled queries" in capsys.readouterr().out and evaluated == [1]


def test_explain_says_why_a_prerequisite_was_inserted_and_what_each_score_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # was: an inserted prerequisite tied its dependant's score (0.6500 both) with no reason shown, and the stage
    # scores' scales (and which fusion "hybrid" meant) were unsaid
    assert main(["demo", "--pipeline", "hybrid+tgr", "--query", "change the e-mail address on my account"]) == 0
    text = capsys.readouterr().out
    assert "score scales" in text and "hybrid: reciprocal-rank fusion" in text and "tgr: " in text
    why = re.search(r"why: inserted as a prerequisite of (\w+) \((\w+) edge", text)
    assert why is not None and why.group(1) == "update_email", text
    scores = [float(x) for x in re.findall(r"score=([\d.]+)", text)]
    assert scores == sorted(scores, reverse=True) and len(set(scores[:3])) == 3  # no tie with its dependant
