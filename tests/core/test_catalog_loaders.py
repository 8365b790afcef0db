from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolrerank_plugins import (
    Catalog,
    CatalogError,
    ToolSpec,
    from_callables,
    from_mcp_tools,
    from_openai_tools,
    from_openapi,
    load_catalog,
    load_queries,
)
from toolrerank_plugins.loaders import spec_from_callable, write_tools_jsonl
from toolrerank_plugins.records import Edge, stable_id
from toolrerank_plugins.testing import tiny_catalog


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _api(i: str, **kw: object) -> dict:
    base = {
        "id": i,
        "name": f"api_{i}",
        "description": "does things",
        "tool": "T",
        "category": "C",
        "parameters": {"type": "object", "properties": {}, "required": []},
        "returns": None,
        "extra": {},
    }
    base.update(kw)
    return base


# -- records ---------------------------------------------------------------------------------------
def test_toolspec_is_frozen_and_deeply_read_only() -> None:
    spec = ToolSpec(id="a", name="a", parameters={"type": "object", "properties": {"x": {"type": "string"}}})
    with pytest.raises(AttributeError):
        spec.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.parameters["properties"]["y"] = {}  # type: ignore[index]
    assert spec.to_dict()["parameters"] == {"type": "object", "properties": {"x": {"type": "string"}}}


