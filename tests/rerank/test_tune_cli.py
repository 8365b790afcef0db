from __future__ import annotations

import itertools
import json

import pytest

from toolrerank_plugins.cli import main
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.rerank.stage import ToolRerankConfig, ToolRerankStage
from toolrerank_plugins.rerank.tune import metric_values, prepare, run_config, tune
from toolrerank_plugins.testing import FakeCrossEncoder, tiny_catalog


def _queries() -> list[LabelledQuery]:
    return [
        LabelledQuery(
            "1", "weather forecast in a city", ("Weather/SkyCast/forecast", "Weather/SkyCast/current"), group="g1"
        ),
        LabelledQuery(
            "2", "send an email and list the inbox", ("Mail/PostBox/send_email", "Mail/PostBox/list_inbox"), group="g1"
        ),
        LabelledQuery(
            "3", "log in then change the email address", ("Auth/Keyring/login", "Auth/Keyring/update_email"), group="g2"
        ),
        LabelledQuery(
            "4",
            "geocode an address and get the weather",
            ("Maps/GeoFind/geocode", "Weather/SkyCast/current"),
            group="g2",
        ),
    ]


@pytest.mark.parametrize("with_weight_axis", [False, True])
def test_decomposed_grid_matches_brute_force(engine, tmp_path, with_weight_axis):
    qs = _queries()
    oracle = tmp_path / "q.jsonl"
    oracle.write_text("".join(json.dumps({"query": q.query, "relevant": list(q.relevant)}) + "\n" for q in qs))
    stage = ToolRerankStage(
        ToolRerankConfig(classification="oracle", oracle_queries=str(oracle), top_k=2),
        engine.context,
        reranker=FakeCrossEncoder(),
    )
    prep = prepare(engine, qs, 10)
    grid: dict[str, list] = {"m_s": [1, 3], "m_u": [2, 10], "tau_s": [0.3, 0.9], "tau_m": [0.0, 0.9], "n": [1, 2]}
    if with_weight_axis:
        grid["first_stage_weight"] = [0.0, 0.5, 1.0]
    res = tune(stage, engine, prep, grid)
    brute = max(
        sum(
            w * v
            for w, v in zip(
                prep.weights, metric_values(run_config(stage, engine, prep, dict(zip(grid, combo))), qs, "recall", 2)
            )
        )
        for combo in itertools.product(*grid.values())
    )
    assert abs(res["objective"] - brute) < 1e-9
    assert set(res["params"]) == set(grid)


def test_cli_tune_without_model(tmp_path, capsys):
    data = tmp_path / "bench"
    data.mkdir()
    with (data / "tools.jsonl").open("w") as fh:
        for s in tiny_catalog():
            fh.write(json.dumps(s.to_dict()) + "\n")
    with (data / "queries.jsonl").open("w") as fh:
        for q in _queries():
            fh.write(
                json.dumps(
                    {"id": q.id, "query": q.query, "relevant": list(q.relevant), "split": "dev", "group": q.group}
                )
                + "\n"
            )
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"m_s": [2], "m_u": [5], "tau_s": [0.5, 0.9], "tau_m": [0.8], "n": [2]}))
    out = tmp_path / "best.json"
    rc = main(
        [
            "tune",
            "--catalog",
            str(data),
            "--split",
            "dev",
            "--classification",
            "single",
            "--grid",
            str(grid),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    best = json.loads(out.read_text())
    assert best["params"]["m_s"] == 2 and best["params"]["tau_s"] in (0.5, 0.9)
    assert best["stage_params"]["classification"] == "single"
    assert 0.0 <= best["objective"] <= 1.0


def test_cli_tune_empty_split_is_an_error(tmp_path, capsys):
    data = tmp_path / "bench"
    data.mkdir()
    (data / "tools.jsonl").write_text(json.dumps(next(iter(tiny_catalog())).to_dict()) + "\n")
    (data / "queries.jsonl").write_text("")
    rc = main(["tune", "--catalog", str(data), "--split", "dev", "--out", str(tmp_path / "b.json")])
    assert rc == 2 and "no queries" in capsys.readouterr().err


def test_registered_hierarchy_pipelines():
    from toolrerank_plugins.cli import build_parser
    from toolrerank_plugins.pipelines import pipeline_config

    build_parser()
    cfg = pipeline_config("bm25-hierarchy")
    assert cfg.retriever == "bm25" and cfg.stages[0].type == "toolrerank"
