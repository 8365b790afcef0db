from __future__ import annotations

import asyncio
import copy

import pytest
from langchain_core.documents import Document
from langchain_toolrerank import ToolRerankCompressor, ToolRerankRetriever

from toolrerank_plugins.records import ScoredTool


def _docs_from_elsewhere(engine) -> list[Document]:
    # What another retriever might return: tool ids in metadata plus its own keys, in its own order.
    ids = ["Weather/SkyCast/forecast", "Mail/PostBox/send_email", "Maps/GeoFind/geocode", "Mail/PostBox/list_inbox"]
    return [Document(engine.catalog[i].description, metadata={"tool_id": i, "source": "other"}) for i in ids]


def test_stages_rerank_documents_from_another_retriever(staged_engine):
    docs = _docs_from_elsewhere(staged_engine)
    before = copy.deepcopy([d.metadata for d in docs])
    out = ToolRerankCompressor(engine=staged_engine, top_n=3).compress_documents(docs, "weather in Paris")
    assert [d.metadata["tool_id"] for d in out] == [
        "Mail/PostBox/send_email",
        "Mail/PostBox/list_inbox",
        "Weather/SkyCast/forecast",
    ]
    assert [d.metadata["rank"] for d in out] == [1, 2, 3]
    assert out[0].metadata["source"] == "other"  # the caller's keys are kept
    assert out[0].metadata["stage_scores"]["prefer"] == 1.0 and "input" in out[0].metadata["stage_scores"]
    assert [d.metadata for d in docs] == before  # inputs untouched
    assert out[0] is not docs[1] and out[0].page_content == docs[1].page_content


def test_async_matches_sync(async_staged_engine):
    docs = _docs_from_elsewhere(async_staged_engine)
    comp = ToolRerankCompressor(engine=async_staged_engine, top_n=None)
    sync = comp.compress_documents(docs, "weather")
    asynced = asyncio.run(comp.acompress_documents(docs, "weather"))
    assert [d.metadata for d in sync] == [d.metadata for d in asynced]
    assert len(sync) == 4


def test_documents_without_known_ids_become_tools(staged_engine):
    docs = [
        Document("Post a tweet", metadata={"category": "Social"}),
        Document("Send an SMS", metadata={"category": "Mail", "name": "send_sms"}),
    ]
    out = ToolRerankCompressor(engine=staged_engine, top_n=2).compress_documents(docs, "text my friend")
    assert [d.page_content for d in out] == ["Send an SMS", "Post a tweet"]  # Mail preferred by the stage
    assert out[1].metadata["tool_id"].startswith("sha256:")
    assert out[0].metadata["name"] == "send_sms"


def test_no_stages_keeps_order_and_top_n(engine):
    docs = _docs_from_elsewhere(engine)
    out = ToolRerankCompressor(engine=engine, top_n=2).compress_documents(docs, "anything")
    assert [d.metadata["tool_id"] for d in out] == [d.metadata["tool_id"] for d in docs[:2]]


def test_repeated_documents_keep_the_first(engine):
    docs = _docs_from_elsewhere(engine)
    dup = Document("dup", metadata={"tool_id": docs[0].metadata["tool_id"]})
    out = ToolRerankCompressor(engine=engine, top_n=None).compress_documents([*docs, dup], "q")
    assert len(out) == 4 and out[0].page_content == docs[0].page_content


def test_compressor_over_our_own_retriever_output(staged_engine):
    docs = ToolRerankRetriever(engine=staged_engine, k=5).invoke("log in")
    out = ToolRerankCompressor(engine=staged_engine, top_n=5).compress_documents(docs, "log in")
    assert {d.metadata["tool_id"] for d in out} == {d.metadata["tool_id"] for d in docs}


