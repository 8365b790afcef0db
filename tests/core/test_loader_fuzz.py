"""Every loader turns bad input into the library's ``CatalogError`` naming the entry (issue 11, item 6).

Generated documents (hypothesis, budget in ``tests/_fuzz.py``) for ``from_openapi``, ``from_mcp_tools``,
``from_openai_tools``, ``from_callables`` and ``load_catalog`` (generated lines and raw bytes): each call
returns a catalog or raises a :class:`ToolRerankError`; a catalog that loads must build, search, save and
load again.
"""

from __future__ import annotations

import inspect
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, event, given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import (
    Catalog,
    CatalogError,
    Engine,
    EngineConfig,
    from_callables,
    from_mcp_tools,
    from_openai_tools,
    from_openapi,
    load_catalog,
)
from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.loaders import load_edges, load_queries, load_tools_jsonl
from toolrerank_plugins.testing import FakeEmbedder

# -- generated JSON-like values, hostile ones included ----------------------------------------------
SURROGATES = st.sampled_from(["\ud800", "x\udfffy", "\udc80"])
TEXTS = st.one_of(st.text(max_size=10), SURROGATES)
# Built by .map(): hypothesis cannot repr an int past Python's 4,300-digit str limit in a strategy.
HUGE_INTS = st.sampled_from([64, 1024, 1330, 16610]).map(lambda bits: 2**bits) | st.just(-(2**63))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(), TEXTS, st.binary(max_size=2), st.just({1, 2})
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.one_of(TEXTS, st.integers(0, 2)), children, max_size=3)
    )


JSON_LIKE = st.recursive(SCALARS, _containers, max_leaves=8)
WORDS = st.from_regex(r"[a-z]{1,8}( [a-z]{1,8}){0,3}", fullmatch=True)


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


def mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """~90 % ``valid``, else ``hostile``: whole documents then still load often enough to exercise build,
    search, save and load. (``st.one_of(valid, valid, ...)`` would not weight: hypothesis merges identical
    branches.)"""
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda ok: valid if ok else hostile)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid shape, sometimes a hostile JSON-like value in its place."""
    return mostly(valid, JSON_LIKE)


SCHEMA = maybe(
    st.fixed_dictionaries(
        {"type": st.just("object")},
        optional={
            "properties": maybe(
                st.dictionaries(WORDS, maybe(st.fixed_dictionaries({"type": st.just("string")})), max_size=2)
            ),
            "required": maybe(st.lists(WORDS, max_size=2)),
            "x-deep": st.builds(_nest, st.just("leaf"), st.integers(0, 200)),
        },
    )
)


# -- the round trip an accepted catalog must survive -------------------------------------------------
def _build_search_save_load(catalog: Catalog) -> None:
    if len(catalog) == 0:
        return
    for retriever in ("bm25", "dense"):
        engine = Engine.build(catalog, EngineConfig(retriever=retriever), embedder=FakeEmbedder(32))  # type: ignore[arg-type]
        qs = [s.name for s in catalog][:4] + [""]
        before = [[r.id for r in rs] for rs in engine.search_batch(qs, 3)]
        with tempfile.TemporaryDirectory() as tmp:
            engine.save(Path(tmp) / "e")
            loaded = Engine.load(Path(tmp) / "e", embedder=FakeEmbedder(32))
        assert [s.to_dict() for s in loaded.catalog] == [s.to_dict() for s in catalog]
        assert [[r.id for r in rs] for rs in loaded.search_batch(qs, 3)] == before


def _catalog_or_library_error(call: Any) -> Catalog | None:
    try:
        out = call()
    except ToolRerankError as exc:
        event(f"rejected: {type(exc).__name__}")
        return None
    assert isinstance(out, Catalog)
    event("accepted" if len(out) else "accepted (empty)")
    return out


# -- OpenAPI ---------------------------------------------------------------------------------------
PARAMETER = maybe(
    st.fixed_dictionaries(
        {"name": maybe(WORDS), "in": st.sampled_from(["query", "path", "header"])},
        optional={"schema": SCHEMA, "description": maybe(WORDS), "required": maybe(st.booleans())},
    )
)
BODY = maybe(
    st.fixed_dictionaries(
        {
            "content": maybe(
                st.fixed_dictionaries({"application/json": maybe(st.fixed_dictionaries({"schema": SCHEMA}))})
            )
        },
        optional={"required": maybe(st.booleans())},
    )
)
RESPONSES = maybe(
    st.dictionaries(
        st.sampled_from(["200", "201", "404", "default"]),
        maybe(st.fixed_dictionaries({"description": WORDS}, optional={"content": JSON_LIKE})),
        max_size=2,
    )
)
OPERATION = maybe(
    st.fixed_dictionaries(
        {},
        optional={
            "operationId": maybe(WORDS),
            "summary": maybe(WORDS),
            "description": maybe(WORDS),
            "parameters": maybe(st.lists(PARAMETER, max_size=3)),
            "requestBody": BODY,
            "responses": RESPONSES,
        },
    )
)
PATH_ITEM = maybe(
    st.fixed_dictionaries(
        {},
        optional={
            "get": OPERATION,
            "post": OPERATION,
            "parameters": maybe(st.lists(PARAMETER, max_size=2)),
        },
    )
)
OPENAPI = st.fixed_dictionaries(
    {
        "openapi": maybe(st.just("3.0.3")),
        "info": maybe(st.fixed_dictionaries({"title": maybe(WORDS)}, optional={"description": maybe(WORDS)})),
        "paths": maybe(st.dictionaries(st.from_regex(r"/[a-z]{1,6}", fullmatch=True), PATH_ITEM, max_size=3)),
    },
    optional={"components": JSON_LIKE},
)


@FUZZ
@pytest.mark.fuzz
@given(doc=OPENAPI, category=mostly(st.one_of(st.none(), st.just("web")), SCALARS))
def test_generated_openapi_documents(doc: dict, category: Any) -> None:
    catalog = _catalog_or_library_error(lambda: from_openapi(doc, category=category))
    if catalog is not None:
        _build_search_save_load(catalog)


@FUZZ
@pytest.mark.fuzz
@given(doc=OPENAPI, as_yaml=st.booleans())
def test_generated_openapi_files(doc: dict, as_yaml: bool) -> None:
    try:
        text = json.dumps(doc) if not as_yaml else yaml.safe_dump(doc)
    except (TypeError, ValueError, yaml.YAMLError):
        assume(False)  # not representable as a file (bytes, sets, too-large ints): the dict test covers it
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("spec.yaml" if as_yaml else "spec.json")
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        catalog = _catalog_or_library_error(lambda: from_openapi(path))
    if catalog is not None:
        _build_search_save_load(catalog)


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("info",), [], "'info' must be a mapping"),
        (("info",), ["x"], "'info' must be a mapping"),
        (("info", "title"), ["x"], "'info.title' must be a string"),
        (("paths", "/a", "get", "responses"), [], "'responses' must be a mapping"),
        (("paths", "/a", "get", "requestBody"), ["x"], "'requestBody' must be a mapping"),
        (("paths", "/a", "get", "parameters"), 5, "'parameters' must be a list"),
        (("paths", "/a", "parameters"), 5, "'parameters' must be a list"),
        (
            ("paths", "/a", "get", "parameters"),
            [{"name": "x", "in": "query", "schema": [1]}],
            "'schema' must be a mapping",
        ),
        (("paths", "/a", "get", "parameters"), [{"name": ["x"], "in": "query"}], "'name' must be a non-empty string"),
        (("paths", "/a", "get", "parameters"), [5], "parameter 1 must be a mapping"),
        (
            ("paths", "/a", "get", "requestBody"),
            {"content": {"application/json": {"schema": {"properties": {"a": {}}, "required": 5}}}},
            "'required' must be a list of strings",
        ),
        (
            ("paths", "/a", "get", "requestBody"),
            {"content": {"application/json": {"schema": [1]}}},
            "'schema' must be a mapping",
        ),
        (("paths", "/a", "get", "responses"), {"200": "ok"}, "response '200' must be a mapping"),
        (("paths", "/a", "get", "responses"), {"200": {"content": []}}, "'content' must be a mapping"),
        (("paths", "/a", "get", "operationId"), 5, "'operationId' must be a string"),
        (("paths", "/a", "get", "description"), ["x"], "'description' must be a string"),
        (("paths", "/a", "get"), "x", "operation must be a mapping"),
        (("paths", "/a"), ["x"], "path item must be a mapping"),
        (("paths",), [], "'paths' mapping"),
        (("openapi",), ["3"], "not an OpenAPI 3 document"),
    ],
)
def test_malformed_openapi_shapes_name_the_operation(where: tuple, value: Any, message: str) -> None:
    doc: dict[str, Any] = {
        "openapi": "3.0.0",
        "info": {"title": "T"},
        "paths": {"/a": {"get": {"responses": {"200": {"description": "ok"}}}}},
    }
    node = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(CatalogError, match=message) as info:
        from_openapi(doc)
    if where[0] == "paths" and len(where) > 2:
        assert "GET /a" in str(info.value)


def test_openapi_files_non_utf8_deep_and_unparsable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"openapi": "3.0.0",\n "info": {"title": "\xff"}, "paths": {}}')
    with pytest.raises(CatalogError, match=r"bad.json:2: not valid UTF-8"):
        from_openapi(bad)
    deep = tmp_path / "deep.json"
    deep.write_text('{"openapi": "3.0.0", "paths": {}, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    with pytest.raises(CatalogError, match="deep.json: .*nested too deeply"):
        from_openapi(deep)
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("openapi: 3.0.0\npaths: {}\nx: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="deep.yaml"):
        from_openapi(deep_yaml)
    broken = tmp_path / "broken.yaml"
    broken.write_text("openapi: [3.0\n  paths: {", encoding="utf-8")
    with pytest.raises(CatalogError, match="broken.yaml: not valid JSON or YAML"):
        from_openapi(broken)
    with pytest.raises(CatalogError, match="missing.json: cannot read"):
        from_openapi(tmp_path / "missing.json")


def test_openapi_yaml_aliases_cannot_blow_up(tmp_path: Path) -> None:
    """A YAML "billion laughs" document is refused (too many values), not expanded for minutes."""
    lines = ["openapi: 3.0.0", "info: {title: T}", "a0: &a0 [" + ", ".join(["x"] * 40) + "]"]
    for i in range(1, 9):  # 40**9 values once expanded, from a 3 KB file
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 40) + "]")
    lines += ["paths:", "  /a:", "    get:", "      description: bomb", "      x-bomb: *a8", "      parameters:"]
    lines += ["        - {name: p, in: query, schema: {type: object, properties: {q: *a8}}}"]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="bomb.yaml: expanding .* more than 1,000,000 values"):
        from_openapi(path)


# -- MCP -------------------------------------------------------------------------------------------
MCP_TOOL = maybe(
    st.fixed_dictionaries(
        {"name": maybe(WORDS)},
        optional={
            "description": maybe(WORDS),
            "title": JSON_LIKE,
            "inputSchema": SCHEMA,
            "outputSchema": maybe(st.none() | SCHEMA),
            "annotations": JSON_LIKE,
        },
    )
)
MCP_SERVERS = st.one_of(
    st.dictionaries(
        mostly(WORDS, st.one_of(TEXTS, st.integers(), st.none())),
        st.one_of(
            st.fixed_dictionaries({"tools": maybe(st.lists(MCP_TOOL, max_size=3))}),
            st.lists(MCP_TOOL, max_size=3),
            JSON_LIKE,
        ),
        max_size=2,
    ),
    st.lists(MCP_TOOL, max_size=3),
)
MCP_SERVERS = mostly(MCP_SERVERS, JSON_LIKE)


@FUZZ
@pytest.mark.fuzz
@given(servers=MCP_SERVERS, server=mostly(st.one_of(st.none(), st.just("files")), SCALARS))
def test_generated_mcp_results(servers: Any, server: Any) -> None:
    catalog = _catalog_or_library_error(lambda: from_mcp_tools(servers, server=server))
    if catalog is not None:
        _build_search_save_load(catalog)


def test_mcp_accepts_a_bare_tools_list() -> None:
    tools = [{"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object"}}]
    flat = from_mcp_tools(tools)
    assert flat.ids == ["read_file"] and flat["read_file"].tool is None
    named = from_mcp_tools(tools, server="files")
    assert named.ids == ["files/read_file"] and named["files/read_file"].tool == "files"
    assert named["files/read_file"] == from_mcp_tools({"files": tools})["files/read_file"]
    assert from_mcp_tools({"files": {"tools": tools}})["files/read_file"] == named["files/read_file"]


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (5, "servers must be a mapping"),
        ("files", "servers must be a mapping"),
        ({"s": 5}, "server 's': expected a tools/list result"),
        ({5: []}, "server name must be a string"),
        ({"s": [{"name": "a", "description": ["x"]}]}, "server 's' tool 1: .*'description' must be a string"),
        ({"s": [{"name": "a", "inputSchema": [1]}]}, "server 's' tool 1: .*'parameters' must be a JSON Schema object"),
        ({"s": [{"name": "a", "annotations": {"x": b"1"}}]}, "server 's' tool 1: .*bytes"),
        ([{"name": "\ud800"}], "tool 1: .*surrogate"),
    ],
)
def test_bad_mcp_input_names_the_tool(servers: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        from_mcp_tools(servers)


# -- OpenAI ----------------------------------------------------------------------------------------
OPENAI_ENTRY = maybe(
    st.one_of(
        st.fixed_dictionaries(
            {
                "type": maybe(st.just("function")),
                "function": maybe(
                    st.fixed_dictionaries(
                        {"name": maybe(WORDS)},
                        optional={"description": maybe(WORDS), "parameters": SCHEMA, "strict": JSON_LIKE},
                    )
                ),
            }
        ),
        st.fixed_dictionaries({"name": maybe(WORDS)}, optional={"description": maybe(WORDS), "parameters": SCHEMA}),
    )
)


@FUZZ
@pytest.mark.fuzz
@given(tools=maybe(st.lists(OPENAI_ENTRY, max_size=3)), tool=mostly(st.one_of(st.none(), st.just("T")), SCALARS))
def test_generated_openai_tools(tools: Any, tool: Any) -> None:
    catalog = _catalog_or_library_error(lambda: from_openai_tools(tools, tool=tool))
    if catalog is not None:
        _build_search_save_load(catalog)


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (5, "tools must be a list"),
        ({"name": "f"}, "tools must be a list"),
        ([{"name": "f", "description": 5}], "entry 1: .*'description' must be a string"),
        (
            [{"name": "f", "parameters": {"type": "object", "properties": {"x": {"default": math.nan}}}}],
            "entry 1: .*nan",
        ),
    ],
)
def test_bad_openai_tools_name_the_entry(tools: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        from_openai_tools(tools)


# -- Python callables ------------------------------------------------------------------------------
ANNOTATIONS = mostly(
    st.sampled_from([inspect.Parameter.empty, int, str, float, bool, list[int], int | None]),
    st.sampled_from([list, dict, bytes, set, complex, object, "NoSuchType", "1/0", "(", "list[int]"]),
)


@st.composite
def callables(draw: st.DrawFn) -> Any:
    params, annotations = [], {}
    for i in range(draw(st.integers(0, 3))):
        ann = draw(ANNOTATIONS)
        default = draw(mostly(st.one_of(st.just(inspect.Parameter.empty), st.integers(), WORDS), JSON_LIKE))
        params.append(inspect.Parameter(f"p{i}", inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
        if ann is not inspect.Parameter.empty:
            annotations[f"p{i}"] = ann

    def fn(**kwargs: Any) -> None:
        return None

    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    fn.__annotations__ = annotations
    fn.__doc__ = draw(mostly(st.one_of(st.none(), st.just("Summary.\n\nArgs:\n    p0: the first one.\n")), TEXTS))
    fn.__name__ = draw(mostly(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.one_of(st.text(min_size=1), SURROGATES)))
    return fn


@FUZZ
@pytest.mark.fuzz
@given(fns=st.lists(callables(), max_size=3), tool=mostly(st.one_of(st.none(), st.just("T")), SCALARS))
def test_generated_callables(fns: list, tool: Any) -> None:
    catalog = _catalog_or_library_error(lambda: from_callables(fns, tool=tool))
    if catalog is not None:
        _build_search_save_load(catalog)


# -- JSONL files -----------------------------------------------------------------------------------
RECORD = st.fixed_dictionaries(
    {"id": maybe(WORDS), "name": maybe(WORDS)},
    optional={
        "description": maybe(WORDS),
        "tool": maybe(st.none() | WORDS),
        "category": maybe(st.none() | WORDS),
        "tool_description": maybe(st.none() | WORDS),
        "parameters": SCHEMA,
        "returns": maybe(st.none() | SCHEMA),
        "extra": JSON_LIKE,
        "metadata": JSON_LIKE,
    },
)


def _dump(record: Any) -> str | None:
    try:
        return json.dumps(record)  # escapes surrogates as \udXXX; NaN as NaN
    except (TypeError, ValueError):
        return None  # bytes, sets, ints past Python's str limit: not a line a file can hold


LINE = st.sampled_from([True] * 4 + [False]).flatmap(
    lambda ok: (
        st.builds(_dump, RECORD)
        if ok
        else st.one_of(
            st.builds(_dump, JSON_LIKE),
            st.binary(max_size=30),
            st.sampled_from(
                ["", "{", "[" * 3000 + "]" * 3000, '{"id": "a", "name": "a", "extra": ' + "[" * 5000 + "]" * 5000 + "}"]
            ),
            st.just('{"id": "big", "name": "n", "extra": {"v": ' + "9" * 5000 + "}}"),
            st.just('{"id": "nan", "name": "n", "extra": {"v": NaN}}'),
            st.just('{"id": "sur", "name": "n\\ud800"}'),
        )
    )
)


@FUZZ
@pytest.mark.fuzz
@given(lines=st.lists(LINE, min_size=1, max_size=4))
def test_generated_jsonl_files(lines: list) -> None:
    data = b"".join((x if isinstance(x, bytes) else (x or "").encode("utf-8")) + b"\n" for x in lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tools.jsonl"
        path.write_bytes(data)
        catalog = _catalog_or_library_error(lambda: load_catalog(path))
        for other in (load_edges, load_queries):
            try:
                other(path)
            except ToolRerankError:
                pass
    if catalog is not None:
        _build_search_save_load(catalog)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": "a", "name": "a"}\n{"id": "\xff", "name": "b"}\n', r"tools.jsonl:2: not valid UTF-8"),
        (
            b'{"id": "a", "name": "a", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
            r"tools.jsonl:1: .*nested too deeply",
        ),
        (b'{"id": "a", "name": "a", "extra": {"v": ' + b"9" * 5000 + b"}}\n", r"tools.jsonl:1: .*not valid JSON"),
        (b'{"id": "a", "name": "a\\ud800"}\n', r"tools.jsonl:1: API 'a': 'name' .*surrogate"),
        (b'{"id": "a", "name": "a", "tool": ["x"]}\n', r"tools.jsonl:1: API 'a': 'tool' must be a string"),
        (b'{"id": "a", "name": "a", "category": 5}\n', r"tools.jsonl:1: API 'a': 'category' must be a string"),
        (b'{"id": "a", "name": "a", "extra": {"v": NaN}}\n', r"tools.jsonl:1: API 'a': 'metadata'.*nan"),
        (b'{"id": "a", "name": "a", "extra": 5}\n', r"tools.jsonl:1: API 'a': 'metadata' must be a mapping"),
        (b'{"id": 5, "name": "a"}\n', r"tools.jsonl:1: missing or empty 'id'"),
    ],
)
def test_bad_jsonl_bytes_name_the_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_bytes(content)
    with pytest.raises(CatalogError, match=message):
        load_tools_jsonl(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"source": ["a"], "target": "b"}', "'source' must be a string"),
        ('{"source": "a", "target": "b", "weight": "heavy"}', "'weight' must be a number"),
        ('{"source": "a", "target": "b", "weight": NaN}', "'weight' must be a number"),
    ],
)
def test_bad_edges_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "edges.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=f"edges.jsonl:1: .*{message}"):
        load_edges(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"query": "q", "relevant": ["a"], "calls": 5}', "'calls' must be a list of API ids"),
        ('{"query": "q", "relevant": ["a"], "split": ["dev"]}', "'split' must be a string"),
        ('{"query": "q\\ud800", "relevant": ["a"]}', "surrogate"),
    ],
)
def test_bad_queries_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=f"queries.jsonl:1: .*{message}"):
        load_queries(path, split="dev")


@FUZZ
@pytest.mark.fuzz
@given(digits=st.integers(min_value=309, max_value=4299), sign=st.sampled_from(["", "-"]))
def test_generated_edge_weights_too_large_for_a_float_name_the_line(digits: int, sign: str) -> None:
    # an integer weight of 309+ digits raised OverflowError from math.isfinite
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edges.jsonl"
        path.write_text(f'{{"source": "a", "target": "b", "weight": {sign}1{"0" * digits}}}\n', encoding="utf-8")
        with pytest.raises(CatalogError, match="edges.jsonl:1: edge 'weight' must be a number"):
            load_edges(path)


@pytest.mark.parametrize("loader", [load_edges, load_queries, load_tools_jsonl, load_catalog, from_openapi])
@pytest.mark.parametrize("name", ["a\x00b.jsonl", "dir\x00/tools.jsonl"])
def test_a_path_with_a_nul_byte_is_a_catalog_error(tmp_path: Path, loader: Any, name: str) -> None:
    # open() raises a bare "ValueError: embedded null byte"
    with pytest.raises(CatalogError, match="null byte|no such catalog"):
        loader(str(tmp_path / name))
