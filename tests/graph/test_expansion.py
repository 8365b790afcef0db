from __future__ import annotations

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.expansion import ExpansionConfig, expand_prerequisites
from toolrerank_plugins.graph.tool_graph import ToolGraph
from toolrerank_plugins.records import Edge, ScoredTool, ToolSpec, renumber

IDS = ("delete", "other1", "other2", "token", "validate", "x")


def _setup(edges: list[Edge]) -> tuple[Catalog, ToolGraph]:
    cat = Catalog([ToolSpec(i, i, i) for i in IDS])
    g = ToolGraph.empty(cat)
    g.add_edges(edges)
    return cat, g


def _ranking(cat: Catalog, ids: list[str]) -> list[ScoredTool]:
    return renumber([ScoredTool(cat[i], 1.0 - 0.1 * n, 0, {"dense": 1.0 - 0.1 * n}) for n, i in enumerate(ids)])


def _ids(items: list[ScoredTool]) -> list[str]:
    return [s.id for s in items]


def test_prerequisite_inserted_right_after_dependent_primary_stays_first() -> None:
    cat, g = _setup([Edge("token", "delete")])
    out, ins = expand_prerequisites(
        _ranking(cat, ["delete", "other1", "other2"]), g, cat, ExpansionConfig(enabled=True)
    )
    assert _ids(out) == ["delete", "token", "other1", "other2"]
    assert ins == [
        {
            "id": "token",
            "prerequisite_of": "delete",
            "from_rank": None,
            "to_rank": 2,
            "origin": "labelled",
            "weight": 1.0,
        }
    ]
    # between its neighbours: scores stay non-increasing and the prerequisite does not tie the result it serves
    assert out[0].score > out[1].score > out[2].score
    assert out[1].score == (out[0].score + out[2].score) / 2 and out[1].stage_scores["tgr"] == out[1].score


def test_lower_ranked_prerequisite_moves_up_and_higher_one_stays() -> None:
    cat, g = _setup([Edge("token", "delete"), Edge("other1", "other2")])
    out, ins = expand_prerequisites(
        _ranking(cat, ["delete", "other1", "other2", "token"]), g, cat, ExpansionConfig(enabled=True)
    )
    assert _ids(out) == ["delete", "token", "other1", "other2"]
    assert [i["from_rank"] for i in ins] == [4]


def test_limits_weight_origin_and_disabled() -> None:
    cat, g = _setup([Edge("token", "delete", weight=0.4), Edge("validate", "other1"), Edge("x", "other2")])
    base = _ranking(cat, ["delete", "other1", "other2"])
    assert _ids(expand_prerequisites(base, g, cat, ExpansionConfig())[0]) == _ids(base)  # disabled by default
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, max_inserted=1))
    assert _ids(out) == ["delete", "other1", "validate", "other2"]  # weight 0.4 < 0.5 skipped; cap 1
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, origins=["declared"]))
    assert _ids(out) == _ids(base)
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, window=1, min_weight=0.3))
    assert _ids(out) == ["delete", "token", "other1", "other2"]


def test_cycle_does_not_loop() -> None:
    cat, g = _setup([Edge("delete", "token"), Edge("token", "delete")])
    out, _ = expand_prerequisites(
        _ranking(cat, ["delete", "other1"]), g, cat, ExpansionConfig(enabled=True, max_inserted=5)
    )
    assert _ids(out) == ["delete", "token", "other1"]


# -- closure mode ----------------------------------------------------------------------------------
CHAIN = ("report", "account", "token", "login", "validate", "noise1", "noise2", "noise3", "noise4", "noise5")


def _chain(extra: list[Edge] | None = None) -> tuple[Catalog, ToolGraph]:
    """report <- account <- token <- login <- validate (declared chain: each needs the next one)."""
    cat = Catalog([ToolSpec(i, i, i) for i in CHAIN])
    g = ToolGraph.empty(cat)
    chain = [Edge("account", "report"), Edge("token", "account"), Edge("login", "token"), Edge("validate", "login")]
    g.add_edges(chain, origin="declared")
    g.add_edges(extra or [])
    return cat, g


def _closure(**kw: object) -> ExpansionConfig:
    """A closure expansion with a generous budget (the defaults are small: see test_mode_defaults...)."""
    budget: dict[str, object] = {"max_inserted": 6, "max_per_result": 6, "max_depth": 4, "overflow": 0}
    return ExpansionConfig(enabled=True, mode="closure", **{**budget, **kw})  # type: ignore[arg-type]


