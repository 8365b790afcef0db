"""The zero-training parts of the default pipeline: identifier-aware BM25, score fusion, multi-intent
retrieval and tool-level evidence (issue 15)."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.pipelines import DEFAULT_PIPELINE_NAME, pipeline_config
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber
from toolrerank_plugins.rerank.intents import split_requests
from toolrerank_plugins.rerank.tool_evidence import ToolEvidenceConfig, ToolEvidenceStage
from toolrerank_plugins.retrieval.base import Hit
from toolrerank_plugins.retrieval.bm25 import BM25Config, BM25Retriever, split_identifier, tokenize
from toolrerank_plugins.retrieval.hybrid import agreement_fuse, rrf_fuse, score_fuse, shared_top
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

# -- identifier-aware BM25 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "words"),
    [
        ("analyzeEvidence", ["analyze", "evidence"]),
        ("evidence_type", ["evidence", "type"]),
        ("get-weather-forecast", ["get", "weather", "forecast"]),
        ("getWeatherForecast", ["get", "weather", "forecast"]),
        ("HTTPServer2", ["http", "server", "2"]),
        ("v2Users", ["v", "2", "users"]),
        ("plain", ["plain"]),
    ],
)
def test_split_identifier(identifier: str, words: list[str]) -> None:
    assert split_identifier(identifier) == words


def test_tokenize_keeps_the_whole_identifier_and_drops_stopwords() -> None:
    assert tokenize("the analyzeEvidence tool", identifiers=True) == ["analyzeevidence", "analyze", "evidence", "tool"]
    assert tokenize("the analyzeEvidence tool", identifiers=False) == ["analyzeevidence", "tool"]


def test_stemming_keeps_each_word_and_adds_its_stem() -> None:
    assert tokenize("forecasts", stemmer="english") == ["forecasts", "forecast"]
    assert tokenize("weather", stemmer="english") == ["weather"]  # a word that is its own stem appears once


def _flat(*specs: tuple[str, str]) -> Catalog:
    return Catalog([ToolSpec(id=i, name=i, description=d) for i, d in specs])


def test_identifier_tokenizer_matches_words_inside_api_names() -> None:
    cat = _flat(
        ("analyzeEvidence", "Run the lab procedure on a sample"),
        ("collect_sample", "Collect a sample at a crime scene"),
        ("getWeatherForecast", "Outlook for a city"),
    )
    texts = [f"{s.name}: {s.description}" for s in cat]
    plain = BM25Retriever(BM25Config(tokenizer="plain", stemmer=None))
    ident = BM25Retriever(BM25Config(tokenizer="identifiers", stemmer=None))
    plain.index(cat.ids, texts)
    ident.index(cat.ids, texts)
    query = ["analyze the evidence", "weather forecast"]
    assert [h.id for h in ident.search(query, 1)[0]] == ["analyzeEvidence"]
    assert [h.id for h in ident.search(query, 1)[1]] == ["getWeatherForecast"]
    assert plain.search(query, 3) == [[], []]  # plain tokens: "analyzeevidence" shares no term with the query


def test_stemmed_bm25_matches_word_variants_and_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cat = _flat(("a", "Forecasts the weather"), ("b", "Sends emails"))
    config = EngineConfig(retriever="bm25", bm25={"tokenizer": "identifiers", "stemmer": "english"})
    engine = Engine.build(cat, config)
    assert engine.search("forecast", top_k=1)[0].id == "a"
    engine.save(tmp_path / "e")
    again = Engine.load(tmp_path / "e")
    assert again.config.bm25.stemmer == "english"
    assert [h.id for h in again.search("sending an email", top_k=1)] == ["b"]


# -- score fusion ---------------------------------------------------------------------------------


def test_score_fuse_normalises_each_ranking() -> None:
    dense = [Hit("x", 0.90), Hit("y", 0.85), Hit("z", 0.10)]
    bm25 = [Hit("z", 30.0), Hit("x", 1.0)]
    # min-max: x = (1 + 0)/2, y = (0.94 + 0)/2 (missing from bm25: its lowest), z = (0 + 1)/2
    assert [h.id for h in score_fuse([(dense, 1.0), (bm25, 1.0)], normalization="minmax", top_k=3)] == ["x", "z", "y"]
    # the weights decide between two rankings that disagree
    assert score_fuse([(dense, 3.0), (bm25, 1.0)], normalization="zscore", top_k=1)[0].id == "x"
    assert score_fuse([(dense, 1.0), (bm25, 3.0)], normalization="zscore", top_k=1)[0].id == "z"
    # a zero weight or an empty ranking takes no part
    assert [h.id for h in score_fuse([(dense, 1.0), (bm25, 0.0)], normalization="zscore", top_k=3)] == ["x", "y", "z"]
    assert [h.id for h in score_fuse([([], 1.0), (bm25, 1.0)], normalization="minmax", top_k=3)] == ["z", "x"]


_hits = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.floats(-1e6, 1e6, allow_nan=False)), max_size=8, unique_by=lambda t: t[0]
).map(lambda rows: [Hit(i, s) for i, s in rows])


@pytest.mark.fuzz
@FUZZ
@given(a=_hits, b=_hits, wa=st.floats(0, 5), wb=st.floats(0, 5), how=st.sampled_from(["minmax", "zscore"]))
def test_score_fuse_properties(a: list[Hit], b: list[Hit], wa: float, wb: float, how: str) -> None:
    fused = score_fuse([(a, wa), (b, wb)], normalization=how, top_k=20)  # type: ignore[arg-type]
    taking_part = [h for hits, w in ((a, wa), (b, wb)) if w > 0 for h in hits]
    assert sorted(h.id for h in fused) == sorted({h.id for h in taking_part})
    assert all(math.isfinite(h.score) for h in fused)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


def _reference_rrf(rankings: list[tuple[list[Hit], float]], rrf_k: int, top_k: int) -> list[Hit]:
    """Reciprocal-rank fusion as documented, written plainly (the library's is a faster equivalent)."""
    scores: dict[str, float] = {}
    for hits, weight in rankings:
        if weight == 0:
            continue
        for rank, hit in enumerate(hits, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + weight / (rrf_k + rank)
    return [Hit(t, s) for t, s in sorted(scores.items(), key=lambda kv: -kv[1])[:top_k]]


def _reference_zscore(rankings: list[tuple[list[Hit], float]], confidence_weighted: bool) -> list[Hit]:
    normalised, order = [], {}
    for hits, weight in rankings:
        if not hits or weight <= 0:
            continue
        values = [h.score for h in hits]
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        norm = [(v - mean) / sd if sd > 0 else 0.0 for v in values]
        normalised.append(({h.id: n for h, n in zip(hits, norm)}, min(norm), weight))
        order.update(dict.fromkeys(h.id for h in hits))
    if confidence_weighted and all(max(m.values()) > 0 for m, _, _ in normalised):
        normalised = [(m, floor, w * max(m.values())) for m, floor, w in normalised]
    total = sum(w for _, _, w in normalised)
    scores = {t: sum(w / total * m.get(t, floor) for m, floor, w in normalised) for t in order}
    return [Hit(t, s) for t, s in sorted(scores.items(), key=lambda kv: -kv[1])]


_tied_hits = st.lists(
    st.builds(Hit, st.sampled_from("abcdefghij"), st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0, 3.25])), max_size=12
)


