from __future__ import annotations

import numpy as np
import pytest

from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.rerank.hierarchy import multi_tool_rerank, single_tool_rerank
from toolrerank_plugins.rerank.truncation import adaptive_truncate


def test_truncation_keeps_seen_to_m_s_and_unseen_to_m_u(make_scored):
    cands = make_scored([(f"s{i}", "S") if i % 2 else (f"u{i}", "U") for i in range(1, 9)])
    kept, rest = adaptive_truncate(cands, lambda c: c.tool.tool == "S", m_s=2, m_u=6)
    assert [c.id for c in kept] == ["s1", "u2", "u4", "u6"]
    assert [c.id for c in rest] == ["s3", "s5", "s7", "u8"]


def test_truncation_empty_and_bad_limits(make_scored):
    assert adaptive_truncate([], lambda c: True, 1, 2) == ([], [])
    with pytest.raises(ConfigError, match="m_s and m_u"):
        adaptive_truncate(make_scored([("a", "A")]), lambda c: True, 0, 2)


def test_single_tool_prefers_confident_tools_and_keeps_everything(make_scored):
    r = make_scored([("b1", "B"), ("a1", "A"), ("c1", "C"), ("a2", "A"), ("b2", "B")])
    res = single_tool_rerank(r, [0.95, 0.9, 0.5, 0.4, 0.3], tau_s=0.85)
    assert [x.id for x in res.ranking] == ["b1", "a1", "a2", "b2", "c1"]
    assert res.preferred_tools == ["B", "A"]


def test_single_tool_falls_back_to_top_result_tool(make_scored):
    r = make_scored([("a1", "A"), ("b1", "B"), ("a2", "A")])
    res = single_tool_rerank(r, [0.3, 0.2, 0.1], tau_s=0.9)
    assert res.preferred_tools == ["A"]
    assert [x.id for x in res.ranking] == ["a1", "a2", "b1"]


def test_single_tool_extension_adds_and_sorts_by_score(make_scored):
    r = make_scored([("a1", "A"), ("b1", "B")])
    extra = ScoredTool(ToolSpec(id="a9", name="a9", tool="A"), 0.0, 0)
    res = single_tool_rerank(r, [0.9, 0.8], tau_s=0.85, extend=lambda tools: [(extra, 0.95)] if "A" in tools else [])
    assert [x.id for x in res.ranking] == ["a9", "a1", "b1"]
    assert res.added_ids == ["a9"]
    # should_extend vetoes the (seen) tool: nothing added
    res2 = single_tool_rerank(r, [0.9, 0.8], 0.85, extend=lambda t: [(extra, 0.95)], should_extend=lambda k: False)
    assert res2.added_ids == [] and [x.id for x in res2.ranking] == ["a1", "b1"]


def test_single_tool_edge_cases(make_scored):
    assert single_tool_rerank([], [], 0.5).ranking == []
    one = make_scored([("a", None)])
    assert [x.id for x in single_tool_rerank(one, [0.1], 0.5).ranking] == ["a"]
    with pytest.raises(ValueError, match="scores"):
        single_tool_rerank(one, [0.1, 0.2], 0.5)


def test_single_tool_flat_apis_are_their_own_tools(make_scored):
    r = make_scored([("x", None), ("y", None), ("z", None)])
    res = single_tool_rerank(r, [0.5, 0.9, 0.1], tau_s=0.8)
    assert [x.id for x in res.ranking] == ["y", "x", "z"]


def test_multi_tool_takes_n_per_component(make_scored):
    r = make_scored([("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("c1", "C")])
    res = multi_tool_rerank(r, [0.9, 0.8, 0.7, 0.6, 0.5], None, tau_m=0.9, n=1)
    assert [x.id for x in res.ranking] == ["a1", "b1", "c1", "a2", "a3"]
    res2 = multi_tool_rerank(r, [0.9, 0.8, 0.7, 0.6, 0.5], None, tau_m=0.9, n=2)
    assert [x.id for x in res2.ranking] == ["a1", "a2", "b1", "c1", "a3"]


def test_multi_tool_similarity_links_components(make_scored):
    r = make_scored([("a1", "A"), ("b1", "B"), ("c1", "C")])
    emb = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)  # A and B identical -> one component
    res = multi_tool_rerank(r, [0.9, 0.8, 0.7], emb, tau_m=0.5, n=1)
    assert [x.id for x in res.ranking] == ["a1", "c1", "b1"]
    assert len(res.components) == 2
    with pytest.raises(ValueError, match="embeddings"):
        multi_tool_rerank(r, [0.9, 0.8, 0.7], emb[:2], tau_m=0.5, n=1)


def test_multi_tool_edge_cases_and_permutation(make_scored):
    assert multi_tool_rerank([], [], None, 0.8, 2).ranking == []
    r = make_scored([(f"t{i}", f"T{i % 3}") for i in range(12)])
    scores = [1.0] * 12  # all tied: order inside components follows R
    res = multi_tool_rerank(r, scores, None, 0.8, 1)
    assert sorted(x.id for x in res.ranking) == sorted(x.id for x in r)
    assert [x.id for x in res.ranking[:3]] == ["t0", "t1", "t2"]
    with pytest.raises(ValueError, match="n must be"):
        multi_tool_rerank(r, scores, None, 0.8, 0)
