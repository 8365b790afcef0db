from __future__ import annotations

import asyncio
import copy

import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.postprocessor.toolrerank import ToolRerankPostprocessor
from llama_index.retrievers.toolrerank import ToolRerankRetriever

from toolrerank_plugins.engine import EngineConfig
from toolrerank_plugins.testing import tiny_catalog


def test_nodes_carry_the_engine_ranking(staged_engine):
    retriever = ToolRerankRetriever(staged_engine, similarity_top_k=4)
    hits = retriever.retrieve("weather forecast for Paris")
    expected = staged_engine.search("weather forecast for Paris", top_k=4)
    assert [h.node.node_id for h in hits] == [st.tool.id for st in expected]
    assert [h.score for h in hits] == [st.score for st in expected]
    meta = hits[0].node.metadata
    assert meta["category"] == "Mail" and meta["rank"] == 1 and set(meta["stage_scores"]) == {"dense", "prefer"}
    assert meta["tool_id"] == expected[0].tool.id and meta["tool"] == expected[0].tool.tool
    assert "stage_scores" not in hits[0].node.get_content(metadata_mode=MetadataMode.LLM)


def test_similarity_top_k_and_async(staged_engine):
    retriever = ToolRerankRetriever(staged_engine, similarity_top_k=2)
    assert len(retriever.retrieve("email")) == 2
    retriever.similarity_top_k = 5
    sync = retriever.retrieve(QueryBundle("log in and change my email"))
    asynced = asyncio.run(retriever.aretrieve("log in and change my email"))
    assert len(sync) == 5 and [h.node.metadata for h in sync] == [h.node.metadata for h in asynced]
    with pytest.raises(ValueError):
        ToolRerankRetriever(staged_engine, similarity_top_k=0)


def test_from_catalog_and_from_path(tmp_path):
    retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), EngineConfig(retriever="bm25"), similarity_top_k=1)
    assert retriever.retrieve("send an email message")[0].node.node_id == "Mail/PostBox/send_email"
    retriever.engine.save(tmp_path / "engine")
    loaded = ToolRerankRetriever.from_path(tmp_path / "engine", similarity_top_k=1)
    assert (
        loaded.retrieve("send an email message")[0].node.metadata
        == retriever.retrieve("send an email message")[0].node.metadata
    )


def _nodes_from_elsewhere(engine) -> list[NodeWithScore]:
    ids = ["Weather/SkyCast/forecast", "Mail/PostBox/send_email", "Maps/GeoFind/geocode", "Mail/PostBox/list_inbox"]
    return [
        NodeWithScore(
            node=TextNode(id_=f"n{k}", text=engine.catalog[i].description, metadata={"tool_id": i, "src": "x"}),
            score=0.5,
        )
        for k, i in enumerate(ids)
    ]


def test_postprocessor_applies_stages_without_mutating(staged_engine):
    nodes = _nodes_from_elsewhere(staged_engine)
    before = copy.deepcopy([n.node.metadata for n in nodes])
    out = ToolRerankPostprocessor(engine=staged_engine, top_n=3).postprocess_nodes(nodes, query_str="weather in Paris")
    assert [n.node.metadata["tool_id"] for n in out] == [
        "Mail/PostBox/send_email",
        "Mail/PostBox/list_inbox",
        "Weather/SkyCast/forecast",
    ]
    assert [n.node.node_id for n in out] == ["n1", "n3", "n0"]  # same nodes (copies), same ids
    assert out[0].node.metadata["src"] == "x" and out[0].node.metadata["rank"] == 1
    assert out[0].score == 1.0 and "prefer" in out[0].node.metadata["stage_scores"]
    assert [n.node.metadata for n in nodes] == before and [n.score for n in nodes] == [0.5] * 4
    asynced = asyncio.run(
        ToolRerankPostprocessor(engine=staged_engine, top_n=3).apostprocess_nodes(nodes, query_str="weather in Paris")
    )
    assert [n.node.metadata for n in asynced] == [n.node.metadata for n in out]


def test_postprocessor_nodes_without_ids_and_errors(staged_engine):
    nodes = [
        NodeWithScore(node=TextNode(id_="a", text="Post a tweet", metadata={"category": "Social"})),
        NodeWithScore(node=TextNode(id_="b", text="Send an SMS", metadata={"category": "Mail"})),
    ]
    post = ToolRerankPostprocessor(engine=staged_engine, top_n=None)
    out = post.postprocess_nodes(nodes, query_str="text my friend")
    assert [n.node.node_id for n in out] == ["b", "a"] and out[0].node.metadata["tool_id"] == "b"
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(nodes)


def test_postprocessor_after_our_retriever(staged_engine):
    hits = ToolRerankRetriever(staged_engine, similarity_top_k=5).retrieve("log in")
    out = ToolRerankPostprocessor(engine=staged_engine, top_n=5).postprocess_nodes(hits, query_str="log in")
    assert {n.node.node_id for n in out} == {n.node.node_id for n in hits}