def test_closure_inserts_transitive_prerequisites_nearest_first() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["report", "noise1", "noise2"])
    direct, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, max_inserted=5))
    assert _ids(direct) == ["report", "account", "noise1", "noise2"]  # the old mode stops at depth 1
    out, ins = expand_prerequisites(base, g, cat, _closure())
    assert _ids(out) == ["report", "account", "token", "login", "validate", "noise1", "noise2"]
    assert [(i["id"], i["prerequisite_of"], i["for"], i["depth"]) for i in ins] == [
        ("account", "report", "report", 1),
        ("token", "account", "report", 2),
        ("login", "token", "report", 3),
        ("validate", "login", "report", 4),
    ]
    scores = [s.score for s in out]
    assert scores == sorted(scores, reverse=True)  # non-increasing


def test_closure_budget_depth_and_count() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["report", "noise1"])
    assert _ids(expand_prerequisites(base, g, cat, _closure(max_depth=2))[0]) == [
        "report",
        "account",
        "token",
        "noise1",
    ]
    assert _ids(expand_prerequisites(base, g, cat, _closure(max_inserted=1))[0]) == ["report", "account", "noise1"]
    assert _ids(expand_prerequisites(base, g, cat, _closure(max_per_result=3))[0])[:4] == [
        "report",
        "account",
        "token",
        "login",
    ]
    assert _ids(expand_prerequisites(base, g, cat, _closure(max_inserted=0))[0]) == _ids(base)


def test_closure_positions() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["noise1", "report", "noise2", "noise3", "token"])
    after, _ = expand_prerequisites(base, g, cat, _closure(max_depth=2))
    assert _ids(after) == ["noise1", "report", "account", "token", "noise2", "noise3"]  # token moved up
    before, ins = expand_prerequisites(base, g, cat, _closure(max_depth=2, position="before"))
    assert _ids(before) == ["noise1", "token", "account", "report", "noise2", "noise3"]  # call order
    assert [i["from_rank"] for i in ins] == [5, None]
    window, _ = expand_prerequisites(base, g, cat, _closure(max_depth=2, position="after_window", window=3))
    assert _ids(window) == ["noise1", "report", "noise2", "account", "token", "noise3"]  # the top 3 keep their ranks


def test_closure_skips_prerequisites_already_above() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["token", "report", "noise1"])
    out, ins = expand_prerequisites(base, g, cat, _closure(max_depth=2))
    # token ranks above report: not moved; report still pulls in account; token is a dependent too (login)
    assert _ids(out) == ["token", "login", "validate", "report", "account", "noise1"]
    assert [i["for"] for i in ins] == ["token", "token", "report"]


def test_closure_trusts_declared_edges_more_than_inferred_ones() -> None:
    inferred = [
        Edge("noise1", "report", origin="schema", weight=1.0),  # typed id evidence: a direct prerequisite
        Edge("noise2", "report", origin="schema", weight=0.5),  # a bare name match: below inferred_min_weight
        Edge("noise3", "noise1", origin="schema", weight=1.0),  # prerequisite of an inferred one: not chased
        Edge("noise4", "account", origin="discriminator", weight=0.9),  # inferred, not direct of a result
    ]
    cat, g = _chain(inferred)
    base = _ranking(cat, ["report", "noise5"])
    out, ins = expand_prerequisites(base, g, cat, _closure(max_inserted=10))
    got = {i["id"]: (i["origin"], i["depth"]) for i in ins}
    assert got == {
        "account": ("declared", 1),
        "noise1": ("schema", 1),
        "token": ("declared", 2),
        "login": ("declared", 3),
        "validate": ("declared", 4),
    }
    loose = expand_prerequisites(base, g, cat, _closure(max_inserted=10, inferred_min_weight=0.5))[1]
    assert "noise2" in {i["id"] for i in loose} and "noise3" not in {i["id"] for i in loose}
    trusting = expand_prerequisites(base, g, cat, _closure(max_inserted=10, trusted_origins=["declared", "schema"]))[1]
    assert "noise3" in {i["id"] for i in trusting}  # a trusted origin is chased transitively
    only_declared = expand_prerequisites(base, g, cat, _closure(max_inserted=10, origins=["declared"]))[1]
    assert {i["origin"] for i in only_declared} == {"declared"}


def test_closure_cycle_ends() -> None:
    cat = Catalog([ToolSpec(i, i, i) for i in ("a", "b", "c", "x")])
    g = ToolGraph.empty(cat)
    g.add_edges([Edge("b", "a"), Edge("c", "b"), Edge("a", "c")], origin="declared")
    out, ins = expand_prerequisites(_ranking(cat, ["a", "x"]), g, cat, _closure(max_inserted=10, max_depth=10))
    assert _ids(out) == ["a", "b", "c", "x"]
    assert len(ins) == 2


