from __future__ import annotations

import json
import logging

import pytest

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.records import LabelledQuery, ScoredTool, ToolSpec
from toolrerank_plugins.rerank.classifier import QueryTypeClassifier
from toolrerank_plugins.rerank.stage import ToolRerankConfig, ToolRerankStage
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing import FakeCrossEncoder, FakeEmbedder, tiny_catalog


def run(stage: ToolRerankStage, engine: Engine, query: str, depth: int = 10) -> tuple[list[ScoredTool], dict]:
    trace: dict = {}
    cands = engine.retrieve([query], depth)[0]
    return stage.run(query, cands, engine.context, trace), trace


def test_empty_candidates_give_empty_result(engine):
    stage = ToolRerankStage(ToolRerankConfig(classification="single"), engine.context, reranker=FakeCrossEncoder())
    trace: dict = {}
    assert stage.run("anything", [], engine.context, trace) == []
    assert trace["truncated_to"] == 0


def test_single_candidate(engine):
    stage = ToolRerankStage(ToolRerankConfig(classification="multi"), engine.context, reranker=FakeCrossEncoder())
    cand = engine.retrieve(["geocode street address"], 1)[0]
    out = stage.run("geocode street address", cand, engine.context, {})
    assert [c.id for c in out] == ["Maps/GeoFind/geocode"]
    assert 0.0 <= out[0].stage_scores["toolrerank"] <= 1.0


def test_never_drops_and_reranks_with_cross_encoder(engine):
    ce = FakeCrossEncoder()
    stage = ToolRerankStage(ToolRerankConfig(m_s=2, m_u=3, classification="none"), engine.context, reranker=ce)
    q = "send email message to a recipient"
    cands = engine.retrieve([q], 10)[0]
    out = stage.run(q, cands, engine.context, {})
    assert sorted(c.id for c in out) == sorted(c.id for c in cands)
    assert out[0].id == "Mail/PostBox/send_email"
    assert ce.pairs_scored == 3  # only the truncated list went to the cross-encoder


def test_all_scores_tied_keep_first_stage_order(engine):
    class Flat:
        def score(self, query, texts, *, batch_size=None):
            return [0.5] * len(texts)

    stage = ToolRerankStage(ToolRerankConfig(classification="none"), engine.context, reranker=Flat())
    q = "weather forecast city email"
    cands = engine.retrieve([q], 10)[0]
    out = stage.run(q, cands, engine.context, {})
    assert [c.id for c in out] == [c.id for c in cands]


def test_first_stage_weight_interpolates_model_and_first_stage_scores(engine):
    q = "weather forecast city email"
    cands = engine.retrieve([q], 4)[0]
    # a reranker that prefers the first stage's last candidate a little
    prefs = {engine.render(c.tool): 0.5 + 0.01 * i for i, c in enumerate(cands)}

    class Inverting:
        def score(self, query, texts, *, batch_size=None):
            return [prefs[t] for t in texts]

    def ranked(w: float) -> tuple[list[str], list[float]]:
        cfg = ToolRerankConfig(classification="none", first_stage_weight=w)
        out = ToolRerankStage(cfg, engine.context, reranker=Inverting()).run(q, list(cands), engine.context, {})
        return [c.id for c in out], [c.stage_scores["toolrerank"] for c in out]

    ids0, _ = ranked(0.0)
    assert ids0 == [c.id for c in reversed(cands)]  # the paper: the model alone decides
    ids1, scores1 = ranked(1.0)
    assert ids1 == [c.id for c in cands]  # first stage only
    assert scores1[0] == pytest.approx(1.0)  # relative to the query's best first-stage score
    ids_half, scores_half = ranked(0.5)
    top = cands[0].score
    expected = {c.id: 0.5 * prefs[engine.render(c.tool)] + 0.5 * c.score / top for c in cands}
    assert dict(zip(ids_half, scores_half)) == pytest.approx(expected)
    with pytest.raises(ValueError):
        ToolRerankConfig(first_stage_weight=1.5)


def test_seen_tools_from_model_and_catalog_change_truncation(engine):
    q = "weather forecast in a city"
    cands = engine.retrieve([q], 10)[0]
    ce = FakeCrossEncoder(seen_tools=[cands[1].tool.tool_key])
    stage = ToolRerankStage(ToolRerankConfig(m_s=1, m_u=10, classification="none"), engine.context, reranker=ce)
    trace: dict = {}
    stage.run(q, cands, engine.context, trace)
    assert trace["kept_seen"] == 0 or trace["truncated_to"] < len(cands)
    engine.catalog.mark_seen([c.tool.tool_key for c in cands])
    trace2: dict = {}
    out = stage.run(q, cands, engine.context, trace2)
    assert trace2["truncated_to"] == 1 and len(out) == len(cands)