def test_toolspec_json_fields_serialise_with_json_dumps_and_stay_read_only() -> None:
    import copy
    import pickle

    schema = {"type": "object", "properties": {"x": {"type": "string", "enum": ["a", "b"]}}, "required": ["x"]}
    spec = ToolSpec(id="a", name="a", parameters=schema, returns={"type": "object"}, metadata={"k": [{"z": 1}]})
    # issue 26: json.dumps(spec.parameters) raised "Object of type mappingproxy is not JSON serializable"
    assert json.loads(json.dumps(spec.parameters)) == schema
    assert json.loads(json.dumps(spec.metadata)) == {"k": [{"z": 1}]}
    assert json.loads(json.dumps(spec.returns)) == {"type": "object"}
    props = spec.parameters["properties"]
    for change in (
        lambda: props.__setitem__("y", {}),
        lambda: props.__delitem__("x"),
        lambda: props.update(y={}),
        lambda: props.pop("x"),
        lambda: props.popitem(),
        lambda: props.setdefault("y", {}),
        lambda: props.clear(),
        lambda: props.__ior__({"y": {}}),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    props.__init__({"y": {}})  # a second __init__ changes nothing
    assert list(props) == ["x"] and spec.to_dict()["parameters"] == schema
    # copies: plain and mutable with copy()/dict(); read-only and equal with copy.copy/deepcopy/pickle
    assert type(props.copy()) is dict and dict(props) == {"x": {"type": "string", "enum": ("a", "b")}}
    assert copy.deepcopy(spec.parameters) == spec.parameters and pickle.loads(pickle.dumps(spec)) == spec
    with pytest.raises(TypeError, match="read-only"):
        copy.deepcopy(spec.parameters)["type"] = "array"
    with pytest.raises(TypeError, match="unhashable"):
        hash(spec.parameters)
    same = ToolSpec(id="a", name="a", parameters=schema, returns={"type": "object"}, metadata={"k": [{"z": 1}]})
    assert spec == same and hash(spec) == hash(same) == hash(ToolSpec(id="a", name="other"))


def test_stable_id_is_content_based_and_order_independent() -> None:
    assert stable_id({"a": 1, "b": [1, 2]}) == stable_id({"b": [1, 2], "a": 1})
    assert stable_id({"a": 1}) != stable_id({"a": 2})
    assert stable_id({"a": 1}).startswith("sha256:")


# -- catalog ---------------------------------------------------------------------------------------
def test_hierarchy_and_seen_tools() -> None:
    cat = tiny_catalog()
    tools = cat.tools()
    assert set(tools) == {
        "Auth/Keyring",
        "Weather/SkyCast",
        "Weather/MeteoNow",
        "Mail/PostBox",
        "Maps/GeoFind",
    }
    assert [s.name for s in cat.apis_of_tool("Auth/Keyring")] == ["login", "update_email", "logout"]
    assert [s.name for s in cat.apis_of_tool("Keyring")] == ["login", "update_email", "logout"]
    assert cat.categories()["Weather"] == ["Weather/SkyCast", "Weather/MeteoNow"]
    assert cat.has_hierarchy
    cat.mark_seen(["Weather/SkyCast"])
    assert cat.is_seen("Weather/SkyCast/forecast") and not cat.is_seen("Mail/PostBox/send_email")


def test_flat_catalog_every_api_is_its_own_tool() -> None:
    cat = Catalog([ToolSpec(id="a", name="a"), ToolSpec(id="b", name="b")])
    assert not cat.has_hierarchy
    assert set(cat.tools()) == {"a", "b"}


def test_add_update_remove() -> None:
    cat = tiny_catalog()
    n = len(cat)
    cat.add([ToolSpec(id="new", name="new_api")])
    assert len(cat) == n + 1 and cat["new"].name == "new_api"
    with pytest.raises(CatalogError, match="duplicate API id 'new'"):
        cat.add([ToolSpec(id="new", name="again")])
    cat.update([ToolSpec(id="new", name="renamed")])
    assert cat["new"].name == "renamed" and cat.ids[-1] == "new"
    with pytest.raises(CatalogError, match="unknown API id 'nope'"):
        cat.update([ToolSpec(id="nope", name="x")])
    cat.remove(["Auth/Keyring/login"])
    assert "Auth/Keyring/login" not in cat
    assert all("Auth/Keyring/login" not in (e.source, e.target) for e in cat.edges)
    with pytest.raises(CatalogError, match="unknown API"):
        cat.remove(["Auth/Keyring/login"])


def test_add_is_all_or_nothing() -> None:
    cat = tiny_catalog()
    n = len(cat)
    with pytest.raises(CatalogError, match="entry 2"):
        cat.add([ToolSpec(id="ok", name="ok"), ToolSpec(id="bad", name="")])
    assert len(cat) == n and "ok" not in cat


def test_edge_to_unknown_api_is_rejected() -> None:
    cat = tiny_catalog()
    with pytest.raises(CatalogError, match="unknown API 'ghost'"):
        cat.add_edge(Edge("ghost", "Auth/Keyring/login"))


# -- JSONL -----------------------------------------------------------------------------------------
def test_jsonl_roundtrip_with_edges_and_queries(tmp_path: Path) -> None:
    cat = tiny_catalog()
    write_tools_jsonl(cat, tmp_path / "tools.jsonl")
    _write(tmp_path / "edges.jsonl", [{"source": e.source, "target": e.target} for e in cat.edges])
    _write(
        tmp_path / "queries.jsonl",
        [
            {
                "id": "1",
                "query": "q",
                "relevant": ["Auth/Keyring/login"],
                "split": "dev",
                "group": "g",
                "calls": None,
            },
            {
                "id": "2",
                "query": "r",
                "relevant": ["Auth/Keyring/login"],
                "split": "train",
                "group": "g",
                "calls": None,
            },
        ],
    )
    loaded = load_catalog(tmp_path)
    assert [s.to_dict() for s in loaded] == [s.to_dict() for s in cat]
    assert len(loaded.edges) == 2
    assert [q.id for q in load_queries(tmp_path, split="dev")] == ["1"]
    assert len(load_queries(tmp_path / "queries.jsonl")) == 2


def test_non_english_and_empty_descriptions_are_legal(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "tools.jsonl",
        [
            _api("a", description="天気予報を取得します"),
            _api("b", description=""),
            _api("c", description=None),
        ],
    )
    cat = load_catalog(f)
    assert cat["a"].description == "天気予報を取得します" and cat["b"].description == "" == cat["c"].description


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([_api("a"), _api("a")], r"tools.jsonl:2: duplicate API id 'a' \(first on line 1\)"),
        ([_api("a", name="")], r"tools.jsonl:1: API 'a' has a missing or empty 'name'"),
        ([{"name": "x"}], r"tools.jsonl:1: missing or empty 'id'"),
        ([_api("a", parameters=["x"])], r"tools.jsonl:1: API 'a': 'parameters' must be a JSON Schema object"),
        ([_api("a", parameters={"type": "string"})], r"'parameters' must have type 'object'"),
        (
            [_api("a", parameters={"type": "object", "properties": {"x": "str"}})],
            r"parameter 'x' must be a JSON",
        ),
        (
            [_api("a", parameters={"type": "object", "properties": {}, "required": "x"})],
            r"required' must be a list",
        ),
        ([_api("a"), "{not json"], r"tools.jsonl:2: not valid JSON"),
        (["[1, 2]"], r"tools.jsonl:1: expected a JSON object"),
        ([], r"the catalog is empty"),
    ],
)
def test_bad_jsonl_input_names_file_line_and_problem(tmp_path: Path, rows: list, message: str) -> None:
    f = _write(tmp_path / "tools.jsonl", rows)
    with pytest.raises(CatalogError, match=message):
        load_catalog(f)