@pytest.mark.fuzz
@FUZZ
@given(
    rankings=st.lists(st.tuples(_tied_hits, st.sampled_from([0.0, 0.5, 1.0, 2.0])), max_size=3),
    top_k=st.integers(1, 12),
    shared=st.integers(0, 4),
    weight=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_fusions_equal_their_plain_definitions(
    rankings: list[tuple[list[Hit], float]], top_k: int, shared: int, weight: float
) -> None:
    """The same ids, order and scores (ties, repeated ids and zero weights included) as the fusions written out
    as documented: the faster code changes no ranking."""
    assert rrf_fuse(rankings, rrf_k=5, top_k=top_k) == _reference_rrf(rankings, 5, top_k)
    by_score = _reference_zscore(rankings, True)
    expected = [h.id for h in by_score[:top_k]]
    got = score_fuse(rankings, normalization="zscore", top_k=top_k, confidence_weighted=True)
    assert [h.id for h in got] == expected
    fused = agreement_fuse(rankings, rrf_k=5, top_k=top_k, depth=3, min_shared=shared, rrf_weight=weight)
    if shared_top(rankings, 3) >= shared:
        assert fused == _reference_rrf(rankings, 5, top_k)
    else:
        assert fused == _reference_rrf([(by_score, 1.0), (_reference_rrf(rankings, 5, 10**6), weight)], 1, top_k)


def test_agreement_fusion_is_rrf_where_the_tops_agree_and_leans_on_the_confident_ranking_where_not() -> None:
    dense = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.7), Hit("d", 0.2), Hit("e", 0.1)]
    agreeing = [Hit("c", 9.0), Hit("a", 5.0), Hit("x", 4.9), Hit("y", 4.8), Hit("z", 4.7)]
    rankings = [(dense, 1.0), (agreeing, 1.0)]
    assert shared_top(rankings, 3) == 2
    assert agreement_fuse(rankings, rrf_k=5, top_k=10, depth=3, min_shared=2) == rrf_fuse(rankings, rrf_k=5, top_k=10)
    assert agreement_fuse(rankings, rrf_k=5, top_k=10, depth=3) == rrf_fuse(rankings, rrf_k=5, top_k=10)  # default 2
    assert agreement_fuse(rankings, rrf_k=5, top_k=10, depth=3, min_shared=3) != rrf_fuse(rankings, rrf_k=5, top_k=10)
    # bm25 shares nothing with dense's top 3 and one hit stands far out: the z-score ranking leads ...
    peaked = [Hit("p", 50.0)] + [Hit(f"q{i}", 1.0) for i in range(9)]
    rankings = [(dense, 1.0), (peaked, 1.0)]
    assert shared_top(rankings, 3) == 0
    fused = agreement_fuse(rankings, rrf_k=5, top_k=20, depth=3)
    by_score = score_fuse(rankings, normalization="zscore", top_k=1, confidence_weighted=True)
    assert fused[0].id == by_score[0].id == "p"
    assert fused != rrf_fuse(rankings, rrf_k=5, top_k=20)
    # ... and every id either ranking holds stays in the fused ranking
    assert sorted(h.id for h in fused) == sorted({h.id for h in dense + peaked})
    # min_shared 0: always reciprocal-rank fusion
    assert agreement_fuse(rankings, rrf_k=5, top_k=20, min_shared=0) == rrf_fuse(rankings, rrf_k=5, top_k=20)


