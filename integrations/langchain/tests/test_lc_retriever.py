from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_toolrerank import ToolRerankRetriever

from toolrerank_plugins.engine import EngineConfig
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


def test_documents_carry_the_engine_ranking(staged_engine):
    retriever = ToolRerankRetriever(engine=staged_engine, k=4)
    docs = retriever.invoke("weather forecast for Paris")
    expected = staged_engine.search("weather forecast for Paris", top_k=4)
    assert [d.metadata["tool_id"] for d in docs] == [st.tool.id for st in expected]
    first = docs[0].metadata
    assert first["category"] == "Mail"  # the stage moved Mail APIs first
    assert first["rank"] == 1 and first["score"] == expected[0].score
    assert set(first["stage_scores"]) == {"dense", "prefer"}
    assert first["tool"] == expected[0].tool.tool and first["name"] == expected[0].tool.name
    assert docs[0].page_content == staged_engine.render(expected[0].tool)
    assert docs[0].id == expected[0].tool.id


def test_k_in_constructor_and_invoke(engine):
    retriever = ToolRerankRetriever(engine=engine, k=2)
    assert len(retriever.invoke("send an email")) == 2
    assert len(retriever.invoke("send an email", k=5)) == 5
    with pytest.raises(ValueError):
        ToolRerankRetriever(engine=engine, k=0)


def test_async_matches_sync(staged_engine):
    retriever = ToolRerankRetriever(engine=staged_engine, k=3)
    sync = retriever.invoke("log in and change my email", k=4)
    asynced = asyncio.run(retriever.ainvoke("log in and change my email", k=4))
    assert [d.metadata for d in sync] == [d.metadata for d in asynced]
    assert len(sync) == 4


def test_unknown_invoke_argument_raises(engine):
    with pytest.raises(TypeError):
        ToolRerankRetriever(engine=engine).invoke("email", top_k=3)


def test_from_catalog_and_from_path(tmp_path):
    retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), EngineConfig(retriever="bm25"), k=1)
    assert retriever.invoke("send an email message")[0].metadata["tool_id"] == "Mail/PostBox/send_email"
    retriever.engine.save(tmp_path / "engine")
    loaded = ToolRerankRetriever.from_path(tmp_path / "engine", k=1)
    assert loaded.invoke("send an email message")[0].metadata == retriever.invoke("send an email message")[0].metadata


def test_dense_from_catalog_with_embedder():
    retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), embedder=FakeEmbedder(), k=3)
    docs = retriever.invoke("geocode an address")
    assert all(isinstance(d, Document) for d in docs) and len(docs) == 3