def test_missing_catalog_path(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no such catalog"):
        load_catalog(tmp_path / "nope.jsonl")
    with pytest.raises(CatalogError, match="has no tools.jsonl"):
        load_catalog(tmp_path)


# -- OpenAI / MCP / OpenAPI / callables ---------------------------------------------------------------
def test_openai_tools() -> None:
    cat = from_openai_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            },
            {"name": "bare_fn", "description": "bare schema"},
        ],
        tool="svc",
    )
    assert cat.ids == ["get_weather", "bare_fn"]
    assert cat["get_weather"].tool == "svc" and cat["bare_fn"].parameters["type"] == "object"
    with pytest.raises(CatalogError, match="entry 1: function has no 'name'"):
        from_openai_tools([{"type": "function", "function": {"description": "x"}}])


def test_mcp_tools_list() -> None:
    cat = from_mcp_tools(
        {
            "files": {
                "tools": [
                    {
                        "name": "read_file",
                        "description": "Read",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                            "required": ["path"],
                        },
                        "outputSchema": {"type": "object", "properties": {"content": {"type": "string"}}},
                    }
                ]
            },
            "git": [{"name": "status", "inputSchema": {"type": "object", "properties": {}}}],
        }
    )
    assert cat.ids == ["files/read_file", "git/status"]
    assert cat["files/read_file"].returns is not None and cat["git/status"].tool == "git"
    with pytest.raises(CatalogError, match="server 'x' tool 1: MCP tool has no 'name'"):
        from_mcp_tools({"x": {"tools": [{"description": "nameless"}]}})


OPENAPI = {
    "openapi": "3.0.0",
    "info": {"title": "Pets", "description": "A pet store"},
    "components": {
        "schemas": {"Pet": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}}
    },
    "paths": {
        "/pets/{pet_id}": {
            "parameters": [{"name": "pet_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
            "get": {
                "operationId": "getPet",
                "summary": "Get a pet",
                "responses": {
                    "200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}
                },
            },
            "delete": {"description": "Delete a pet", "responses": {"204": {"description": "gone"}}},
        },
        "/pets": {
            "post": {
                "summary": "Create",
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"name": {"type": "string"}},
                                "required": ["name"],
                            }
                        }
                    }
                },
                "responses": {"201": {"description": "ok"}},
            }
        },
    },
}


def test_openapi_one_api_per_operation(tmp_path: Path) -> None:
    cat = from_openapi(OPENAPI)
    assert cat.ids == ["Pets:GET /pets/{pet_id}", "Pets:DELETE /pets/{pet_id}", "Pets:POST /pets"]
    get = cat["Pets:GET /pets/{pet_id}"]
    assert get.name == "getPet" and get.tool == "Pets" and get.tool_description == "A pet store"
    assert get.parameters["required"] == ("pet_id",) and get.parameters["properties"]["pet_id"]["in"] == "path"
    assert get.returns is not None and "name" in get.returns["properties"]
    assert cat["Pets:POST /pets"].parameters["properties"]["name"]["in"] == "body"
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(OPENAPI))
    assert len(from_openapi(f)) == 3
    with pytest.raises(CatalogError, match="not an OpenAPI 3 document"):
        from_openapi({"swagger": "1.2"})  # Swagger 2.0 is read since issue 14 (tests/loaders); 1.x is not


def test_python_callables() -> None:
    def book_flight(flight_id: str, seats: int = 1, window: bool | None = None) -> dict:
        """Book seats on a flight.

        Args:
            flight_id: Id from search_flights.
            seats: How many seats
                to book.
        """
        return {}

    spec = spec_from_callable(book_flight, tool="Air")
    assert spec.id == "Air/book_flight" and spec.description == "Book seats on a flight."
    props = spec.parameters["properties"]
    assert spec.parameters["required"] == ("flight_id",)
    assert props["seats"]["type"] == "integer" and props["seats"]["default"] == 1
    assert props["seats"]["description"] == "How many seats to book."
    assert props["flight_id"]["description"] == "Id from search_flights."
    cat = from_callables([book_flight, len])
    assert "len" in cat
