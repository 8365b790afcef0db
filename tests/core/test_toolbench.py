"""ToolBench's retriever interface in the core (no agent framework needed)."""

from __future__ import annotations

import pytest

from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
from toolrerank_plugins.toolbench import ToolBenchRetriever, toolbench_category, toolbench_name


@pytest.fixture()
def engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Weather API v2", "weather_api_v2"), ("3d-models", "get_3d_models"), ("id", "is_id"), ("__x__", "x")],
)
def test_toolbench_names(name: str, expected: str) -> None:
    assert toolbench_name(name) == expected


def test_toolbench_category() -> None:
    assert toolbench_category("Text Analysis, NLP/Tools") == "Text_Analysis_NLP_Tools"


def test_retrieving_has_toolbench_keys_and_names(engine: Engine) -> None:
    out = ToolBenchRetriever(engine).retrieving("weather forecast for a city", top_k=3)
    best = engine.search("weather forecast for a city", top_k=3)
    assert [d["tool_id"] for d in out] == [st.tool.id for st in best]
    assert [d["score"] for d in out] == [st.score for st in best]
    assert out[0] == {
        "category": "Weather",
        "tool_name": "skycast",
        "api_name": "forecast",
        "tool_id": "Weather/SkyCast/forecast",
        "score": best[0].score,
    }
    raw = ToolBenchRetriever(engine, standardize=False).retrieving("weather forecast for a city", top_k=1)
    assert raw[0]["tool_name"] == "SkyCast"


def test_excluded_tools_leave_out_every_api_of_the_tool_and_keep_top_k(engine: Engine) -> None:
    r = ToolBenchRetriever(engine)
    query = "weather forecast for a city"
    out = r.retrieving(query, top_k=3, excluded_tools={"Weather": ["skycast"], "Nowhere": ["nothing"]})
    assert len(out) == 3 and all(d["tool_name"] != "skycast" for d in out)
    deeper = [st.tool.id for st in engine.search(query, top_k=6) if "/SkyCast/" not in st.tool.id]
    assert [d["tool_id"] for d in out] == deeper[:3]  # the ranking, minus the excluded tool's APIs
    # names are matched the way ToolBench writes them: the catalog's spelling excludes nothing
    assert any(
        d["tool_name"] == "skycast" for d in r.retrieving(query, top_k=3, excluded_tools={"Weather": ["SkyCast"]})
    )


def test_exclusion_follows_catalog_changes(engine: Engine) -> None:
    r = ToolBenchRetriever(engine)
    r.retrieving("weather", top_k=1)  # builds the tool -> ids map
    engine.add(
        [
            ToolSpec(
                "Weather/SkyCast/radar", "radar", "Weather radar images for a city", tool="SkyCast", category="Weather"
            )
        ]
    )
    out = r.retrieving("weather radar images for a city", top_k=3, excluded_tools={"Weather": ["skycast"]})
    assert "Weather/SkyCast/radar" not in [d["tool_id"] for d in out] and len(out) == 3
