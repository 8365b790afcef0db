"""Precision of the zero-training schema graph: no edges between tools/servers on a bare name match.

The MCP specs below are hand-written in the shape the reference ``time`` and ``git`` servers report from
``tools/list`` (FastMCP structured output: ``convert_time``'s ``outputSchema`` holds ``$ref``'d fields
``source`` and ``target``; ``git_diff`` takes a string ``target``). The old rule (any shared name with
compatible types, ``cross_tool="name"``) made ``time/convert_time -> git/git_diff``; each test that asserts
the absence of such an edge also shows that the old rule produced it.
"""

from __future__ import annotations

from typing import Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.graph.schema_deps import (
    SchemaConfig,
    SchemaDependencyDetector,
    is_id_name,
    typed_match,
)
from toolrerank_plugins.loaders import from_mcp_tools
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.stages import StageSpec

from .conftest import _params, _returns

_TIME_RESULT = {
    "properties": {
        "timezone": {"title": "Timezone", "type": "string"},
        "datetime": {"title": "Datetime", "type": "string"},
        "day_of_week": {"title": "Day Of Week", "type": "string"},
        "is_dst": {"title": "Is Dst", "type": "boolean"},
    },
    "required": ["timezone", "datetime", "day_of_week", "is_dst"],
    "title": "TimeResult",
    "type": "object",
}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _tool(name: str, description: str, props: dict[str, Any], out: dict[str, Any] | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": props, "required": list(props)},
    }
    if out is not None:
        tool["outputSchema"] = out
    return tool


def _time_server() -> dict[str, Any]:
    return {
        "tools": [
            _tool(
                "get_current_time",
                "Get current time in a specific timezone",
                {"timezone": _str("IANA name")},
                _TIME_RESULT,
            ),
            _tool(
                "convert_time",
                "Convert time between timezones",
                {
                    "source_timezone": _str("Source IANA timezone name"),
                    "time": _str("Time to convert in 24-hour format (HH:MM)"),
                    "target_timezone": _str("Target IANA timezone name"),
                },
                {
                    "$defs": {"TimeResult": _TIME_RESULT},
                    "properties": {
                        "source": {"$ref": "#/$defs/TimeResult"},
                        "target": {"$ref": "#/$defs/TimeResult"},
                        "time_difference": {"title": "Time Difference", "type": "string"},
                    },
                    "required": ["source", "target", "time_difference"],
                    "title": "TimeConversionResult",
                    "type": "object",
                },
            ),
        ]
    }


def _git_server() -> dict[str, Any]:
    repo = _str("Path to the Git repository")
    return {
        "tools": [
            _tool("git_status", "Shows the working tree status", {"repo_path": repo}),
            _tool(
                "git_diff",
                "Shows differences between branches or commits",
                {"repo_path": repo, "target": _str("Target branch or commit to compare with")},
            ),
            _tool(
                "git_log",
                "Shows the commit logs",
                {"repo_path": repo, "max_count": {"type": "integer", "description": "Maximum number of commits"}},
            ),
            _tool("git_show", "Shows the contents of a commit", {"repo_path": repo, "revision": _str("Revision")}),
            _tool(
                "git_create_branch",
                "Creates a new branch from an optional base branch",
                {
                    "repo_path": repo,
                    "branch_name": _str("Name of the new branch"),
                    "base_branch": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                },
            ),
        ]
    }


def _pairs(catalog: Catalog, config: SchemaConfig | None = None) -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in SchemaDependencyDetector(config).detect(catalog)}


def test_mcp_time_convert_time_does_not_feed_git_diff() -> None:
    catalog = from_mcp_tools({"time": _time_server(), "git": _git_server()})
    assert ("time/convert_time", "git/git_diff") in _pairs(catalog, SchemaConfig(cross_tool="name"))  # the bug
    pairs = _pairs(catalog)
    assert ("time/convert_time", "git/git_diff") not in pairs
    servers = {tid: catalog[tid].tool for tid in catalog.ids}
    assert not [p for p in pairs if servers[p[0]] != servers[p[1]]]  # no edge between the two servers at all


def test_mcp_git_request_gets_no_time_tool_from_the_graph() -> None:
    """The reported symptom: with the default schema graph, a git request pulled in a time tool."""
    catalog = from_mcp_tools({"time": _time_server(), "git": _git_server()})
    query = "show the differences between my branch and main"

    def search(**schema: str) -> tuple[list[str], list[dict[str, Any]]]:
        params = {"propagate": False, "expansion": {"enabled": True, "window": 5}, "schema_detector": schema}
        engine = Engine.build(catalog, pipeline_config("bm25", stages=[StageSpec(type="tgr", params=params)]))
        res = engine.search_detailed(query, top_k=5)
        return [r.id for r in res.results], res.trace["tgr"]["expanded"]

    plain = [r.id for r in Engine.build(catalog, pipeline_config("bm25")).search(query, top_k=5)]
    assert "git/git_diff" in plain
    _, old_expanded = search(cross_tool="name")
    assert {"id": "time/convert_time", "prerequisite_of": "git/git_diff"}.items() <= old_expanded[0].items()  # the bug
    ids, expanded = search()
    assert expanded == [] and ids == plain