@pytest.mark.fuzz
@FUZZ
@given(a=_hits, b=_hits, wa=st.floats(0, 5), wb=st.floats(0, 5), depth=st.integers(1, 8), shared=st.integers(0, 8))
def test_agreement_fuse_properties(a: list[Hit], b: list[Hit], wa: float, wb: float, depth: int, shared: int) -> None:
    fused = agreement_fuse([(a, wa), (b, wb)], rrf_k=5, top_k=20, depth=depth, min_shared=shared)
    taking_part = [h for hits, w in ((a, wa), (b, wb)) if w > 0 for h in hits]
    assert sorted(h.id for h in fused) == sorted({h.id for h in taking_part})
    assert all(math.isfinite(h.score) for h in fused)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


def test_hybrid_score_fusion_through_the_engine() -> None:
    cat = tiny_catalog()
    for fusion in ("rrf", "minmax", "zscore", "agreement"):
        config = EngineConfig(retriever="hybrid", hybrid={"fusion": fusion}, auto_tune=[])
        engine = Engine.build(cat, config, embedder=FakeEmbedder())
        top = engine.search("send an email message", top_k=3)
        assert "Mail/PostBox/send_email" in [h.id for h in top], fusion
        assert any({"dense", "bm25"} <= set(h.stage_scores) for h in top), fusion
        assert engine.config.hybrid.fusion == fusion


# -- multi-intent ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "requests"),
    [
        (
            "Find a hotel in Rome. Also, what's the weather there tomorrow?",
            ["Find a hotel in Rome", "what's the weather there tomorrow?"],
        ),
        ("find me a hotel in Rome and the weather there", ["find me a hotel in Rome", "the weather there"]),
        ("weather in Rome", ["weather in Rome"]),
        # a long sentence is not cut at "and": there it joins the items of one request
        (
            "Can you provide me with information about the clubs, managers, teammates and referees of a player?",
            ["Can you provide me with information about the clubs, managers, teammates and referees of a player?"],
        ),
        ("ok", ["ok"]),
    ],
)
def test_split_requests(message: str, requests: list[str]) -> None:
    assert split_requests(message) == requests