def test_extended_list_pulls_sibling_apis_of_unseen_tools(engine):
    q = "current weather conditions"
    cands = [c for c in engine.retrieve([q], 10)[0] if c.id != "Weather/SkyCast/forecast"]
    stage = ToolRerankStage(
        ToolRerankConfig(classification="single", tau_s=0.5), engine.context, reranker=FakeCrossEncoder()
    )
    out, trace = stage.run(q, cands, engine.context, {}), None
    ids = [c.id for c in out]
    assert "Weather/SkyCast/forecast" in ids  # added from the catalog
    assert len(ids) == len(set(ids))
    off = ToolRerankStage(
        ToolRerankConfig(classification="single", tau_s=0.5, extended=False),
        engine.context,
        reranker=FakeCrossEncoder(),
    )
    assert "Weather/SkyCast/forecast" not in [c.id for c in off.run(q, cands, engine.context, {})]
    engine.catalog.mark_seen(["Weather/SkyCast"])  # seen tools are not extended unless extend_seen
    assert "Weather/SkyCast/forecast" not in [c.id for c in stage.run(q, cands, engine.context, {})]
    assert trace is None


def test_without_model_hierarchy_runs_on_first_stage_scores(engine):
    stage = ToolRerankStage(ToolRerankConfig(classification="single", tau_s=0.99), engine.context)
    out, trace = run(stage, engine, "weather forecast email")
    assert trace["scorer"].startswith("first-stage")
    top_tool = out[0].tool.tool_key
    # every API of the top tool precedes every API of other tools
    first_other = next(i for i, c in enumerate(out) if c.tool.tool_key != top_tool)
    assert all(c.tool.tool_key != top_tool for c in out[first_other:])
    assert all(0.0 <= c.stage_scores["toolrerank"] <= 1.0 for c in out)


def test_flat_catalog_single_and_multi(flat_engine):
    for mode in ("single", "multi"):
        stage = ToolRerankStage(ToolRerankConfig(classification=mode), flat_engine.context, reranker=FakeCrossEncoder())
        out, _ = run(stage, flat_engine, "weather in a city and stock price")
        assert len({c.id for c in out}) == len(out) >= 3


def test_apis_without_a_tool_mixed_with_tools():
    from toolrerank_plugins.catalog import Catalog

    cat = Catalog(
        [
            ToolSpec(id="a", name="weather_now", description="weather now", tool="W"),
            ToolSpec(id="b", name="weather_later", description="weather later", tool="W"),
            ToolSpec(id="c", name="weather_loose", description="weather loose api"),
        ]
    )
    eng = Engine.build(cat, EngineConfig(retriever="bm25"), embedder=FakeEmbedder(32))
    stage = ToolRerankStage(ToolRerankConfig(classification="multi", n=1), eng.context, reranker=FakeCrossEncoder())
    out, trace = run(stage, eng, "weather loose")
    assert sorted(c.id for c in out) == ["a", "b", "c"] and trace["components"] >= 2


def test_oracle_and_config_validation(engine, tmp_path):
    with pytest.raises(ValueError, match="oracle_queries"):
        ToolRerankConfig(classification="oracle")
    with pytest.raises(ValueError, match="classifier_path"):
        ToolRerankConfig(classification="classifier")
    with pytest.raises(ValueError):
        ToolRerankConfig(m_s=0)
    with pytest.raises(ValueError):
        ToolRerankConfig(unknown=1)
    q = tmp_path / "queries.jsonl"
    q.write_text(
        json.dumps({"query": "mail and weather", "relevant": ["Mail/PostBox/send_email", "Weather/SkyCast/forecast"]})
        + "\n"
    )
    stage = ToolRerankStage(
        ToolRerankConfig(classification="oracle", oracle_queries=str(q)), engine.context, reranker=FakeCrossEncoder()
    )
    assert stage.classify("mail and weather") == "multi"
    with pytest.raises(ConfigError, match="no gold type"):
        stage.classify("unknown query")


def test_auto_without_classifier_means_no_hierarchy(engine):
    stage = ToolRerankStage(ToolRerankConfig(), engine.context, reranker=FakeCrossEncoder())
    assert stage.classify("anything") is None


def _classifier(emb: FakeEmbedder) -> QueryTypeClassifier:
    return QueryTypeClassifier(emb).fit(
        ["weather today", "forecast tomorrow", "mail and weather", "email then map"],
        ["single", "single", "multi", "multi"],
    )


def test_engine_save_load_round_trip_with_classifier(tmp_path, caplog):
    emb = FakeEmbedder(64)
    clf_dir = _classifier(emb).save(tmp_path / "clf")
    cfg = EngineConfig(
        retriever="bm25",
        stages=[
            StageSpec(
                type="toolrerank",
                params={"classifier_path": str(clf_dir), "classification": "classifier", "m_s": 3, "m_u": 5},
            )
        ],
    )
    engine = Engine.build(tiny_catalog(), cfg, embedder=emb)
    before = [c.id for c in engine.search("weather forecast and send an email", 5)]
    engine.save(tmp_path / "eng")
    (clf_dir / "classifier.json").unlink()  # the saved engine must not depend on the original folder
    loaded = Engine.load(tmp_path / "eng", embedder=emb)
    assert [c.id for c in loaded.search("weather forecast and send an email", 5)] == before
    assert (version_dir(tmp_path / "eng") / "stages" / "00-toolrerank" / "classifier" / "classifier.json").is_file()