def test_mode_defaults_for_the_budget() -> None:
    direct, closure = ExpansionConfig(), ExpansionConfig(mode="closure")
    assert (direct.insert_budget, direct.per_result_budget, direct.overflow_budget) == (2, 1, 0)
    assert (closure.insert_budget, closure.per_result_budget, closure.overflow_budget, closure.max_depth) == (
        2,
        1,
        3,
        2,
    )
    assert ExpansionConfig(mode="closure", max_inserted=3, overflow=0).insert_budget == 3
    assert ExpansionConfig(mode="direct", overflow=5).overflow_budget == 0  # direct has no overflow


def test_closure_defaults_keep_the_top_and_fill_the_chain_below() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["report", "noise1", "noise2", "noise3", "noise4", "noise5"])
    out, ins = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, mode="closure"))
    # one prerequisite in the top (account), the next two hops after rank 5 (depth 2: login is 3 hops away)
    assert _ids(out)[:7] == ["report", "account", "noise1", "noise2", "noise3", "token", "noise4"]
    assert [(i["id"], i["depth"], i.get("overflow", False)) for i in ins] == [("account", 1, False), ("token", 2, True)]


def test_closure_position_by_score() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["report", "noise1", "noise2", "noise3", "token"])  # scores 1.0, 0.9, 0.8, 0.7, 0.6
    out, ins = expand_prerequisites(base, g, cat, _closure(max_depth=2, position="score", score_factor=0.85))
    # account: 0.85 x report's score; token (depth 2): 0.85^2 = 0.7225, above its own 0.6
    assert _ids(out) == ["report", "noise1", "account", "noise2", "token", "noise3"]
    assert [round(s.score, 4) for s in out] == [1.0, 0.9, 0.85, 0.8, 0.7225, 0.7]
    assert [(i["id"], i["from_rank"], i["to_rank"]) for i in ins] == [("account", None, 3), ("token", 6, 5)]
    high = _ranking(cat, ["report", "token", "noise1"])  # token already scores 0.9 > 0.7225: left alone
    assert [
        i["id"] for i in expand_prerequisites(high, g, cat, _closure(max_depth=2, position="score", window=1))[1]
    ] == ["account"]


def test_closure_keeps_one_producer_per_input() -> None:
    """Two ways to get the token the dependent takes: with alternatives="one" only the better ranked one."""
    from .conftest import _params, _returns

    specs = [
        ToolSpec("delete", "delete", "delete", parameters=_params("token", "item_id")),
        ToolSpec("login", "login", "login", parameters=_params("user"), returns=_returns("token")),
        ToolSpec("refresh", "refresh", "refresh", parameters=_params("old"), returns=_returns("token")),
        ToolSpec("find", "find", "find", parameters=_params("q"), returns=_returns("item_id")),
        ToolSpec("noise", "noise", "noise"),
    ]
    cat = Catalog(specs)
    g = ToolGraph.empty(cat)
    g.add_edges([Edge("login", "delete"), Edge("refresh", "delete"), Edge("find", "delete")], origin="declared")
    base = _ranking(cat, ["delete", "noise", "refresh"])
    every = expand_prerequisites(base, g, cat, _closure())[0]
    assert _ids(every) == ["delete", "find", "login", "refresh", "noise"]  # graph order: by id
    one = expand_prerequisites(base, g, cat, _closure(alternatives="one", rank_by="retrieval"))[0]
    assert _ids(one) == ["delete", "refresh", "find", "noise"]  # refresh was retrieved: it feeds the token
    by_graph = expand_prerequisites(base, g, cat, _closure(alternatives="one"))[0]
    assert _ids(by_graph) == ["delete", "find", "login", "noise", "refresh"]


def test_closure_overflow_goes_below_the_top() -> None:
    cat, g = _chain()
    base = _ranking(cat, ["report", "noise1", "noise2", "noise3", "noise4", "login"])
    out, ins = expand_prerequisites(base, g, cat, _closure(max_inserted=1, overflow=3, overflow_after=4))
    # account fits the budget (right after report); token, login (moved up from 7th) and validate go after the 4th
    assert _ids(out) == ["report", "account", "noise1", "noise2", "token", "login", "validate", "noise3", "noise4"]
    assert [(i["id"], i.get("overflow", False)) for i in ins] == [
        ("account", False),
        ("token", True),
        ("login", True),
        ("validate", True),
    ]
    scores = [s.score for s in out]
    assert scores == sorted(scores, reverse=True)
    assert _ids(expand_prerequisites(base, g, cat, _closure(max_inserted=1))[0])[:3] == ["report", "account", "noise1"]
    high = _ranking(cat, ["report", "login", "noise1", "noise2", "noise3"])  # login already above the point
    out, ins = expand_prerequisites(high, g, cat, _closure(max_inserted=1, overflow=3, overflow_after=4))
    assert _ids(out)[:2] == ["report", "account"] and "login" not in {i["id"] for i in ins}