@pytest.mark.parametrize(
    ("message", "requests"),
    [
        # a long piece: "and" before a verb that starts another action splits it
        (
            "I want to know the current stock price of Microsoft and convert it to Indian Rupees.",
            ["I want to know the current stock price of Microsoft", "convert it to Indian Rupees"],
        ),
        (
            "Encrypt the random joke with the key secret, search for Italian restaurants in New York, and calculate"
            " the profit from a transaction",
            [
                "Encrypt the random joke with the key secret, search for Italian restaurants in New York",
                "calculate the profit from a transaction",
            ],
        ),
        # a verb that asks for the same request's output does not
        (
            "Please retrieve information about space missions to Mars and provide me with the mission name and year",
            ["Please retrieve information about space missions to Mars and provide me with the mission name and year"],
        ),
        # "and" before a noun does not
        (
            "Can you provide me with information about the clubs, managers, teammates and referees of a player?",
            ["Can you provide me with information about the clubs, managers, teammates and referees of a player?"],
        ),
        # only "and" cuts, not another word before a verb
        (
            "Tell me how many people clicked the send button on the new newsletter this week",
            ["Tell me how many people clicked the send button on the new newsletter this week"],
        ),
        # every part must keep min_words words
        (
            "Look at the long list of all the open invoices of this month and send it",
            ["Look at the long list of all the open invoices of this month and send it"],
        ),
    ],
)
def test_split_requests_at_and_before_an_action_verb(message: str, requests: list[str]) -> None:
    assert split_requests(message, and_verbs=True) == requests
    assert len(split_requests(message)) == 1  # the function's own default keeps the old behaviour


_sentences = st.lists(
    st.sampled_from(["find", "and", "And", "convert", "provide", "the", "price", ",", "hotel", "x", "y"]),
    min_size=10,
    max_size=40,
).map(" ".join)


@FUZZ
@given(
    text=st.one_of(_sentences, _sentences.map(lambda t: t.replace(" ,", ",")), st.text(max_size=120)),
    lines=st.sampled_from(["all", "asking"]),
    rule=st.sampled_from([({}, {"and_verbs": True}), ({"and_verbs": True}, {"comma_verbs": True})]),
)
# a comma cut that would leave a part too short must not undo the cut at "and" (found by this test)
@example(
    text="find find find find find find find find , find and find find find",
    lines="all",
    rule=({"and_verbs": True}, {"comma_verbs": True}),
)
def test_and_verbs_and_comma_verbs_only_cut_pieces(
    text: str, lines: str, rule: tuple[dict[str, bool], dict[str, bool]]
) -> None:
    """Each rule (and_verbs; comma_verbs on top of it) only cuts pieces: at "and" (dropped) or at a comma."""
    kw = {"max_requests": 1000, "lines": lines, **rule[0]}
    before = split_requests(text, **kw)  # type: ignore[arg-type]
    after = split_requests(text, **rule[1], **kw)  # type: ignore[arg-type]
    assert after and all(isinstance(p, str) for p in after) and len(after) >= len(before)
    words = [w for p in before for w in re.findall(r"\w+", p)]
    kept = [w for p in after for w in re.findall(r"\w+", p)]
    it = iter(words)
    assert all(any(w == v for v in it) for w in kept)  # the words after are those before, in order, ...
    dropped = [w.lower() for w in (Counter(words) - Counter(kept)).elements()]
    assert dropped == ["and"] * len(dropped)  # ... less some "and"s


@pytest.mark.parametrize(
    ("message", "requests"),
    [
        (
            "Calculate the discount amount of an item with an original price of $100 and a discount of 20%, "
            "calculate the square of the discount amount, and create an invoice for it",
            [
                "Calculate the discount amount of an item with an original price of $100 and a discount of 20%",
                "calculate the square of the discount amount",
                "create an invoice for it",
            ],
        ),
        # a comma before a word that is no action verb, or before an output verb, does not cut
        (
            "Retrieve the demographics of the users of the library who are male, have a college education, "
            "and provide the totals",
            [
                "Retrieve the demographics of the users of the library who are male, have a college education, "
                "and provide the totals"
            ],
        ),
        # a short piece (at most and_max_words words) is cut by the plain "and" rule alone, never at a comma
        ("Get the weather, book a hotel", ["Get the weather, book a hotel"]),
        # every part must keep min_words words
        (
            "Look at the long list of all the open invoices of this month, send it",
            ["Look at the long list of all the open invoices of this month, send it"],
        ),
    ],
)
def test_split_requests_at_a_comma_before_an_action_verb(message: str, requests: list[str]) -> None:
    assert split_requests(message, and_verbs=True, comma_verbs=True) == requests
    assert split_requests(message, comma_verbs=True) == split_requests(message)  # it needs and_verbs