def test_postprocessor_returns_a_tool_a_stage_brings_in_as_a_new_node():
    # The hierarchy-aware toolrerank stage adds sibling APIs of the input's tools: delete_email was no input
    # (this raised KeyError before).
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.pipelines import pipeline_config

    engine = Engine.build(tiny_catalog(), pipeline_config("bm25-hierarchy"))
    ids = ["Mail/PostBox/send_email", "Weather/SkyCast/forecast", "Mail/PostBox/list_inbox"]
    nodes = [
        NodeWithScore(node=TextNode(id_=f"n{k}", text=engine.catalog[i].description, metadata={"tool_id": i}))
        for k, i in enumerate(ids)
    ]
    post = ToolRerankPostprocessor(engine=engine, top_n=None)
    out = post.postprocess_nodes(nodes, query_str="send an email to my boss")
    assert [n.node.node_id for n in out] == ["n0", "n2", "Mail/PostBox/delete_email", "n1"]
    added = out[2].node
    assert added.metadata["tool_id"] == "Mail/PostBox/delete_email" and added.metadata["rank"] == 3
    assert added.get_content() == engine.render(engine.catalog["Mail/PostBox/delete_email"])
    asynced = asyncio.run(post.apostprocess_nodes(nodes, query_str="send an email to my boss"))
    assert [n.node.metadata for n in asynced] == [n.node.metadata for n in out]


@pytest.mark.parametrize(
    "k, error", [("3", TypeError), (None, TypeError), (2.5, TypeError), (True, TypeError), (0, ValueError)]
)
def test_similarity_top_k_is_checked_when_the_retriever_is_made(engine, k, error):
    # fuzz reproducer: "3" / None raised a bare comparison TypeError; 2.5 and True passed until the first retrieve
    with pytest.raises(error, match="similarity_top_k"):
        ToolRerankRetriever(engine, k)


def test_numpy_integer_similarity_top_k_is_an_int(engine):
    import numpy as np

    assert ToolRerankRetriever(engine, np.int64(2)).similarity_top_k == 2


@pytest.mark.parametrize(
    "fn_schema",
    # not a pydantic model; a field of an arbitrary class, which pydantic cannot describe in JSON Schema in any 2.x
    # (PydanticInvalidForJsonSchema). A bytes default b"\xff" failed only before pydantic 2.14, which warns instead.
    [dict, "create_model"],
    ids=["dict", "arbitrary-class-field"],
)
def test_a_fn_schema_without_json_schema_is_a_catalog_error(fn_schema):
    from llama_index.core.tools import FunctionTool, ToolMetadata
    from llama_index.retrievers.toolrerank import ToolRerankToolRetriever
    from pydantic import ConfigDict, Field, create_model

    from toolrerank_plugins.errors import CatalogError

    if fn_schema == "create_model":
        opaque = type("Opaque", (), {})
        fn_schema = create_model("M", __config__=ConfigDict(arbitrary_types_allowed=True), x=(opaque, Field(None)))
    meta = ToolMetadata(name="odd_tool", description="d", fn_schema=fn_schema)
    tool = FunctionTool(fn=lambda **kw: "x", metadata=meta)
    with pytest.raises(CatalogError, match="odd_tool.*cannot read its argument schema"):
        ToolRerankToolRetriever.from_tools([tool], EngineConfig(retriever="bm25"))


def test_postprocessor_returns_a_prerequisite_of_the_default_pipeline_as_a_new_node():
    # The default pipeline on the bundled catalog: its tgr stage adds update_email's prerequisite login, which
    # no input node stands for; the same core mapping as the LangChain compressor (interop.back_to_inputs).
    from toolrerank_plugins import default_catalog_path, load_catalog
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.pipelines import pipeline_config
    from toolrerank_plugins.testing import FakeEmbedder

    engine = Engine.build(load_catalog(default_catalog_path()), pipeline_config("default"), embedder=FakeEmbedder())
    update, login = "Auth/Identity/KeyGate Identity/update_email", "Auth/Identity/KeyGate Identity/login"
    nodes = [NodeWithScore(node=TextNode(id_="n0", text="Change the e-mail address", metadata={"tool_id": update}))]
    post = ToolRerankPostprocessor(engine=engine, top_n=5)
    out = post.postprocess_nodes(nodes, query_str="change the e-mail address on my account")
    assert [n.node.node_id for n in out] == ["n0", login]
    added = out[1].node
    assert added.metadata["tool_id"] == login and added.metadata["rank"] == 2
    assert added.get_content() == engine.render(engine.catalog[login]) and "tgr" in added.metadata["stage_scores"]
    asynced = asyncio.run(post.apostprocess_nodes(nodes, query_str="change the e-mail address on my account"))
    assert [n.node.metadata for n in asynced] == [n.node.metadata for n in out]
