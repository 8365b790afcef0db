from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins.llm.parsing import (
    clip,
    is_garbage,
    parse_query_list,
    parse_refinement,
    parse_rewrite,
    split_identifier,
)

CORPUS = Path(__file__).with_name("malformed_outputs.jsonl")
CASES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check(case: dict[str, Any]) -> None:
    e, text = case["expect"], case["text"]
    if case["parser"] == "list":
        p = parse_query_list(text)
        if "status" in e:
            assert p.status == e["status"], p
        if "status_in" in e:
            assert p.status in e["status_in"], p
        if "items" in e:
            assert p.items == e["items"], p
        if "n_items" in e:
            assert len(p.items) == e["n_items"], p
        if "min_items" in e:
            assert len(p.items) >= e["min_items"], p
        if "max_item_chars" in e:
            assert p.items and all(len(i) <= e["max_item_chars"] for i in p.items), p
        for frag in e.get("items_contain", []):
            assert any(frag in i for i in p.items), p
        for name in e.get("api_names_contain", []):
            assert name in p.api_names, p
        if "notes_contain" in e:
            assert any(n.startswith(e["notes_contain"]) for n in p.notes), p
        assert all(len(i) <= 200 for i in p.items)
    elif case["parser"] == "rewrite":
        r = parse_rewrite(text)
        if "status" in e:
            assert r.status == e["status"], r
        if "status_in" in e:
            assert r.status in e["status_in"], r
        if "text" in e:
            assert r.text == e["text"], r
        if "max_text_chars" in e:
            assert r.text is not None and len(r.text) <= e["max_text_chars"], r
    else:
        f = parse_refinement(text)
        assert f.kind == e["kind"], f
        if "text" in e:
            assert f.query == e["text"], f


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_malformed_output(case: dict[str, Any]) -> None:
    _check(case)


def test_parsers_never_raise_on_odd_input() -> None:
    for text in [None, "\x00\x01", "{" * 50, "[1, 2, {}]", '{"queries": 5}', "```", "<think>", "-\n-\n-"]:
        parse_query_list(text)
        parse_rewrite(text)
        parse_refinement(text)


def test_helpers() -> None:
    assert split_identifier("PartyPlanningAPI") == "Party Planning API"
    assert split_identifier("get_weather_data") == "get weather data"
    assert clip("a b c d", 3) == "a b"
    assert is_garbage("!!!! ????") and not is_garbage("Search flights by date")


def test_max_items_and_chars_are_respected() -> None:
    p = parse_query_list("\n".join(f"- search thing number {i} in the catalog" for i in range(10)), max_items=3)
    assert len(p.items) == 3
    r = parse_rewrite("Find flights from Lisbon to Berlin next Friday and book the cheapest one", max_chars=50)
    assert r.text is not None and len(r.text) <= 50