def test_comma_verbs_is_an_option_of_the_stage() -> None:
    message = (
        "Calculate the discount amount of an item with an original price of $100 and a discount of 20%, "
        "calculate the square of the discount amount"
    )
    off = _engine([{"type": "multi_intent"}]).search_detailed(message, top_k=3).trace["multi_intent"]["requests"]
    on = _engine([{"type": "multi_intent", "params": {"comma_verbs": True}}])
    assert off == [message]
    assert on.search_detailed(message, top_k=3).trace["multi_intent"]["requests"] == [
        "Calculate the discount amount of an item with an original price of $100 and a discount of 20%",
        "calculate the square of the discount amount",
    ]


def test_the_default_multi_intent_splits_at_and_before_an_action_verb() -> None:
    engine = _engine([{"type": "multi_intent"}])
    message = "I want to know the current stock price of Microsoft and convert it to Indian Rupees"
    requests = engine.search_detailed(message, top_k=3).trace["multi_intent"]["requests"]
    assert requests == ["I want to know the current stock price of Microsoft", "convert it to Indian Rupees"]
    off = _engine([{"type": "multi_intent", "params": {"and_verbs": False}}])
    assert off.search_detailed(message, top_k=3).trace["multi_intent"]["requests"] == [message]


def _engine(stages: list[dict[str, object]]) -> Engine:
    return Engine.build(tiny_catalog(), pipeline_config("bm25", stages=stages))


def test_multi_intent_surfaces_each_request() -> None:
    query = "Send the email message to a recipient about the email. Additionally, tell me the weather"
    plain = [h.id for h in _engine([]).search(query, top_k=3)]
    both = _engine([{"type": "multi_intent"}]).search_detailed(query, top_k=3)
    assert not any(t.startswith("Weather/") for t in plain)  # one bag of words favours the e-mail request
    ids = [h.id for h in both.results]
    assert ids[0] == "Mail/PostBox/send_email" and any(t.startswith("Weather/") for t in ids[:2])
    assert both.trace["multi_intent"]["requests"] == [
        "Send the email message to a recipient about the email",
        "tell me the weather",
    ]


def test_multi_intent_leaves_a_single_request_as_ranked() -> None:
    query = "send an email message to a recipient"
    plain = _engine([]).search(query, top_k=5)
    staged = _engine([{"type": "multi_intent"}]).search(query, top_k=5)
    assert [(h.id, h.score) for h in staged] == [(h.id, h.score) for h in plain]


# -- tool-level evidence --------------------------------------------------------------------------


def test_tool_evidence_lifts_the_apis_of_a_strongly_matched_tool() -> None:
    query = "weather forecast and current conditions in a city"
    plain = [h.id for h in _engine([]).search(query, top_k=4)]
    lifted = _engine([{"type": "tool_evidence", "params": {"weight": 1.0}}]).search_detailed(query, top_k=4)
    ids = [h.id for h in lifted.results]
    assert set(ids[:2]) == {"Weather/SkyCast/forecast", "Weather/SkyCast/current"}
    assert ids != plain or plain[:2] == ids[:2]
    assert next(iter(lifted.trace["tool_evidence"]["tools"])) == "Weather/SkyCast"


def _scored(*specs: tuple[str, str | None]) -> list[ScoredTool]:
    return renumber([ScoredTool(ToolSpec(id=i, name=i, tool=t), 1.0 / r, 0) for r, (i, t) in enumerate(specs, 1)])


def test_tool_evidence_gives_a_lone_api_of_a_named_tool_no_edge_over_an_api_without_a_tool() -> None:
    # NESTFUL-like catalog: stand-alone functions (no tool) beside services. A service with one leading
    # candidate is no stronger evidence than a stand-alone function: the order must stay.
    ranked = _scored(("calc_a", None), ("calc_b", None), ("svc/x", "svc"), ("calc_c", None))
    out = ToolEvidenceStage().run("q", ranked, None, {})  # type: ignore[arg-type]
    assert [s.id for s in out] == ["calc_a", "calc_b", "svc/x", "calc_c"]


