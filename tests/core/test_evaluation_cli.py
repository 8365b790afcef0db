from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.cli import main
from toolrerank_plugins.evaluation import evaluate, query_metrics
from toolrerank_plugins.loaders import write_tools_jsonl
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.testing import tiny_catalog, tiny_queries


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bench"
    d.mkdir()
    write_tools_jsonl(tiny_catalog(), d / "tools.jsonl")
    with (d / "queries.jsonl").open("w") as fh:
        for q in tiny_queries():
            fh.write(
                json.dumps(
                    {
                        "id": q.id,
                        "query": q.query,
                        "relevant": list(q.relevant),
                        "split": q.split,
                        "group": q.group,
                        "calls": None,
                    }
                )
                + "\n"
            )
        fh.write(
            json.dumps(
                {
                    "id": "t1",
                    "query": "weather",
                    "relevant": ["Weather/SkyCast/forecast"],
                    "split": "train",
                    "group": "single",
                    "calls": None,
                }
            )
            + "\n"
        )
    return d


def test_evaluate_groups_overall_and_per_query_consistency() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    queries = tiny_queries() + [LabelledQuery("empty", "nothing", ())]
    report = evaluate(engine, queries, ks=(1, 5))
    d = report.to_dict()
    assert d["queries"]["n_evaluated"] == 4 and d["queries"]["n_skipped_no_relevant"] == 1
    assert set(d["groups"]) == {"single", "multi"}
    assert d["groups"]["single"]["n"] == 2 and d["overall"]["n"] == 4
    # overall is the mean of the per-query values, recomputed here from the rankings
    recomputed = [query_metrics(p["ranking"], p["relevant"], [1, 5])["recall@5"] for p in d["per_query"]]
    assert d["overall"]["recall@5"] == pytest.approx(sum(recomputed) / 4)
    assert d["latency_ms"]["p95"] >= d["latency_ms"]["p50"] > 0
    assert d["throughput_qps"]["batch"] > 0 and d["config"]["retriever"] == "bm25"
    assert "recall@1" in report.format_table()


def test_cli_index_search_eval_roundtrip(bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "engine"
    assert main(["index", str(bench_dir), "--out", str(out), "--pipeline", "bm25"]) == 0
    assert "indexed 10 APIs in 5 tools" in capsys.readouterr().out
    assert main(["search", str(out), "send a message", "--top-k", "2", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "send_email" in text and "stages: bm25=" in text
    assert main(["search", str(out), "send a message", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["rank"] == 1
    res = tmp_path / "r.json"
    assert (
        main(
            [
                "eval",
                "--catalog",
                str(bench_dir),
                "--split",
                "dev",
                "--pipeline",
                "bm25",
                "--k",
                "1",
                "3",
                "--output",
                str(res),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "overall" in printed and "p50" in printed
    data = json.loads(res.read_text())
    assert data["schema_version"] == 1 and data["queries"]["n_evaluated"] == 4 and data["ks"] == [1, 3]
    assert main(["eval", "--engine", str(out), "--queries", str(bench_dir / "queries.jsonl"), "--split", "train"]) == 0
    assert "1 queries" in capsys.readouterr().out


def test_cli_errors_are_clear(bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", str(tmp_path / "missing"), "q"]) == 2
    assert "not an engine directory" in capsys.readouterr().err
    assert main(["eval", "--catalog", str(bench_dir), "--pipeline", "nope"]) == 2
    assert "unknown pipeline 'nope'" in capsys.readouterr().err
    assert main(["eval", "--catalog", str(bench_dir), "--pipeline", "bm25", "--split", "test"]) == 2
    assert "no queries to evaluate" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "name": "x", "parameters": "oops"}\n')
    assert main(["index", str(bad), "--out", str(tmp_path / "e")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_pipeline_from_json_config(bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(EngineConfig(retriever="bm25", depth=7).model_dump_json())
    assert main(["eval", "--catalog", str(bench_dir), "--pipeline", str(cfg), "--batch-size", "0"]) == 0
    assert "retriever=bm25" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "{engine}", "mail", "--top-k", "0"], "argument --top-k: expected an integer >= 1, got 0"),
        (["search", "{engine}", "mail", "--top-k", "-1"], "argument --top-k: expected an integer >= 1, got -1"),
        (["search", "{engine}", "mail", "--top-k", "x"], "argument --top-k: expected an integer >= 1, got 'x'"),
        (["demo", "--top-k", "0"], "argument --top-k: expected an integer >= 1"),
        (["eval", "--engine", "{engine}", "--k", "5", "0"], "argument --k: expected an integer >= 1, got 0"),
        (["eval", "--engine", "{engine}", "--limit", "-1"], "argument --limit: expected an integer >= 0"),
        (["search", "{engine}", "mail \udcff"], "argument query: not valid UTF-8 \\(byte 0xff at position 5\\)"),
    ],
)
def test_bad_counts_and_undecodable_queries_are_usage_errors(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # were raw ValueError tracebacks from the search (top_k) or from check_query (a non-UTF-8 argv byte)
    engine = tmp_path / "engine"
    Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")).save(engine)
    with pytest.raises(SystemExit) as info:
        main([a.replace("{engine}", str(engine)) for a in argv])
    assert info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize("output", ["{tmp}", "\x00", "{tmp}/missing/r.json"])
def test_an_unwritable_eval_output_fails_before_evaluating(
    bench_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    output: str,
) -> None:
    # --output / raised IsADirectoryError (and NUL a ValueError) after the evaluation: the report was lost
    import toolrerank_plugins.evaluation as evaluation

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("evaluated although the report could not be written")

    monkeypatch.setattr(evaluation, "evaluate", must_not_run)
    argv = [
        "eval",
        "--catalog",
        str(bench_dir),
        "--pipeline",
        "bm25",
        "--output",
        output.replace("{tmp}", str(tmp_path)),
    ]
    assert main(argv) == 2
    assert re.match(r"toolrerank: error: --output .*(folder|NUL byte|does not exist)", capsys.readouterr().err)


def test_the_report_is_printed_when_writing_it_fails_after_the_check(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)  # every file the library writes goes through os.write
    out = tmp_path / "r.json"
    assert (
        main(["eval", "--catalog", str(bench_dir), "--pipeline", "bm25", "--batch-size", "0", "--output", str(out)])
        == 2
    )
    captured = capsys.readouterr()
    assert "cannot write the report" in captured.err and '"schema_version": 1' in captured.out


def test_an_infinite_value_in_a_pipeline_file_is_a_clear_error(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # json reads Infinity; the config validated, was saved with null in its place and did not load back
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"retriever": "bm25", "stages": [{"type": "multi_intent", "params": {"whole_weight": Infinity}}]}')
    assert main(["index", str(bench_dir), "--out", str(tmp_path / "e"), "--pipeline", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "cfg.json: not a valid engine config" in err and "not a finite number" in err
    assert not (tmp_path / "e").exists()


def test_config_validation_errors_are_reported_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the last resort in main: a pydantic validation error of a config the command did not turn into ConfigError
    engine = tmp_path / "engine"
    Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")).save(engine)

    def bad_config(self: Engine, q: str, top_k: int) -> None:
        EngineConfig.model_validate({"retriever": "bm25", "bm25": {"k1": float("inf")}})

    monkeypatch.setattr(Engine, "search_detailed", bad_config)
    assert main(["search", str(engine), "mail"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolrerank: error: ") and "k1" in err and "Traceback" not in err
    monkeypatch.setattr(Engine, "search_detailed", lambda self, q, top_k: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        main(["search", str(engine), "mail"])
