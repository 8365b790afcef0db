"""``load_catalog_file``: one entry point for catalog files of every format, detected by content (issue 26).

Each format's file gives the same catalog as its loader called on the parsed data; a named format that does not
match says what it expected and what it found; byte-order marks are accepted.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins import (
    CatalogError,
    MissingExtraError,
    from_mcp_tools,
    from_openai_tools,
    from_openapi,
    load_catalog,
    load_catalog_file,
    load_queries,
)
from toolrerank_plugins.loaders import CATALOG_FORMATS, detect_format, load_edges, write_tools_jsonl
from toolrerank_plugins.testing import tiny_catalog

FIXTURES = Path(__file__).parent / "fixtures"

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.1",
    "info": {"title": "Texts"},
    "paths": {
        "/Messages.json": {
            "post": {
                "operationId": "CreateMessage",
                "summary": "Send a message",
                "requestBody": {
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {"type": "object", "properties": {"To": {"type": "string"}}}
                        }
                    }
                },
            }
        }
    },
}
MCP_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"name": "list_dir", "inputSchema": {"type": "object", "properties": {}}},
]
FUNCTION = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _write(path: Path, data: Any, *, indent: int | None = 2) -> Path:
    path.write_text(json.dumps(data, indent=indent), encoding="utf-8")
    return path


def _same(a: Any, b: Any) -> None:
    assert a.ids == b.ids
    assert [s.to_dict() for s in a] == [s.to_dict() for s in b]


# -- detection --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("indent", [2, None], ids=["pretty", "one-line"])
def test_an_openapi_json_file_loads_as_from_openapi_gives_it(tmp_path: Path, indent: int | None) -> None:
    # issue 26: `toolrerank index twilio_api_v2010.json` said "twilio_api_v2010.json:1: not valid JSON"
    path = _write(tmp_path / "texts.json", OPENAPI, indent=indent)
    assert detect_format(path) == "openapi"
    catalog = load_catalog_file(path)
    _same(catalog, from_openapi(OPENAPI))
    assert catalog.source == str(path) and catalog.ids == ["Texts:POST /Messages.json"]


@pytest.mark.parametrize("name", ["harbor_petshop_openapi30.yaml", "tidewatch_openapi31.yaml"])
def test_openapi_yaml_and_swagger_files_are_detected(name: str) -> None:
    assert detect_format(FIXTURES / name) == "openapi"
    _same(load_catalog_file(FIXTURES / name), from_openapi(FIXTURES / name))


def test_a_swagger_json_file_is_detected() -> None:
    path = FIXTURES / "city_library_swagger20.json"
    assert detect_format(path) == "openapi"
    _same(load_catalog_file(path), from_openapi(path))


@pytest.mark.parametrize(
    "shape",
    [
        {"tools": MCP_TOOLS},
        {"tools": MCP_TOOLS, "nextCursor": None},
        MCP_TOOLS,
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": MCP_TOOLS}},
    ],
    ids=["result", "result-with-cursor-field", "bare-list", "json-rpc-response"],
)
def test_mcp_tools_list_dumps_are_detected(tmp_path: Path, shape: Any) -> None:
    path = _write(tmp_path / "tools.json", shape)
    assert detect_format(path) == "mcp"
    catalog = load_catalog_file(path)
    _same(catalog, from_mcp_tools({"tools": MCP_TOOLS}, source=str(path)))
    assert catalog.ids == ["read_file", "list_dir"] and catalog["read_file"].metadata["format"] == "mcp"


def test_mcp_results_keyed_by_server_keep_the_server_names(tmp_path: Path) -> None:
    path = _write(tmp_path / "servers.json", {"fs": {"tools": MCP_TOOLS}, "git": MCP_TOOLS[:1]})
    assert load_catalog_file(path).ids == ["fs/read_file", "fs/list_dir", "git/read_file"]


def test_a_json_rpc_error_response_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "err.json", {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}})
    with pytest.raises(CatalogError, match=r"err\.json: a JSON-RPC error response.*-32601: nope"):
        load_catalog_file(path)


@pytest.mark.parametrize(
    "shape",
    [
        [{"type": "function", "function": FUNCTION}],  # chat completions
        [{"type": "function", **FUNCTION}],  # Responses API (flat)
        [FUNCTION],  # bare function schemas
        {"model": "gpt-x", "tools": [{"type": "function", "function": FUNCTION}]},  # a request body
    ],
    ids=["chat-completions", "responses", "bare", "request-body"],
)
def test_openai_tool_lists_are_detected(tmp_path: Path, shape: Any) -> None:
    path = _write(tmp_path / "tools.json", shape)
    assert detect_format(path) == "openai"
    catalog = load_catalog_file(path)
    _same(catalog, from_openai_tools([{"type": "function", "function": FUNCTION}], source=str(path)))
    assert list(catalog["get_weather"].parameters["required"]) == ["city"]


def test_function_schemas_without_parameters_are_openai_and_mcp_needs_its_schema_key(tmp_path: Path) -> None:
    # `parameters` is optional for an OpenAI function; an MCP tool always has `inputSchema`
    bare = _write(tmp_path / "functions.json", [{"name": "ping", "description": "Check the service is up"}])
    assert detect_format(bare) == "openai" and load_catalog_file(bare).ids == ["ping"]
    listed = _write(tmp_path / "listed.json", {"tools": [{"name": "ping"}]})  # a tools/list result, however thin
    assert detect_format(listed) == "mcp" and load_catalog_file(listed).ids == ["ping"]


def test_jsonl_files_and_folders_are_jsonl(tmp_path: Path) -> None:
    write_tools_jsonl(tiny_catalog(), tmp_path / "tools.jsonl")
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(tiny_catalog()[tiny_catalog().ids[0]].to_dict()) + "\n", encoding="utf-8")
    assert detect_format(tmp_path) == detect_format(tmp_path / "tools.jsonl") == detect_format(one) == "jsonl"
    _same(load_catalog_file(tmp_path), load_catalog(tmp_path))
    _same(load_catalog_file(tmp_path / "tools.jsonl", "jsonl"), load_catalog(tmp_path / "tools.jsonl"))
    assert len(load_catalog_file(one)) == 1


def test_a_bad_jsonl_record_is_reported_by_the_jsonl_loader_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_text('{"id": "a", "name": "a"}\n{"id": "b", "name": "b", "parameters": "oops"}\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"tools\.jsonl:2: .*'parameters' must be a JSON Schema object"):
        load_catalog_file(path)


# -- a named format, and files of no known format ------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "named", "expected", "found"),
    [
        (OPENAPI, "jsonl", "a JSONL catalog", "an OpenAPI 3.0.1 document"),
        (OPENAPI, "mcp", "an MCP tools/list result", "an OpenAPI 3.0.1 document"),
        ({"tools": MCP_TOOLS}, "openai", "an OpenAI tool list", r"an MCP tools/list result \(2 tools\)"),
        (
            [{"type": "function", "function": FUNCTION}],
            "openapi",
            "an OpenAPI 3.x or Swagger 2.0 document",
            "an OpenAI tool list",
        ),
    ],
)
def test_a_named_format_that_does_not_match_names_both(
    tmp_path: Path, data: Any, named: str, expected: str, found: str
) -> None:
    path = _write(tmp_path / "x.json", data)
    actual = detect_format(path)
    with pytest.raises(CatalogError) as info:
        load_catalog_file(path, named)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{path}: expected {expected[:20]}") and re.search(f"found {found}", message)
    assert f"--format {actual}" in message


def test_a_named_format_is_used_without_detection_when_it_matches(tmp_path: Path) -> None:
    path = _write(tmp_path / "spec.json", OPENAPI)
    assert load_catalog_file(path, "openapi").ids == ["Texts:POST /Messages.json"]
    with pytest.raises(CatalogError, match="unknown catalog format 'swagger'; known formats: jsonl, openapi"):
        load_catalog_file(path, "swagger")  # type: ignore[arg-type]
    with pytest.raises(
        CatalogError, match="expected an OpenAPI 3.x or Swagger 2.0 document .* in a file, found a folder"
    ):
        load_catalog_file(tmp_path, "openapi")


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (json.dumps({"a": 1, "b": [1]}), "found a JSON object with keys 'a', 'b'"),
        (json.dumps([1, 2]), "found a JSON list of 2 int"),
        ("[1]\n[2]\n", "found JSON lines starting with a JSON list"),
        ("name: x\nitems: [1]\n", "found a YAML object with keys 'name', 'items'"),
    ],
)
def test_a_file_of_no_known_format_lists_every_expected_format(tmp_path: Path, content: str, found: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        load_catalog_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a catalog file of a known format: expected a JSONL catalog")
    assert all(word in message for word in ("OpenAPI 3.x", "MCP tools/list", "OpenAI tool list")) and found in message


def test_text_and_empty_files_say_what_they_are(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello: world: again\n  - and: [\n", encoding="utf-8")
    with pytest.raises(
        CatalogError, match=r"notes\.txt: not a catalog file: expected JSON, JSON lines or YAML .*found text"
    ):
        load_catalog_file(text)
    empty = tmp_path / "empty.json"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"empty\.json: the file is empty"):
        load_catalog_file(empty)
    with pytest.raises(CatalogError, match="no such catalog file or directory"):
        load_catalog_file(tmp_path / "missing.json")


def test_load_catalog_on_another_format_points_to_load_catalog_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "twilio_api_v2010.json", OPENAPI)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert "expected a JSONL catalog" in message and "found an OpenAPI 3.0.1 document" in message
    assert "load_catalog_file" in message and "not valid JSON" not in message


def test_yaml_without_pyyaml_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    with pytest.raises(MissingExtraError) as info:
        load_catalog_file(FIXTURES / "harbor_petshop_openapi30.yaml")
    message = str(info.value)
    assert "harbor_petshop_openapi30.yaml: not JSON, and reading it as YAML needs PyYAML" in message
    assert 'pip install -e ".[openapi]"' in message and "toolrerank-plugins[openapi]" in message
    # JSON files need no PyYAML
    assert load_catalog_file(FIXTURES / "city_library_swagger20.json")


def test_the_formats_are_the_cli_choices() -> None:
    assert CATALOG_FORMATS == ("jsonl", "openapi", "mcp", "openai")


# -- byte-order marks -------------------------------------------------------------------------------------------
def test_files_with_a_utf8_byte_order_mark_load(tmp_path: Path) -> None:
    # issue 26: a tools.jsonl saved by Notepad (UTF-8 with BOM) was refused as "not valid JSON" at line 1
    bom = b"\xef\xbb\xbf"
    write_tools_jsonl(tiny_catalog(), tmp_path / "plain.jsonl")
    (tmp_path / "tools.jsonl").write_bytes(bom + (tmp_path / "plain.jsonl").read_bytes())
    _same(load_catalog(tmp_path / "tools.jsonl"), load_catalog(tmp_path / "plain.jsonl"))
    ids = tiny_catalog().ids
    edge = {"source": ids[0], "target": ids[1]}
    (tmp_path / "edges.jsonl").write_bytes(bom + json.dumps(edge).encode() + b"\n")
    assert [(e.source, e.target) for e in load_edges(tmp_path / "edges.jsonl")] == [(ids[0], ids[1])]
    query = {"id": "q1", "query": "weather in Oslo", "relevant": [ids[0]]}
    (tmp_path / "queries.jsonl").write_bytes(bom + json.dumps(query).encode() + b"\n")
    assert [q.query for q in load_queries(tmp_path)] == ["weather in Oslo"]
    assert len(load_catalog_file(tmp_path).edges) >= 1
    spec = tmp_path / "spec.json"
    spec.write_bytes(bom + json.dumps(OPENAPI).encode())
    assert load_catalog_file(spec).ids == from_openapi(spec).ids == ["Texts:POST /Messages.json"]
    tools = tmp_path / "mcp.json"
    tools.write_bytes(bom + json.dumps({"tools": MCP_TOOLS}, indent=1).encode())
    assert load_catalog_file(tools).ids == ["read_file", "list_dir"]


def test_bytes_that_are_not_utf8_are_reported_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_bytes(b'{"openapi": "3.0.1",\n "info": {"title": "T\xff"}, "paths": {}}')
    with pytest.raises(CatalogError, match=r"spec\.json:2: not valid UTF-8 \(byte 0xff\)"):
        load_catalog_file(path)