def test_engine_rerank_entry_point(staged_engine):
    specs = [staged_engine.catalog[i] for i in ("Auth/Keyring/login", "Mail/PostBox/send_email")]
    out = staged_engine.rerank("q", specs)
    assert [r.tool.id for r in out] == ["Mail/PostBox/send_email", "Auth/Keyring/login"]
    assert out[1].stage_scores["input"] == 1.0  # the input order, kept as a score
    scored = [ScoredTool(specs[0], 0.7, 1, {"bm25": 0.7})]
    kept = staged_engine.rerank("q", scored)[0]
    assert kept.stage_scores["bm25"] == 0.7 and "prefer" in kept.stage_scores
    assert staged_engine.rerank("q", []) == []
    with pytest.raises(ValueError):
        staged_engine.rerank("q", specs, top_k=0)
    with pytest.raises(TypeError):
        staged_engine.rerank("q", ["Auth/Keyring/login"])  # type: ignore[list-item]
    assert asyncio.run(staged_engine.arerank("q", specs, top_k=1))[0].tool.id == "Mail/PostBox/send_email"


def test_compressor_with_the_toolrerank_stage():
    # The real ToolRerank stage (with the fake cross-encoder) over documents from elsewhere, one of them
    # unknown to the catalog.
    rerank_stage = pytest.importorskip("toolrerank_plugins.rerank.stage")
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.testing import FakeCrossEncoder, FakeEmbedder, tiny_catalog

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    stage = rerank_stage.ToolRerankStage(
        rerank_stage.ToolRerankConfig(classification="none"), engine, reranker=FakeCrossEncoder()
    )
    stage.name = "toolrerank"
    engine.stages = [stage]
    docs = _docs_from_elsewhere(engine) + [Document("Send a text message (SMS) to a phone number")]
    out = ToolRerankCompressor(engine=engine, top_n=3).compress_documents(docs, "send an email message to my boss")
    assert out[0].metadata["tool_id"] == "Mail/PostBox/send_email"
    assert all("toolrerank" in d.metadata["stage_scores"] for d in out)
    assert len(out) == 3


def test_a_document_with_a_lone_surrogate_is_a_catalog_error(engine):
    # fuzz reproducer: a document without tool_id was hashed for its id and raised UnicodeEncodeError
    from toolrerank_plugins.errors import CatalogError

    with pytest.raises(CatalogError, match="lone surrogate"):
        ToolRerankCompressor(engine=engine).compress_documents([Document(page_content="mail \ud800")], "email")


def test_a_tool_the_default_pipeline_brings_in_comes_back_as_a_new_document():
    # The default pipeline's tgr stage adds update_email's prerequisite login, which no input document stands
    # for: it comes back at its rank, built from the catalog (this raised KeyError before).
    from toolrerank_plugins import default_catalog_path, load_catalog
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.pipelines import pipeline_config
    from toolrerank_plugins.testing import FakeEmbedder

    engine = Engine.build(load_catalog(default_catalog_path()), pipeline_config("default"), embedder=FakeEmbedder())
    update, login = "Auth/Identity/KeyGate Identity/update_email", "Auth/Identity/KeyGate Identity/login"
    docs = [Document("Change the e-mail address", metadata={"tool_id": update, "source": "other"}, id="d0")]
    comp = ToolRerankCompressor(engine=engine, top_n=5)
    out = comp.compress_documents(docs, "change the e-mail address on my account")
    assert [d.metadata["tool_id"] for d in out] == [update, login]
    assert out[0].id == "d0" and out[0].metadata["source"] == "other"  # the input, rescored
    added = out[1]
    assert added.id == login and added.page_content == engine.render(engine.catalog[login])
    assert added.metadata["rank"] == 2 and "tgr" in added.metadata["stage_scores"]
    asynced = asyncio.run(comp.acompress_documents(docs, "change the e-mail address on my account"))
    assert [d.metadata for d in asynced] == [d.metadata for d in out]
    assert [
        d.metadata["tool_id"] for d in comp.model_copy(update={"top_n": 1}).compress_documents(docs, "change my e-mail")
    ] == [update]