def test_saved_stage_without_stage_json_is_a_clear_error(tmp_path):
    from toolrerank_plugins.rerank.stage import _factory

    (tmp_path / "s").mkdir()
    eng = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"), embedder=FakeEmbedder(16))
    with pytest.raises(PersistenceError, match="stage.json"):
        _factory(ToolRerankConfig(), eng, tmp_path / "s")


def test_missing_model_path_is_a_clear_error(tmp_path):
    cfg = EngineConfig(
        retriever="bm25", stages=[StageSpec(type="toolrerank", params={"model_path": str(tmp_path / "nope")})]
    )
    with pytest.raises(PersistenceError, match="does not exist"):
        Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(16))


def test_fake_reranker_without_save_warns(tmp_path, caplog, engine):
    stage = ToolRerankStage(ToolRerankConfig(), engine.context, reranker=FakeCrossEncoder())
    with caplog.at_level(logging.WARNING):
        stage.save(tmp_path)
    assert "no save()" in caplog.text
    assert json.loads((tmp_path / "stage.json").read_text())["has_reranker"] is False


def test_labelled_query_type_uses_tool_hierarchy():
    from toolrerank_plugins.rerank.classifier import query_type

    cat = tiny_catalog()
    assert query_type(LabelledQuery("1", "q", ("Weather/SkyCast/forecast", "Weather/SkyCast/current")), cat) == "single"
    assert query_type(LabelledQuery("2", "q", ("Weather/SkyCast/forecast", "Mail/PostBox/send_email")), cat) == "multi"


def test_classifier_answer_is_memoised_per_query_and_classifier(engine):
    class Counting:
        def __init__(self, answer: str) -> None:
            self.answer, self.calls = answer, 0

        def predict(self, queries):
            self.calls += 1
            return [self.answer] * len(queries)

    first = Counting("single")
    cfg = ToolRerankConfig(classification="classifier", classifier_path="unused")
    stage = ToolRerankStage(cfg, engine.context, classifier=first)  # type: ignore[arg-type]
    assert [stage.classify("q1"), stage.classify("q1"), stage.classify("q2")] == ["single", "single", "single"]
    assert first.calls == 2
    second = Counting("multi")
    stage.classifier = second  # type: ignore[assignment]
    assert stage.classify("q1") == "multi" and second.calls == 1


def _dense_engine_with_classifier(emb: FakeEmbedder, tmp_path, **dense) -> Engine:
    clf_dir = _classifier(emb).save(tmp_path / "clf")
    cfg = EngineConfig(
        retriever="dense",
        dense=dense,
        stages=[
            StageSpec(
                type="toolrerank",
                params={"classifier_path": str(clf_dir), "classification": "classifier", "m_s": 3, "m_u": 5},
            )
        ],
    )
    return Engine.build(tiny_catalog(), cfg, embedder=emb)


def test_the_classifier_reads_the_first_stage_query_vector_instead_of_encoding_again(tmp_path):
    emb = FakeEmbedder(64)
    engine = _dense_engine_with_classifier(emb, tmp_path)
    clf = engine.stages[0].classifier
    engine.search("weather forecast and send an email", 5)  # the first query checks the vectors are the same
    for q in ("mail and weather", "forecast tomorrow", "email then map"):
        before = emb.calls
        res = engine.search_detailed(q, 5)
        assert emb.calls - before == 1  # the first stage's query encode only
        assert res.trace["toolrerank"]["query_type"] == clf.predict([q])[0]


def test_with_a_query_prefix_the_classifier_encodes_the_query_itself(tmp_path):
    emb = FakeEmbedder(64)
    engine = _dense_engine_with_classifier(emb, tmp_path, query_prefix="query: ")
    clf = engine.stages[0].classifier
    engine.search("weather forecast and send an email", 5)
    for q in ("mail and weather", "forecast tomorrow"):
        before = emb.calls
        res = engine.search_detailed(q, 5)
        assert emb.calls - before == 2  # the prefixed first-stage vector is not the classifier's
        assert res.trace["toolrerank"]["query_type"] == clf.predict([q])[0]


def test_backend_and_threads_are_config_fields():
    cfg = ToolRerankConfig(backend="onnx-int8", threads=1)
    assert (cfg.backend, cfg.threads) == ("onnx-int8", 1)
    with pytest.raises(ValueError):
        ToolRerankConfig(backend="openvino")
    with pytest.raises(ValueError):
        ToolRerankConfig(threads=0)
