from __future__ import annotations

import pytest

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.rerank.training import (
    Pair,
    TrainingSource,
    classifier_training_set,
    labelled_pairs,
    pseudo_query,
    pseudo_query_pairs,
    train_cross_encoder,
)
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


def _source(engine) -> TrainingSource:
    qs = [
        LabelledQuery("1", "weather forecast in paris", ("Weather/SkyCast/forecast",)),
        LabelledQuery("2", "send an email and log in", ("Mail/PostBox/send_email", "Auth/Keyring/login")),
        LabelledQuery("3", "unknown labels only", ("does/not/exist",)),
    ]
    return TrainingSource("tiny", engine.catalog, engine, qs)


def test_labelled_pairs_positives_hard_negatives_and_seen_tools(engine):
    pairs, seen = labelled_pairs(_source(engine), negatives_per_query=2)
    pos = [p for p in pairs if p.label == 1.0]
    assert len(pos) == 3 and seen == {"Weather/SkyCast", "Mail/PostBox", "Auth/Keyring"}
    neg_texts = {p.text for p in pairs if p.label == 0.0}
    assert not neg_texts & {p.text for p in pos if p.query == "weather forecast in paris"}
    assert all(p.query != "unknown labels only" for p in pairs)


def test_pseudo_queries_use_descriptions_and_sibling_negatives(engine):
    pairs = pseudo_query_pairs(_source(engine), n_apis=5, negatives_per_query=3)
    assert sum(p.label for p in pairs) == 5
    assert all(p.source == "tiny:pseudo" for p in pairs)
    spec = engine.catalog["Auth/Keyring/login"]
    assert pseudo_query(spec).startswith("Log in with username")


def test_pseudo_pairs_can_mask_the_copied_description(engine):
    plain = pseudo_query_pairs(_source(engine), n_apis=5, negatives_per_query=3)
    masked = pseudo_query_pairs(_source(engine), n_apis=5, negatives_per_query=3, mask_description=True)
    assert [(p.query, p.label) for p in plain] == [(p.query, p.label) for p in masked]
    pos_plain = [p for p in plain if p.label == 1.0]
    pos_masked = [p for p in masked if p.label == 1.0]
    assert all(p.query in p.text for p in pos_plain)  # the query is the positive's own description
    assert not any(p.query in p.text for p in pos_masked)
    descriptions = [s.description for s in engine.catalog if s.description]
    assert any(d in p.text for p in plain for d in descriptions)
    assert not any(d in p.text for p in masked for d in descriptions)


def test_classifier_training_labels(engine):
    texts, labels = classifier_training_set([_source(engine)])
    assert labels == ["single", "multi", "single"] and len(texts) == 3


def test_training_needs_pairs(tmp_path):
    with pytest.raises(ValueError, match="no training pairs"):
        train_cross_encoder([], tmp_path)


@pytest.mark.slow
@pytest.mark.model
def test_train_tiny_reranker_then_save_and_load_with_engine(tmp_path):
    pairs = [
        Pair("weather forecast", "forecast | Weather forecast for the coming days", 1.0, "t"),
        Pair("weather forecast", "send_email | Send an email message", 0.0, "t"),
    ] * 4
    facts = train_cross_encoder(
        pairs,
        tmp_path / "ce",
        seen_tools=["Weather/SkyCast"],
        num_layers=1,
        max_length=32,
        batch_size=4,
        device="cpu",
        threads=1,
    )
    assert facts["steps"] == 2 and facts["num_layers"] == 1
    cfg = EngineConfig(
        retriever="bm25",
        stages=[
            StageSpec(
                type="toolrerank",
                params={"model_path": str(tmp_path / "ce"), "classification": "single", "device": "cpu"},
            )
        ],
    )
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(32))
    stage = engine.stages[0]
    assert "Weather/SkyCast" in stage.seen_tools(engine.context)
    res = engine.search_detailed("weather forecast tomorrow", 5)
    assert res.trace["toolrerank"]["scorer"] == "cross-encoder"
    assert all(0.0 <= r.score <= 1.0 for r in res.results)
    engine.save(tmp_path / "eng")
    loaded = Engine.load(tmp_path / "eng", embedder=FakeEmbedder(32))
    again = loaded.search("weather forecast tomorrow", 5)
    assert [r.id for r in again] == [r.id for r in res.results]
    assert [round(r.score, 5) for r in again] == [round(r.score, 5) for r in res.results]


@pytest.mark.slow
@pytest.mark.model
def test_head_lr_trains_the_head_apart_from_the_encoder(tmp_path):
    from safetensors.torch import load_file

    pairs = [Pair("weather", "forecast", 1.0, "t"), Pair("weather", "email", 0.0, "t")] * 2
    kw = {"num_layers": 1, "max_length": 16, "batch_size": 4, "device": "cpu", "threads": 1, "warmup_ratio": 0.0}
    facts = train_cross_encoder(pairs, tmp_path / "a", lr=0.0, head_lr=0.0, **kw)
    assert facts["head_lr"] == 0.0
    train_cross_encoder(pairs, tmp_path / "b", lr=0.0, head_lr=1e-2, **kw)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    body = [k for k in a if "embeddings.word_embeddings" in k]
    assert body and all(a[k].equal(b[k]) for k in body)  # encoder frozen by lr=0
    assert not a["classifier.weight"].equal(b["classifier.weight"])  # the head moved


def test_collect_pairs_combines_sources_with_their_own_counts(engine):
    from toolrerank_plugins.rerank.sources import collect_pairs

    src = _source(engine)
    loads: list[str] = []

    def source(d: str) -> TrainingSource:
        loads.append(d)
        return src

    pairs, seen, recipe = collect_pairs(
        source, [("tiny", 1, 2)], [("tiny", 3, 2)], negative_depth=10, seed=0, mask_description=True
    )
    lab, lab_seen = labelled_pairs(src, negatives_per_query=2, negative_depth=10, max_queries=1, seed=0)
    pseudo = pseudo_query_pairs(src, n_apis=3, negatives_per_query=2, seed=0, mask_description=True)
    assert pairs == lab + pseudo and seen == lab_seen
    assert recipe == {
        "tiny": {"labelled_queries": 1, "negatives": 2, "pseudo_queries": 3, "pseudo_mask_description": True}
    }
    assert loads == ["tiny", "tiny"]
