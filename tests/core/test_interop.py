from __future__ import annotations

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.interop import back_to_inputs, function_names, lookup_first, result_metadata
from toolrerank_plugins.llm.base import sampling_options
from toolrerank_plugins.records import ScoredTool, ToolSpec


def test_function_names_are_valid_unique_and_stable() -> None:
    specs = [
        ToolSpec("A/x", "get"),
        ToolSpec("B/y", "get"),
        ToolSpec("C/z", "ok"),
        ToolSpec("D/" + "w" * 80, "bad name"),
    ]
    names = function_names(specs)
    assert names["C/z"] == "ok"
    assert names["A/x"] == "A_x" and names["B/y"] == "B_y"  # duplicate API names fall back to the id
    long = names["D/" + "w" * 80]
    assert len(long) <= 64 and long.startswith("D_www")
    assert len(set(names.values())) == len(specs)
    assert function_names(specs) == names


def test_result_metadata_has_the_fixed_keys() -> None:
    st = ScoredTool(ToolSpec("a/b", "b", tool="a", category="c"), 0.5, 2, {"bm25": 1.0})
    assert result_metadata(st) == {
        "tool_id": "a/b",
        "name": "b",
        "tool": "a",
        "category": "c",
        "score": 0.5,
        "rank": 2,
        "stage_scores": {"bm25": 1.0},
    }


def test_sampling_options_keep_only_what_was_set() -> None:
    assert sampling_options(None, None, None) == {}
    assert sampling_options(0.2, 64, ("END",)) == {"temperature": 0.2, "max_tokens": 64, "stop": ["END"]}
    assert sampling_options(None, None, []) == {"stop": []}


def test_back_to_inputs_rescores_inputs_and_builds_tools_a_stage_brought_in() -> None:
    """The one mapping of the LangChain compressor and the LlamaIndex postprocessor (issue 26: the compressor
    raised KeyError on a tool no input stood for)."""
    a, b, login = ToolSpec("a", "a"), ToolSpec("b", "b"), ToolSpec("login", "login")
    inputs = ["doc a", "doc b", "doc a again"]
    ranked = [ScoredTool(b, 3.0, 1), ScoredTool(login, 2.0, 2), ScoredTool(a, 1.0, 3)]
    out = back_to_inputs(
        inputs, [a, b, a], ranked, lambda doc, st: (doc, st.rank), lambda st: (f"new {st.id}", st.rank)
    )
    assert out == [("doc b", 1), ("new login", 2), ("doc a", 3)]  # a repeated id maps to its first input
    assert back_to_inputs([], [], [], lambda d, st: d, lambda st: st) == []


def test_lookup_first_puts_the_named_tool_in_front_once() -> None:
    catalog = Catalog([ToolSpec("login", "login"), ToolSpec("logout", "logout")])
    found = [ScoredTool(catalog["logout"], 0.9, 1, {"bm25": 0.9})]
    out = lookup_first("login", found, catalog)
    assert [(st.id, st.rank) for st in out] == [("login", 1), ("logout", 2)] and out[0].stage_scores == {"name": 1.0}
    assert lookup_first("logout", found, catalog) == found
    assert lookup_first(None, found, catalog) == found == lookup_first("nope", found, catalog)
