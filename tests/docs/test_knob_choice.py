"""benchmarks/knob_choice.py: the default's knobs chosen leaving one catalog out (issue 29, item 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import knob_choice as kc  # noqa: E402

from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402


def test_a_knob_is_read_as_section_field_and_json_values() -> None:
    assert kc.parse_knob("multi_intent.rrf_k=1,3,60") == ("multi_intent", "rrf_k", [1, 3, 60])
    assert kc.parse_knob("hybrid.fusion=rrf,zscore") == ("hybrid", "fusion", ["rrf", "zscore"])
    for bad in ("multi_intent.rrf_k", "rrf_k=1,2", "multi_intent.=1", ".rrf_k=1"):
        with pytest.raises(SystemExit):
            kc.parse_knob(bad)


def test_the_grid_labels_the_default_point_and_sets_stage_params_and_sections() -> None:
    default = pipeline_config("default")
    rrf_k = default.hybrid.rrf_k
    cfgs = kc.grid([kc.parse_knob(f"hybrid.rrf_k={rrf_k},{rrf_k + 1}"), kc.parse_knob("multi_intent.whole_weight=1,2")])
    # multi_intent's whole_weight defaults to 1: the point (rrf_k, 1) is the default, labelled so, once
    assert list(cfgs) == [
        "default",
        f"rrf_k={rrf_k},whole_weight=2",
        f"rrf_k={rrf_k + 1},whole_weight=1",
        f"rrf_k={rrf_k + 1},whole_weight=2",
    ]
    assert cfgs["default"] == default
    edited = cfgs[f"rrf_k={rrf_k + 1},whole_weight=2"]
    assert edited.hybrid.rrf_k == rrf_k + 1
    (stage,) = [s for s in edited.stages if s.type == "multi_intent"]
    assert stage.params["whole_weight"] == 2
    for unknown in ("no_such_stage.x=1,2", "hybrid.no_such_field=1,2", "multi_intent.no_such_param=1,2"):
        with pytest.raises(SystemExit):
            kc.grid([kc.parse_knob(unknown)])


def test_a_dotted_field_sets_a_nested_setting_and_keeps_its_siblings() -> None:
    default = pipeline_config("default")
    (tgr,) = [s for s in default.stages if s.type == "tgr"]
    window = tgr.params["expansion"]["window"]
    cfgs = kc.grid([kc.parse_knob(f"tgr.expansion.window={window},{window + 1}")])
    assert list(cfgs) == ["default", f"expansion.window={window + 1}"]
    (edited,) = [s for s in cfgs[f"expansion.window={window + 1}"].stages if s.type == "tgr"]
    assert edited.params["expansion"] == {**tgr.params["expansion"], "window": window + 1}
    for unknown in ("tgr.expansion.no_such_field=1,2", "tgr.no_such_param.window=1,2", "hybrid.rrf_k.x=1,2"):
        with pytest.raises(SystemExit):
            kc.grid([kc.parse_knob(unknown)])


def _results(per_catalog: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    return {c: {"queries": [f"q{i}" for i in range(4)], "recall@5": runs} for c, runs in per_catalog.items()}


def test_the_choice_follows_the_transfer_rule_against_the_default() -> None:
    base = [1.0, 0.0, 0.0, 1.0]
    results = _results(
        {
            "a": {"default": base, "x": [1.0, 1.0, 0.0, 1.0], "y": [1.0, 1.0, 1.0, 1.0]},
            "b": {"default": base, "x": [1.0, 1.0, 0.0, 1.0], "y": [0.0, 1.0, 1.0, 1.0]},
            "c": {"default": base, "x": base, "y": [0.0, 0.0, 0.0, 1.0]},  # y loses 25 points on c
        }
    )
    labels = ["default", "x", "y"]
    # y has the larger mean gain on a and b, but loses more than 0.5 on c: on all three only x passes
    assert kc.choose(results, ["a", "b", "c"], labels, "default") == "x"
    assert kc.choose(results, ["a", "b"], labels, "default") == "y"  # without c, y passes and gains more
    # nothing passes: the default stays
    assert kc.choose(results, ["c"], ["default", "y"], "default") == "default"
    # a setting that acts nowhere is no evidence of a gain
    assert kc.choose(results, ["c"], ["default", "x"], "default") == "default"
    assert "Chosen on all 3 catalogs: x" in kc.markdown(results)
