from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_toolrerank import ToolSelector
from langchain_toolrerank._convert import tool_to_spec
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation, fake_result

from toolrerank_plugins.engine import EngineConfig
from toolrerank_plugins.interop import function_names
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder


@tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city for the coming days."""
    return f"sunny in {city}"


@tool
def send_email(to: str, body: str) -> str:
    """Send an email message to a recipient."""
    return f"sent to {to}"


@tool
def list_inbox(folder: str = "inbox") -> str:
    """List the email messages in the inbox."""
    return "3 messages"


@tool
def ask_user(question: str) -> str:
    """Ask the user a clarifying question."""
    return "yes"


TOOLS = [get_weather, send_email, list_inbox, ask_user]


def test_tool_to_spec_reads_name_description_and_schema():
    spec = tool_to_spec(get_weather)
    assert spec.id == spec.name == "get_weather"
    assert "forecast" in spec.description
    assert set(spec.parameters["properties"]) == {"city", "days"} and spec.parameters["required"] == ("city",)


def test_select_respects_max_tools_and_pins():
    selector = ToolSelector.from_tools(TOOLS, EngineConfig(retriever="bm25"), max_tools=2, always_include=["ask_user"])
    picked = [t.name for t in selector.select("send an email message")]
    assert picked == ["ask_user", "send_email"]
    assert [t.name for t in selector.select("send an email message", k=10)][:1] == ["ask_user"]
    assert len(selector.select("send an email message", k=10)) <= 2
    assert [t.name for t in asyncio.run(selector.aselect("send an email message"))] == picked


def test_exclude_goes_deeper():
    selector = ToolSelector.from_tools(TOOLS, EngineConfig(retriever="dense"), embedder=FakeEmbedder(), max_tools=2)
    first = [t.name for t in selector.select("email messages")]
    again = [t.name for t in selector.select("email messages", exclude=[first[0]])]
    assert first[0] not in again and len(again) == 2


def test_invalid_selector_arguments():
    with pytest.raises(ValueError, match="always_include"):
        ToolSelector.from_tools(TOOLS, EngineConfig(retriever="bm25"), always_include=["nope"])
    with pytest.raises(ValueError, match="max_tools"):
        ToolSelector.from_tools(
            TOOLS, EngineConfig(retriever="bm25"), max_tools=1, always_include=["ask_user", "send_email"]
        )
    selector = ToolSelector.from_tools(TOOLS, EngineConfig(retriever="bm25"))
    with pytest.raises(ValueError, match="no tool"):
        ToolSelector(selector.engine, TOOLS[:2])
    with pytest.raises(ValueError, match="k must be"):
        selector.select("x", k=0)


def test_bind_offers_only_selected_tools():
    selector = ToolSelector.from_tools(TOOLS, EngineConfig(retriever="bm25"), max_tools=1)
    model = ScriptedToolCallingModel(plan=[{"tools": ["get_weather"], "args": {"city": "Paris"}}])
    reply = selector.bind(model, "weather forecast in Paris").invoke([HumanMessage("weather forecast in Paris")])
    assert model.offered == [["get_weather"]]
    assert reply.tool_calls[0]["name"] == "get_weather"


def test_search_tool_returns_names_as_artifact(engine):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    selector = ToolSelector.from_engine(engine, impls)
    finder = selector.search_tool(k=2)
    msg = finder.invoke(
        {"name": finder.name, "args": {"query": "geocode a street address"}, "id": "1", "type": "tool_call"}
    )
    assert msg.artifact[0] == "geocode" and len(msg.artifact) == 2
    assert "geocode:" in msg.content
    assert asyncio.run(finder.ainvoke({"query": "geocode a street address"})) == msg.content


def test_from_engine_names_and_implementations(engine):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    selector = ToolSelector.from_engine(engine, impls)
    forecast = selector.get("forecast")
    assert forecast is not None and forecast.metadata["tool_id"] == "Weather/SkyCast/forecast"
    assert forecast.invoke({"city": "Paris"}) == fake_result(
        engine.catalog["Weather/SkyCast/forecast"], {"city": "Paris"}
    )
    with pytest.raises(ValueError, match="no implementation"):
        ToolSelector.from_engine(engine, {})


def test_function_names_are_valid_and_unique():
    specs = [
        ToolSpec("A/x/search", "search", tool="x", category="A"),
        ToolSpec("B/y/search", "search", tool="y", category="B"),
        ToolSpec("ok", "fine_name"),
        ToolSpec("C/" + "z" * 80, "bad name!"),
    ]
    names = function_names(specs)
    assert names["ok"] == "fine_name"
    assert names["A/x/search"] == "A_x_search" and names["B/y/search"] == "B_y_search"
    assert len(names[specs[3].id]) <= 64 and len(set(names.values())) == 4


# -- tools whose argument schema LangChain cannot convert: the library's error, not LangChain's ----------------
def _deep_schema(levels: int) -> dict:
    root: dict = {}
    node = root
    for _ in range(levels):
        node["type"] = "object"
        node["properties"] = {"x": {}}
        node = node["properties"]["x"]
    return root


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"$ref": "#/missing"}}},  # KeyError from langchain_core
        {"type": "object", "properties": {"x": {"$ref": "other.json"}}},  # ValueError: not a URI fragment
        _deep_schema(400),  # RecursionError
    ],
    ids=["dangling-ref", "external-ref", "400-deep"],
)
def test_a_schema_langchain_cannot_convert_is_a_catalog_error(schema: dict) -> None:
    from langchain_core.tools import StructuredTool

    from toolrerank_plugins.errors import CatalogError

    tool = StructuredTool(name="odd_tool", description="d", func=lambda **kw: "x", args_schema=schema)
    with pytest.raises(CatalogError, match="odd_tool.*cannot read its argument schema"):
        ToolSelector.from_tools([tool], EngineConfig(retriever="bm25"))


class _Opaque:
    """A class pydantic can hold (arbitrary_types_allowed) but cannot describe in JSON Schema."""


def test_a_field_pydantic_cannot_describe_is_a_catalog_error() -> None:
    from langchain_core.tools import StructuredTool
    from pydantic import ConfigDict, Field, create_model

    from toolrerank_plugins.errors import CatalogError

    # A field of an arbitrary class: pydantic documents PydanticInvalidForJsonSchema for it in every 2.x release. (A
    # bytes default b"\xff" raised UnicodeDecodeError only before pydantic 2.14, which warns instead.)
    model = create_model("M", __config__=ConfigDict(arbitrary_types_allowed=True), x=(_Opaque, Field(default=None)))
    tool = StructuredTool.from_function(lambda **kw: "x", name="opaque_tool", description="d", args_schema=model)
    with pytest.raises(CatalogError, match="opaque_tool.*cannot read its argument schema"):
        ToolSelector.from_tools([tool], EngineConfig(retriever="bm25"))
