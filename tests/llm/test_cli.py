from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.cli import main

LLM = "tests.llm._fixtures:make_llm"


def test_eval_accepts_an_llm_and_reports_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cat = str(default_catalog_path())
    out = tmp_path / "r.json"
    rc = main(
        [
            "eval",
            "--catalog",
            cat,
            "--pipeline",
            "bm25+querygen",
            "--llm",
            LLM,
            "--limit",
            "3",
            "--batch-size",
            "0",
            "--llm-cache",
            str(tmp_path / "cache"),
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    assert "LLM usage per query: llm_calls 1.00" in capsys.readouterr().out
    usage = json.loads(out.read_text())["llm_usage"]["per_query_mean"]
    assert usage["llm_calls"] == 1 and usage["prompt_tokens"] > 50
    # the cache now answers alone: same rankings with no LLM at all
    out2 = tmp_path / "r2.json"
    rc = main(
        [
            "eval",
            "--catalog",
            cat,
            "--pipeline",
            "bm25+querygen",
            "--llm",
            "replay",
            "--limit",
            "3",
            "--batch-size",
            "0",
            "--llm-cache",
            str(tmp_path / "cache"),
            "--output",
            str(out2),
        ]
    )
    assert rc == 0

    def rankings(p: Path) -> list[list[str]]:
        return [q["ranking"] for q in json.loads(p.read_text())["per_query"]]

    assert rankings(out2) == rankings(out)
    # an empty cache in replay mode falls back to the first stage (bm25) instead of failing
    out3, out4 = tmp_path / "r3.json", tmp_path / "r4.json"
    main(
        [
            "eval",
            "--catalog",
            cat,
            "--pipeline",
            "bm25+querygen",
            "--llm",
            "replay",
            "--limit",
            "3",
            "--batch-size",
            "0",
            "--llm-cache",
            str(tmp_path / "empty"),
            "--output",
            str(out3),
        ]
    )
    main(["eval", "--catalog", cat, "--pipeline", "bm25", "--limit", "3", "--batch-size", "0", "--output", str(out4)])
    assert rankings(out3) == rankings(out4) != rankings(out)


def test_datagen_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cat = str(default_catalog_path())
    for kind in ("rejection-sampling", "qta-dpo", "feedback-traces"):
        out = tmp_path / f"{kind}.jsonl"
        rc = main(
            [
                "llm",
                "datagen",
                kind,
                "--catalog",
                cat,
                "--pipeline",
                "bm25",
                "--split",
                "dev",
                "--limit",
                "4",
                "--llm",
                LLM,
                "--out",
                str(out),
                "--min-reward",
                "0",
            ]
        )
        assert rc == 0 and out.is_file()
        assert "wrote" in capsys.readouterr().out
    traces = [json.loads(x) for x in (tmp_path / "feedback-traces.jsonl").read_text().splitlines()]
    assert traces and all("rounds" in t for t in traces)


def test_cli_errors_name_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["eval", "--catalog", str(default_catalog_path()), "--llm", "http://localhost:1/v1", "--limit", "1"])
    assert rc == 2 and "--llm-model" in capsys.readouterr().err
    rc = main(["llm", "datagen", "qta-dpo", "--catalog", str(default_catalog_path()), "--out", "x.jsonl"])
    assert rc == 2 and "--llm" in capsys.readouterr().err


def test_train_command_is_registered() -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "feedback-retriever", "--help"])
    assert info.value.code == 0
