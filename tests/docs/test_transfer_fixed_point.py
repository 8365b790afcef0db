"""benchmarks/transfer_fixed_point.py: the search for the parts the transfer rule agrees with (issue 29)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import transfer_fixed_point as fp  # noqa: E402


def test_a_rule_of_multi_intent_cannot_act_while_multi_intent_is_off() -> None:
    assert fp.applicable("named tools", frozenset())
    assert not fp.applicable("named tools", frozenset({"multi_intent"}))
    assert not fp.applicable("action compounds", frozenset({"action verbs"}))  # a rule of a rule
    assert not fp.applicable("confidence weights", frozenset({"agreement fusion (RRF k=5)"}))
    states = fp.needed(frozenset({"multi_intent"}))
    assert frozenset({"multi_intent", "named tools"}) not in states  # no run for a part that cannot act
    assert frozenset() in states and frozenset({"multi_intent", "tgr"}) in states


def _results(per_state: dict[frozenset[str], list[float]]) -> dict[str, Any]:
    runs = {fp.key(state): recall for state, recall in per_state.items()}
    return {"c": {"queries": [f"q{i}" for i in range(4)], "recall@5": {**runs, "hybrid": [0.0] * 4}}}


def test_a_part_that_loses_on_a_catalog_disagrees_with_being_on_and_one_that_gains_agrees() -> None:
    off: frozenset[str] = frozenset()
    on = [1.0, 1.0, 0.0, 1.0]
    per_state = {off: on}
    for part in fp.PARTS:
        per_state[frozenset({part})] = list(on)  # switching it off moves nothing: it does not act
    per_state[frozenset({"tgr"})] = [1.0, 0.0, 0.0, 1.0]  # tgr gains 25 points: it stays on
    per_state[frozenset({"stemming"})] = [1.0, 1.0, 1.0, 1.0]  # stemming loses 25 points: it should be off
    table = fp.table_at(off, _results(per_state))["table"]
    assert table["default -tgr"]["keep"] and not table["default -stemming"]["keep"]
    flips = fp.disagreements(off, table)
    # stemming disagrees; so does every part that acts nowhere (nothing shows it gains, so the rule has it off)
    assert "stemming" in flips and "tgr" not in flips
    assert flips["stemming"] == pytest.approx(25.0)


def test_a_part_that_is_off_and_would_gain_disagrees_with_being_off() -> None:
    off = frozenset({"stemming"})
    per_state = {off: [0.0, 1.0, 1.0, 1.0], frozenset(): [1.0, 1.0, 1.0, 1.0]}
    for part in fp.PARTS:
        if part != "stemming":
            per_state[off | {part}] = [0.0, 0.0, 1.0, 1.0]  # every other part gains 25 points where it is on
    table = fp.table_at(off, _results(per_state))["table"]
    assert table["default +stemming"]["keep"]  # with it on, a query is found: it should be on
    flips = fp.disagreements(off, table)
    assert set(flips) == {"stemming"} and flips["stemming"] == pytest.approx(25.0)
