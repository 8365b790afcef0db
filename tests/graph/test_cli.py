from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.cli import main
from toolrerank_plugins.loaders import write_tools_jsonl


def _write(cat: Catalog, folder: Path) -> Path:
    folder.mkdir()
    write_tools_jsonl(cat, folder / "tools.jsonl")
    return folder


def test_graph_build_and_stats(bank: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(bank, tmp_path / "cat")
    out = tmp_path / "g.json"
    assert main(["graph", "build", str(folder), "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["edges"] == 4 and report["edges_by_origin"] == {"schema": 4}
    assert main(["graph", "stats", str(out), "--catalog", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == len(bank)


def test_graph_stats_against_another_catalog_fails_clearly(
    bank: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(bank, tmp_path / "cat")
    out = tmp_path / "g.json"
    assert main(["graph", "build", str(folder), "--out", str(out)]) == 0
    other = bank.copy()
    other.remove(["Weather"])
    folder2 = _write(other, tmp_path / "cat2")
    capsys.readouterr()
    assert main(["graph", "stats", str(out), "--catalog", str(folder2)]) == 2
    assert "different catalog version" in capsys.readouterr().err


def test_discriminator_source_needs_a_model(bank: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(bank, tmp_path / "cat")
    rc = main(["graph", "build", str(folder), "--out", str(tmp_path / "g.json"), "--sources", "discriminator"])
    assert rc == 2 and "--discriminator" in capsys.readouterr().err


def test_train_discriminator_is_registered() -> None:
    from toolrerank_plugins.cli import build_parser

    args = build_parser().parse_args(["train", "discriminator", "--data", "x", "--out", "y"])
    assert args.func.__name__ == "cmd_train_discriminator"


def _write_traces(path: Path, calls: list[list[str]]) -> Path:
    rows = [{"id": str(i), "query": f"task {i}", "relevant": c, "calls": c} for i, c in enumerate(calls)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_graph_build_from_traces_mine_and_filter(
    bank: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(bank, tmp_path / "cat")
    traces = _write_traces(tmp_path / "q.jsonl", [["QueryBalance", "DeleteAccount"], ["QueryBalance", "DeleteAccount"]])
    out = tmp_path / "g.json"
    argv = ["graph", "build", str(folder), "--out", str(out), "--sources", "declared", "--traces", str(traces)]
    assert main([*argv, "--trace-mode", "mine", "--min-support", "2"]) == 0
    text = capsys.readouterr().out
    assert "mined 1 edges from 2 traces" in text
    assert json.loads(text[text.index("{") :])["edges"] == 1
    # filter mode keeps only declared edges the traces support: the bank catalog declares none
    assert main([*argv, "--trace-mode", "filter"]) == 0
    assert "kept 0 of 0 declared edges" in capsys.readouterr().out


def test_graph_build_traces_without_calls_is_a_clear_error(
    bank: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(bank, tmp_path / "cat")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "1", "query": "x", "relevant": ["QueryBalance"]}) + "\n")
    rc = main(["graph", "build", str(folder), "--out", str(tmp_path / "g.json"), "--traces", str(q)])
    assert rc == 2 and "no query has 'calls'" in capsys.readouterr().err