def test_typed_id_evidence_links_servers() -> None:
    """An id-like output with a declared type feeding a parameter of the same type: an edge across servers."""
    catalog = from_mcp_tools(
        {
            "tracker": {
                "tools": [
                    _tool(
                        "create_issue",
                        "Create an issue",
                        {"title": _str("title")},
                        {"type": "object", "properties": {"issue_id": {"type": "string"}, "url": {"type": "string"}}},
                    ),
                    _tool(
                        "open_ticket",
                        "Open a support ticket",
                        {"summary": _str("summary")},
                        {"type": "object", "properties": {"ticket_id": {"$ref": "#/$defs/TicketId"}}},
                    ),
                ]
            },
            "chat": {
                "tools": [
                    _tool("announce_issue", "Post an issue to a channel", {"issue_id": _str("issue")}),
                    _tool("link_ticket", "Link a support ticket", {"ticket_id": _str("ticket")}),
                ]
            },
        }
    )
    edges = {(e.source, e.target): e.weight for e in SchemaDependencyDetector().detect(catalog)}
    assert edges == {("tracker/create_issue", "chat/announce_issue"): 1.0}  # the $ref'd ticket_id does not count
    assert ("tracker/open_ticket", "chat/link_ticket") in _pairs(catalog, SchemaConfig(cross_tool="name"))
    assert _pairs(catalog, SchemaConfig(cross_tool="none")) == set()


def test_non_id_names_and_mismatched_types_across_tools_give_no_edge() -> None:
    # API-Bank's IdentifySong returns a string 'year'; SearchMovieMusic takes an integer 'year'.
    cat = Catalog(
        [
            ToolSpec("IdentifySong", "IdentifySong", "x", parameters=_params("audio"), returns=_returns("year")),
            ToolSpec(
                "SearchMovieMusic", "SearchMovieMusic", "y", parameters=_params("year", types={"year": "integer"})
            ),
            ToolSpec(
                "MakeOrder",
                "MakeOrder",
                "z",
                parameters=_params("item"),
                returns=_returns("order_id", types={"order_id": "integer"}),
            ),
            ToolSpec("ShipOrder", "ShipOrder", "w", parameters=_params("order_id", types={"order_id": "boolean"})),
        ]
    )
    assert ("IdentifySong", "SearchMovieMusic") in _pairs(cat, SchemaConfig(cross_tool="name"))
    assert _pairs(cat) == set()


def test_same_tool_name_match_is_kept_with_a_weak_weight() -> None:
    cat = Catalog(
        [
            ToolSpec("Shop/find", "find", "find a product", tool="Shop", returns=_returns("product_name", "sku")),
            ToolSpec("Shop/buy", "buy", "buy a product", tool="Shop", parameters=_params("product_name")),
            ToolSpec("Shop/stock", "stock", "stock of a product", tool="Shop", parameters=_params("sku")),
            ToolSpec("Other/buy", "buy", "buy elsewhere", tool="Other", parameters=_params("product_name")),
        ]
    )
    weights = {(e.source, e.target): e.weight for e in SchemaDependencyDetector().detect(cat)}
    assert weights == {("Shop/find", "Shop/buy"): 0.5, ("Shop/find", "Shop/stock"): 1.0}
    strict = _pairs(cat, SchemaConfig(same_tool="typed_id"))
    assert strict == {("Shop/find", "Shop/stock")}
    assert SchemaDependencyDetector().evidence(cat["Shop/find"], cat["Other/buy"]) == []
    assert SchemaDependencyDetector().evidence(cat["Shop/find"], cat["Shop/buy"]) == ["product_name"]


def test_id_names_and_typed_match() -> None:
    assert all(is_id_name(n) for n in ("token", "user_id", "access_token", "api_key", "order_number", "sku"))
    assert not any(is_id_name(n) for n in ("target", "year", "distance", "idea", "monkey_business"))
    assert typed_match("string", "string") and typed_match("integer", "string") and typed_match("array", "array")
    assert not typed_match(None, "string") and not typed_match("string", None)
    assert not typed_match("boolean", "boolean") and not typed_match("object", "object")
    assert not typed_match("number", "string")


def test_optional_anyof_and_nullable_types_are_read() -> None:
    # FastMCP writes Optional[str] as anyOf [string, null]; OpenAPI 3.1 as type [string, null].
    cat = Catalog(
        [
            ToolSpec(
                "a/make",
                "make",
                "x",
                tool="a",
                returns={
                    "type": "object",
                    "properties": {"job_id": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                },
            ),
            ToolSpec(
                "b/poll",
                "poll",
                "y",
                tool="b",
                parameters={"type": "object", "properties": {"job_id": {"type": ["string", "null"]}}, "required": []},
            ),
        ]
    )
    assert _pairs(cat) == {("a/make", "b/poll")}