def test_tool_evidence_still_lifts_a_tool_with_several_leading_apis_among_stand_alone_functions() -> None:
    ranked = _scored(("calc_a", None), ("svc/x", "svc"), ("calc_b", None), ("svc/y", "svc"))
    out = ToolEvidenceStage(ToolEvidenceConfig(weight=1.0)).run("q", ranked, None, {})  # type: ignore[arg-type]
    assert [s.id for s in out] == ["calc_a", "svc/x", "svc/y", "calc_b"]


def test_tool_evidence_leaves_a_flat_catalog_as_ranked() -> None:
    cat = _flat(("a", "weather forecast"), ("b", "weather now"), ("c", "email"))
    plain = Engine.build(cat, EngineConfig(retriever="bm25")).search("weather forecast", top_k=3)
    staged = Engine.build(cat, EngineConfig(retriever="bm25", stages=[{"type": "tool_evidence"}])).search(
        "weather forecast", top_k=3
    )
    assert [h.id for h in staged] == [h.id for h in plain]


# -- the default pipeline -------------------------------------------------------------------------


def test_the_default_pipeline_is_registered_and_needs_no_training_or_llm() -> None:
    config = pipeline_config(DEFAULT_PIPELINE_NAME)
    assert config.retriever == "hybrid"
    assert not {s.type for s in config.stages} & {"toolrerank", "query_generation", "qta_rewrite", "iterative_feedback"}
    engine = Engine.build(tiny_catalog(), config, embedder=FakeEmbedder())
    assert engine.search("log in with my password", top_k=3)


def test_confidence_weights_follow_the_ranking_whose_top_hit_stands_out() -> None:
    peaked = [Hit("p", 10.0)] + [Hit(f"q{i}", 1.0) for i in range(9)]  # top z = 3
    flat = [Hit("f", 1.2)] + [Hit(f"q{i}", 1.0 + 0.001 * i) for i in range(9)]  # top z ~ 2.9
    flatter = [Hit("f", 1.01)] + [Hit(f"q{i}", 1.0) for i in range(4)] + [Hit(f"r{i}", 0.99) for i in range(5)]
    assert (
        score_fuse([(peaked, 1.0), (flatter, 1.0)], normalization="zscore", top_k=1, confidence_weighted=True)[0].id
        == "p"
    )
    # without confidence weights both rankings count the same, and the shared ids can win
    plain = score_fuse([(peaked, 1.0), (flat, 1.0)], normalization="zscore", top_k=10)
    weighted = score_fuse([(peaked, 1.0), (flat, 1.0)], normalization="zscore", top_k=10, confidence_weighted=True)
    assert {h.id for h in plain} == {h.id for h in weighted}


def test_an_unknown_stemmer_is_a_config_error_naming_it() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown stemmer 'klingon'"):
        EngineConfig(retriever="bm25", bm25={"stemmer": "klingon"})


def test_dialogue_answer_lines_are_not_requests() -> None:
    dialogue = (
        "Can you cancel my appointment ID 90123456?\nOlivia Davis, October 10th, Dr. Smith.\nYes, that's correct."
    )
    assert split_requests(dialogue, lines="asking") == ["Can you cancel my appointment ID 90123456?"]
    assert len(split_requests(dialogue, lines="all")) == 3  # the old behaviour: every line a request


def test_later_lines_that_ask_for_something_stay_requests() -> None:
    text = "Book a table for two tonight\nMy name is John Smith.\nAlso send an email to Anna about it"
    assert split_requests(text, lines="asking") == ["Book a table for two tonight", "send an email to Anna about it"]
    assert split_requests("What's the weather?\nCould you check the forecast for Oslo too?", lines="asking") == [
        "What's the weather?",
        "Could you check the forecast for Oslo too?",
    ]


def test_the_default_multi_intent_treats_answer_lines_as_context() -> None:
    engine = _engine([{"type": "multi_intent"}])
    detailed = engine.search_detailed("send an email to Bob\nBob Jones, tomorrow at noon.\nYes, that's right.", top_k=3)
    assert detailed.trace["multi_intent"]["requests"] == ["send an email to Bob"]


