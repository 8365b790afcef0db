"""The adapters on the PostgreSQL backend (issue 27): an agent worker that starts after the store was built
selects from it through a connection string, nothing encoded; real LangChain and LlamaIndex agents with scripted
models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from toolrerank_plugins.postgres import postgres_config
from toolrerank_plugins.testing import FakeEmbedder


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.encoded = 0

    def encode(self, texts: Any, **kwargs: Any) -> Any:
        self.encoded += len(texts)
        return super().encode(texts, **kwargs)


def test_langchain_middleware_and_retriever_on_postgres(pg_server: Any, table: str) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_toolrerank import ToolRerankMiddleware, ToolRerankRetriever
    from langchain_toolrerank.testing import ScriptedToolCallingModel

    @tool
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        return f"sunny in {city}"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email message to a recipient."""
        return "sent"

    @tool
    def book_flight(origin: str, destination: str) -> str:
        """Book a flight between two airports."""
        return "booked"

    tools = [get_weather, send_email, book_flight]
    config = postgres_config(table=table)
    ToolRerankMiddleware.from_tools(
        tools, config, embedder=FakeEmbedder(), resources={"postgres": pg_server.uri}, max_tools=1
    )  # the process that indexes the tools
    worker_emb = CountingEmbedder()
    middleware = ToolRerankMiddleware.from_postgres(pg_server.uri, tools, table=table, embedder=worker_emb, max_tools=1)
    model = ScriptedToolCallingModel(plan=[{"tools": ["get_weather"], "args": {"city": "Paris"}}])
    agent = create_agent(model, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("what is the weather forecast in Paris?")]}, {"recursion_limit": 20})
    assert model.offered[0] == ["get_weather"] and "sunny in Paris" in str(out["messages"])
    assert worker_emb.encoded < 10  # the request (and its parts), never the tools
    retriever = ToolRerankRetriever.from_postgres(pg_server.uri, table=table, embedder=FakeEmbedder(), k=1)
    assert retriever.invoke("send an email message")[0].metadata["tool_id"] == "send_email"


def test_llama_index_retrievers_on_postgres(pg_server: Any, table: str) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.retrievers.toolrerank import ToolRerankRetriever, ToolRerankToolRetriever
    from llama_index.retrievers.toolrerank.testing import ToolPlan, scripted_function_calling_llm

    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        return f"sunny in {city}"

    def send_email(to: str) -> str:
        """Send an email message to a recipient."""
        return "sent"

    tools = [FunctionTool.from_defaults(fn=f) for f in (get_weather, send_email)]
    ToolRerankToolRetriever.from_tools(
        tools, postgres_config(table=table), embedder=FakeEmbedder(), resources={"postgres": pg_server.uri}
    )
    worker = ToolRerankToolRetriever.from_postgres(
        pg_server.uri, tools, table=table, embedder=FakeEmbedder(), similarity_top_k=1
    )
    plan = ToolPlan(tools=["get_weather"], args={"city": "Oslo"})
    agent = FunctionAgent(tool_retriever=worker, llm=scripted_function_calling_llm(plan))

    async def run() -> str:
        return str(await agent.run(user_msg="weather forecast for Oslo"))

    answer = asyncio.run(run())
    assert plan.offered[0] == ["get_weather"] and plan.calls == ["get_weather"] and "sunny in Oslo" in answer
    nodes = ToolRerankRetriever.from_postgres(pg_server.uri, table=table, embedder=FakeEmbedder(), similarity_top_k=1)
    assert nodes.retrieve("send an email message")[0].node.node_id == "send_email"
