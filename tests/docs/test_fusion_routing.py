"""benchmarks/fusion_routing.py: a message's fusion chosen by a feature of its text, read off a transfer run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fusion_routing as fr  # noqa: E402


def _catalog(folder: Path, queries: list[str]) -> None:
    folder.mkdir()
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for n, q in enumerate(queries):
            fh.write(json.dumps({"id": f"{folder.name}/{n}", "query": q, "relevant": ["t"], "split": "dev"}) + "\n")


def test_each_rule_takes_the_agreement_result_where_the_feature_is_small_else_rrf(tmp_path: Path) -> None:
    short, long_ = "find a hotel", "book a flight, rent a car, and then tell my team about it on the channel"
    _catalog(tmp_path / "c", [short, long_])
    results = {"c": {"queries": ["c/1", "c/0"], "recall@5": {"default": [1.0, 0.0], fr.AGREEMENT: [0.0, 1.0]}}}
    table = fr.routed(results, {"c": tmp_path / "c"})["c"]["recall@5"]
    assert table["rrf"] == [1.0, 0.0] and table["agreement"] == [0.0, 1.0]
    # the results are in the run's query order (the long message first): the short one gets agreement's 1.0
    assert table["words<=6"] == [1.0, 1.0]
    assert table["words<=40"] == [0.0, 1.0]  # both short enough: agreement's results
    assert table["commas+lines<=0"] == [1.0, 1.0] and table["commas+lines<=2"] == [0.0, 1.0]
    assert table["sentences<=1"] == [0.0, 1.0]


def test_the_table_chooses_each_rule_without_the_held_out_catalog(tmp_path: Path) -> None:
    # on a and b the agreement fusion wins every short message; on c it loses the long one
    for name in "abc":
        _catalog(tmp_path / name, ["find a hotel", "book a flight, rent a car, and tell the team in the channel"])
    win = {"queries": ["x/0", "x/1"], "recall@5": {"default": [0.0, 1.0], fr.AGREEMENT: [1.0, 1.0]}}
    lose = {"queries": ["x/0", "x/1"], "recall@5": {"default": [1.0, 1.0], fr.AGREEMENT: [1.0, 0.0]}}
    results = {n: {**r, "queries": [f"{n}/0", f"{n}/1"]} for n, r in (("a", win), ("b", win), ("c", lose))}
    table = fr.routed(results, {n: tmp_path / n for n in "abc"})
    text = fr.markdown(table)
    assert "| c | words<=6 | +0.0" in text  # chosen without c: agreement for the short message only
    assert "| a | words<=6 | +50.0" in text