@pytest.mark.parametrize(
    ("message", "requests"),
    [
        (
            "I'm a film critic and I need facts about a movie. Can you find its cast? Also, get its streaming sources",
            ["Can you find its cast?", "get its streaming sources"],
        ),
        (
            "As a teacher, I grade many essays. Check the grammar of this essay. Then translate it into French",
            ["Check the grammar of this essay", "translate it into French"],
        ),
        # a first sentence that asks outright, or is the only one, stays a request
        (
            "I'm in Rome, can you find a hotel? Also, what's the weather there tomorrow?",
            ["I'm in Rome, can you find a hotel?", "what's the weather there tomorrow?"],
        ),
        (
            "I'm looking for a cheap hotel in Rome near the station",
            ["I'm looking for a cheap hotel in Rome near the station"],
        ),
        # not a self-description: a request
        (
            "I need the weather in Oslo. Also find a hotel there",
            ["I need the weather in Oslo", "find a hotel there"],
        ),
    ],
)
def test_a_self_describing_first_sentence_is_context(message: str, requests: list[str]) -> None:
    assert split_requests(message, preamble="context") == requests


def test_the_default_multi_intent_keeps_the_speakers_self_description_out_of_the_requests() -> None:
    engine = _engine([{"type": "multi_intent"}])
    message = "My company is launching a product. Send an email to Bob. Also show the weather forecast"
    detailed = engine.search_detailed(message, top_k=3)
    assert detailed.trace["multi_intent"]["requests"] == ["Send an email to Bob", "show the weather forecast"]
    assert split_requests(message)[0] == "My company is launching a product"  # the function's own default keeps it


# -- a request that names a tool ----------------------------------------------------------------------


def _services(*names: str) -> Catalog:
    """One API per named tool, all with the same words (near-duplicate services)."""
    return Catalog(
        [
            ToolSpec(id=f"Video/{n}/search", name="search", tool=n, category="Video", description="search videos")
            for n in names
        ]
    )


def test_tool_names_need_a_cue_word_and_a_distinctive_name() -> None:
    from toolrerank_plugins.rerank.intents import ToolNames

    names = ToolNames(_services("Vimeo", "URL Link Shortener", "Video Search", "Video Finder", "Video Hub"))
    assert names.mentioned("search videos on Vimeo") == {"Video/Vimeo"}
    assert names.mentioned("shorten it using the url-link shortener API!") == {"Video/URL Link Shortener"}
    assert names.mentioned("Vimeo videos about cats") == frozenset()  # no cue word next to the name
    assert names.mentioned("search with the VIMEO tool") == {"Video/Vimeo"}  # case and punctuation ignored
    # "video" is a word of three tools' names: alone it names none of them; the whole name does
    assert names.mentioned("find a video with the app") == frozenset()
    assert names.mentioned("find it on video hub") == {"Video/Video Hub"}
    assert len(ToolNames(Catalog([]))) == 0 and ToolNames(Catalog([])).mentioned("on Vimeo") == frozenset()


def test_a_single_request_naming_a_tool_puts_its_apis_first() -> None:
    query = "get the weather forecast for Oslo with MeteoNow"
    plain = [h.id for h in _engine([]).search(query, top_k=3)]
    assert plain[0] == "Weather/SkyCast/forecast"  # the words favour the other weather service
    named = _engine([{"type": "multi_intent"}]).search_detailed(query, top_k=3)
    assert [h.id for h in named.results][0] == "Weather/MeteoNow/get_forecast"
    assert named.trace["multi_intent"]["named_tools"] == ["Weather/MeteoNow"]
    off = _engine([{"type": "multi_intent", "params": {"named_tools": False}}]).search(query, top_k=3)
    assert [h.id for h in off] == plain


def test_each_request_naming_a_tool_surfaces_that_tool() -> None:
    query = "Send an email message to Anna. Also, get the weather forecast for Oslo from MeteoNow"
    detailed = _engine([{"type": "multi_intent"}]).search_detailed(query, top_k=3)
    ids = [h.id for h in detailed.results]
    assert ids[:2] == ["Mail/PostBox/send_email", "Weather/MeteoNow/get_forecast"]
    assert detailed.trace["multi_intent"]["named_tools"] == ["Weather/MeteoNow"]


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=200))
def test_naming_tools_only_reorders_and_never_raises(text: str) -> None:
    from toolrerank_plugins.rerank.intents import ToolNames

    catalog = tiny_catalog()
    assert ToolNames(catalog).mentioned(text) <= {catalog[i].tool_key for i in catalog.ids}
    if not text.strip():
        return
    on = _engine([{"type": "multi_intent"}]).search(text, top_k=10)
    off = _engine([{"type": "multi_intent", "params": {"named_tools": False}}]).search(text, top_k=10)
    assert sorted(h.id for h in on) == sorted(h.id for h in off)
