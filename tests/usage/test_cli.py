"""``toolrerank learn``, ``toolrerank eval --usage-log`` and the log source of ``toolrerank train``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolrerank_plugins import Engine
from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.cli import main
from toolrerank_plugins.cli.train import log_queries, log_traces
from toolrerank_plugins.loaders import load_catalog, load_queries, write_tools_jsonl
from toolrerank_plugins.testing import tiny_catalog
from toolrerank_plugins.usage import UsageRecord, write_usage_log

pytestmark = pytest.mark.model  # the engines below encode requests with the bundled MiniLM

SEND = "Mail/PostBox/send_email"


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "usage.jsonl"
    write_usage_log(
        [
            UsageRecord("mail my landlord about the rent", relevant=(SEND,)),
            UsageRecord("write to my landlord about the rent", relevant=(SEND,)),
            UsageRecord("tell my landlord", relevant=("Nowhere/ghost",)),
        ],
        path,
    )
    with path.open("a") as fh:
        fh.write("{oops\n")
    return path


def test_learn_command_adds_the_log_and_saves(tmp_path, log_file, capsys):
    write_tools_jsonl(tiny_catalog(), tmp_path / "tools.jsonl")
    assert main(["index", str(tmp_path / "tools.jsonl"), "--out", str(tmp_path / "e"), "--pipeline", "bm25"]) == 0
    assert main(["learn", str(tmp_path / "e"), "--log", str(log_file)]) == 2
    assert "usage.jsonl:4: not a JSON object" in capsys.readouterr().err
    assert main(["learn", str(tmp_path / "e"), "--log", str(log_file), "--skip-malformed", "--json"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 malformed line(s)" in out
    report = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert report["learned"] == 2 and report["unknown_tool_ids"] == 1 and report["seen_tools"] == 1
    engine = Engine.load(tmp_path / "e")
    assert [s.name for s in engine.stages] == ["usage_memory"] and len(engine.stages[0].memory) == 2
    res = engine.search_detailed("email my landlord about the rent", top_k=1)
    assert res.results[0].id == SEND and res.trace["usage_memory"]["similar"]


def test_eval_with_a_usage_log_reports_memorised_and_generalised(tmp_path, capsys):
    root = default_catalog_path()
    queries = load_queries(root)
    log = tmp_path / "log.jsonl"
    write_usage_log([UsageRecord(q.query, relevant=q.relevant, id=q.id) for q in queries[:10]], log)
    out_file = tmp_path / "report.json"
    argv = ["eval", "--catalog", str(root), "--pipeline", "bm25", "--limit", "20", "--batch-size", "0"]
    assert main([*argv, "--usage-log", str(log), "--output", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert "memorised" in text and "generalised" in text
    usage = json.loads(out_file.read_text())["queries"]["usage_log"]
    assert usage["memorised"]["n"] == 10 and usage["generalised"]["n"] == 10
    assert usage["learn"]["learned"] == 10
    assert main([*argv, "--output", str(tmp_path / "plain.json")]) == 0  # the same queries without the log
    plain = json.loads((tmp_path / "plain.json").read_text())["per_query"][:10]
    before = sum(p["metrics"]["recall@5"] for p in plain) / 10
    assert usage["memorised"]["recall@5"] > before  # the memory holds their answers


def test_log_becomes_training_queries_and_feedback_traces(tmp_path, log_file):
    catalog = tiny_catalog()
    write_usage_log([UsageRecord("mail my landlord", relevant=(SEND, "ghost"))], tmp_path / "clean.jsonl")
    qs = log_queries([str(tmp_path / "clean.jsonl")], catalog, None)
    assert [(q.query, q.relevant) for q in qs] == [("mail my landlord", (SEND,))]
    [trace] = log_traces(qs, catalog, depth=3)
    assert trace["relevant"] == [SEND] and trace["rounds"][0]["round"] == 0
    assert len(trace["rounds"][0]["ranking"]) == 3


def test_train_classifier_from_a_log(tmp_path):
    root = default_catalog_path()
    log = tmp_path / "log.jsonl"
    write_usage_log([UsageRecord(q.query, relevant=q.relevant) for q in load_queries(root)], log)
    out = tmp_path / "clf"
    argv = ["train", "classifier", "--log", str(log), "--log-catalog", str(root), "--eval-split", "", "--out", str(out)]
    assert main(argv) == 0
    info = json.loads((out / "classifier.json").read_text())
    assert info  # a trained classifier was saved from the log alone
    assert len(load_catalog(root)) > 0
