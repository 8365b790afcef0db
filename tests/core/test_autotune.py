"""EngineConfig.auto_tune: settings chosen per catalog at index time from pseudo-requests built from the catalog's
own texts, no labels (issue 29, item 2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.retrieval.autotune import choose, mrr, pseudo_requests
from toolrerank_plugins.retrieval.base import Hit
from toolrerank_plugins.testing import FakeEmbedder, WordSetIndex, tiny_catalog


def test_pseudo_requests_leave_out_the_api_s_own_name_and_are_seeded() -> None:
    catalog = tiny_catalog()
    requests = pseudo_requests(catalog, n=5, seed=3)
    assert requests == pseudo_requests(catalog, n=5, seed=3) and len(requests) == 5
    for api, text in requests:
        name_words = set(catalog[api].name.lower().replace("_", " ").split())
        assert not name_words & set(text.lower().split()) or not catalog[api].description


class _Ranks(WordSetIndex):
    """Finds each pseudo-request's own API at a fixed rank (1 when ``good``, never otherwise)."""

    def __init__(self, good: bool, requests: dict[str, str]) -> None:
        super().__init__()
        self.good, self.by_text = good, {t: a for a, t in requests.items()}

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        return [[Hit(self.by_text[q], 1.0)] if self.good else [] for q in queries]


def test_the_candidate_that_ranks_the_pseudo_requests_best_is_chosen_and_ties_keep_the_setting() -> None:
    catalog = tiny_catalog()
    requests = dict(pseudo_requests(catalog))

    def make(config: Any, name: str) -> Any:  # stemming finds the drawn APIs, no stemming does not
        return _Ranks(config.bm25.stemmer == "english", requests)

    cfg = EngineConfig(retriever="bm25", auto_tune=["bm25.stemmer"])  # the default: no stemming
    chosen, report = choose(cfg, catalog, make)
    assert chosen.bm25.stemmer == "english" and report.chosen == {"bm25.stemmer": "english"}
    assert {s["bm25.stemmer"]: s["mrr"] for s in report.scores} == {None: 0.0, "english": 1.0}
    same, report = choose(cfg, catalog, lambda c, n: _Ranks(True, requests))  # a tie: the configured value
    assert same.bm25.stemmer is None
    assert mrr(_Ranks(True, requests), list(requests.items())) == 1.0


def test_a_value_the_user_chose_is_not_tuned() -> None:
    catalog = tiny_catalog()
    requests = dict(pseudo_requests(catalog))
    built: list[str] = []

    def make(config: Any, name: str) -> Any:
        built.append(name)
        return _Ranks(True, requests)

    # nothing is tuned by default: the per-catalog stemmer fails the transfer rule since the thirteenth dev catalog
    assert EngineConfig().auto_tune == []
    stemmer = EngineConfig(bm25={"stemmer": "english"}, auto_tune=["bm25.stemmer"])
    assert choose(stemmer, catalog, make)[1].chosen == {} and built == []
    mine = EngineConfig(hybrid={"fusion": "zscore"}, auto_tune=["hybrid.fusion"])
    kept, report = choose(mine, catalog, make)
    assert kept.hybrid.fusion == "zscore" and report.chosen == {} and built == []
    # the default value, named or not, is tuned
    for cfg in (
        EngineConfig(auto_tune=["hybrid.fusion"]),
        EngineConfig(hybrid={"fusion": "rrf"}, auto_tune=["hybrid.fusion"]),
    ):
        built.clear()
        _, report = choose(cfg, catalog, make)
        assert set(report.chosen) == {"hybrid.fusion"} and "dense" in built


def test_an_engine_built_with_auto_tune_saves_the_chosen_values(tmp_path: Path) -> None:
    cfg = EngineConfig(auto_tune=["hybrid.fusion", "bm25.stemmer"], stages=[])
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    assert engine.config.hybrid.fusion in ("rrf", "zscore", "agreement")
    assert engine.config.bm25.stemmer in (None, "english")
    assert engine.config.auto_tune == ["hybrid.fusion", "bm25.stemmer"]
    back = Engine.load(engine.save(tmp_path / "e"), embedder=FakeEmbedder())
    assert back.config == engine.config
    assert [r.id for r in back.search("send an email", 3)] == [r.id for r in engine.search("send an email", 3)]
