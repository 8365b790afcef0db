"""The seams of the architecture: stage context, first-stage registry, document transforms, exclusion,
deprecated names. Each test would fail if the seam were broken (see the comments)."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.graph.expansion import ExpansionConfig
from toolrerank_plugins.llm.feedback import FeedbackConfig
from toolrerank_plugins.llm.qta import QTAConfig
from toolrerank_plugins.llm.query_generation import QueryGenerationConfig
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.rerank.stage import ToolRerankConfig
from toolrerank_plugins.retrieval.base import FirstStageType, Hit, register_first_stage
from toolrerank_plugins.retrieval.hybrid import HybridConfig
from toolrerank_plugins.stages import Stage, StageContext, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, WordSetIndex, tiny_catalog


class _NoParams(BaseModel):
    pass


class _Probe(Stage):
    """Records what it was handed; changes nothing."""

    name = "probe"
    seen: list[Any] = []

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        _Probe.seen.append(ctx)
        return candidates


register_stage_type("test_probe", StageType(_NoParams, lambda cfg, ctx, path: _Probe()), replace=True)


def test_stages_get_a_context_not_the_engine() -> None:
    engine = Engine.build(
        tiny_catalog(), EngineConfig(retriever="dense", stages=[{"type": "test_probe"}]), embedder=FakeEmbedder()
    )
    _Probe.seen.clear()
    engine.search("send an email", top_k=2)
    (ctx,) = _Probe.seen
    assert isinstance(ctx, StageContext) and not isinstance(ctx, Engine)
    assert not hasattr(ctx, "first_stage") and not hasattr(ctx, "dense")
    assert ctx.depth == engine.config.depth and ctx.catalog is engine.catalog and ctx.has_embeddings


def test_context_embeddings_come_from_the_index_when_it_has_them() -> None:
    emb = FakeEmbedder()
    dense = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=emb)
    ids = dense.catalog.ids[:3]
    rows = dense.context.cached_embeddings(ids)
    assert rows is not None
    assert np.allclose(rows, dense.first_stage.embeddings_for(ids))  # type: ignore[arg-type]
    bm25 = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"), embedder=emb)
    assert bm25.context.cached_embeddings(ids) is None  # BM25 holds no vectors
    assert np.allclose(bm25.context.embeddings(ids), rows)  # encoded on demand: the same vectors


class _Negate(Stage):
    """A stage with a document transform: negating document vectors reverses a dense ranking."""

    name = "negate"

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        return candidates

    def document_transform(self) -> Any:
        return lambda ids, emb: -emb


def test_the_engine_installs_and_removes_a_stages_document_transform() -> None:
    engine = Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())
    q = "send an email message"
    plain = [r.id for r in engine.search(q, top_k=len(engine.catalog))]
    engine.stages = [_Negate()]
    negated = [r.id for r in engine.search(q, top_k=len(engine.catalog))]
    assert negated[0] == plain[-1] and negated[0] != plain[0]
    engine.stages = []
    assert [r.id for r in engine.search(q, top_k=len(engine.catalog))] == plain


def test_a_new_first_stage_backend_plugs_in_through_the_registry(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="unknown retriever 'keyword'"):
        EngineConfig(retriever="keyword")
    register_first_stage(
        "keyword",
        FirstStageType(build=lambda cfg, emb: WordSetIndex(), load=lambda root, cfg, emb: WordSetIndex.load(root, cfg)),
        replace=True,
    )
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="keyword", stages=[]))
    top = engine.search("send email", top_k=1)[0]
    assert top.tool.name == "send_email" and top.stage_scores == {"keyword": 2.0}
    back = Engine.load(engine.save(tmp_path / "eng"))
    assert isinstance(back.first_stage, WordSetIndex)
    assert [r.id for r in back.search("send email", 3)] == [r.id for r in engine.search("send email", 3)]


def test_hybrid_hits_carry_each_retrievers_score() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=FakeEmbedder())
    (hits,) = engine.first_stage.search(["send an email"], 3)
    assert all(isinstance(h, Hit) and set(h.scores) <= {"dense", "bm25"} and h.scores for h in hits)
    top = engine.search("send an email", 1)[0]
    assert {"dense", "hybrid"} <= set(top.stage_scores)


@pytest.mark.parametrize("retriever", ["bm25", "dense"])
def test_search_excluding_ids_goes_deeper_and_never_returns_them(retriever: str) -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever=retriever), embedder=FakeEmbedder())
    q = "send an email to my account and check the weather forecast for my city"
    full = [r.id for r in engine.search(q, top_k=6)]
    assert len(full) == 6
    skip = full[:2]
    out = [r.id for r in engine.search(q, top_k=4, exclude=skip)]
    assert out == full[2:6]  # the next ones, renumbered from 1
    assert [r.rank for r in engine.search(q, top_k=4, exclude=skip)] == [1, 2, 3, 4]
    assert [r.id for r in asyncio.run(engine.asearch(q, top_k=4, exclude=skip))] == out
    assert [r.id for r in engine.search(q, top_k=4, exclude=["not/an/id"])] == full[:4]
    with pytest.raises(TypeError, match="not a single string"):
        engine.search(q, top_k=4, exclude=full[0])


def test_duck_typed_stages_still_run_with_a_deprecation_warning() -> None:
    class Old:
        name = "old"

        def run(self, query, candidates, engine, trace):  # type: ignore[no-untyped-def]
            return list(reversed(candidates))

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    base = [r.id for r in engine.search("send an email", 3)]
    with pytest.warns(DeprecationWarning, match="does not subclass"):
        engine.stages = [Old()]
    assert isinstance(engine.stages[0], Stage)
    assert [r.id for r in engine.search("send an email", 3)] != base
    with pytest.raises(ConfigError, match="not a stage"):
        engine.stages = [object()]


RENAMED = [
    (EngineConfig, "candidate_k", "depth", 7),
    (HybridConfig, "candidates", "depth", 40),
    (QTAConfig, "top_k", "depth", 12),
    (QueryGenerationConfig, "top_k", "depth", 12),
    (FeedbackConfig, "top_k", "n_tools", 4),
    (FeedbackConfig, "top_depth", "depth", 30),
    (ToolRerankConfig, "k", "top_k", 3),
    (ExpansionConfig, "top_n", "window", 2),
]


@pytest.mark.parametrize(("model", "old", "new", "value"), RENAMED)
def test_deprecated_count_names_still_work(model: type[BaseModel], old: str, new: str, value: int) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated; use {new}"):
        cfg = model.model_validate({old: value})
    assert getattr(cfg, new) == value and old not in cfg.model_dump()
    with pytest.warns(DeprecationWarning):
        assert getattr(cfg, old) == value
    with pytest.raises(ValidationError, match=f"give '{new}' only"):
        model.model_validate({old: value, new: value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(model.model_validate({new: value}), new) == value  # the new name: no warning


def test_an_engine_saved_in_format_1_with_the_old_names_loads(tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid", depth=9), embedder=FakeEmbedder())
    path = engine.save(tmp_path / "eng")
    meta = json.loads((version_dir(path) / "config.json").read_text())
    meta["format_version"] = 1
    cfg = meta["engine"]
    cfg["candidate_k"] = cfg.pop("depth")
    cfg["hybrid"]["candidates"] = cfg["hybrid"].pop("depth")
    (version_dir(path) / "config.json").write_text(json.dumps(meta))
    # the manifest guards edits (the config, read first to know which files the manifest must hold, warns of the
    # old names here too; that is checked on the trusted load below)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(PersistenceError, match="config.json: truncated or changed"):
            Engine.load(path, embedder=FakeEmbedder())
    with (
        pytest.warns(DeprecationWarning, match="HybridConfig.candidates is deprecated; use depth"),
        pytest.warns(DeprecationWarning, match="EngineConfig.candidate_k is deprecated; use depth"),
    ):
        back = Engine.load(path, embedder=FakeEmbedder(), verify=False)
    assert back.config.depth == 9 and back.config.hybrid.depth == 100
    assert [r.id for r in back.search("send an email", 3)] == [r.id for r in engine.search("send an email", 3)]


def test_an_engine_saved_before_the_recommended_defaults_keeps_its_meaning(tmp_path: Path) -> None:
    """Engines saved before c321392 have no tokenizer/stemmer/fusion/stages in config.json (and older ones no
    retriever): they must load as what they were built as, not as today's recommended defaults."""
    old = pipeline_config("hybrid")  # plain BM25 tokens, RRF, no stages: what those fields meant then
    engine = Engine.build(tiny_catalog(), old, embedder=FakeEmbedder())
    path = engine.save(tmp_path / "eng")
    meta = json.loads((version_dir(path) / "config.json").read_text())
    cfg = meta["engine"]
    for key in ("stages",):
        del cfg[key]
    for section, keys in (("bm25", ("tokenizer", "stemmer")), ("hybrid", ("fusion", "confidence_weighted"))):
        for key in keys:
            del cfg[section][key]
    (version_dir(path) / "config.json").write_text(json.dumps(meta))
    back = Engine.load(path, embedder=FakeEmbedder(), verify=False)
    assert back.config == old
    assert [r.id for r in back.search("send an email", 5)] == [r.id for r in engine.search("send an email", 5)]
    del cfg["retriever"]
    (version_dir(path) / "config.json").write_text(json.dumps(meta))
    assert pipeline_config(version_dir(path) / "config.json").retriever == "dense"  # the old EngineConfig()


def test_stage_retrieval_with_llm_made_text_tolerates_lone_surrogates() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    (hits,) = engine.context.retrieve(["send an email \ud800"], 3)  # raised UnicodeEncodeError before
    assert hits and hits[0].tool.name == "send_email"
