"""LlamaIndex FunctionAgent and ReActAgent picking their tools through ToolRerankToolRetriever (offline).

Run:  python examples/llama_index_agents.py [--agent function|react|both] [--retriever bm25|dense|hybrid]

The bundled catalog's APIs run as deterministic fake callables; a scripted LLM calls the first gold API of a
bundled query when it is offered.
"""

from __future__ import annotations

import argparse
import asyncio

from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.retrievers.toolrerank import ToolRerankToolRetriever
from llama_index.retrievers.toolrerank.testing import (
    ToolPlan,
    demo_catalog,
    fake_implementation,
    scripted_function_calling_llm,
    scripted_react_llm,
)

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import function_names
from toolrerank_plugins.loaders import load_queries


async def run_agent(kind: str, retriever: ToolRerankToolRetriever, query: str, tool_name: str) -> None:
    plan = ToolPlan(tools=[tool_name])
    if kind == "function":
        agent = FunctionAgent(tool_retriever=retriever, llm=scripted_function_calling_llm(plan))
    else:
        agent = ReActAgent(tool_retriever=retriever, llm=scripted_react_llm(plan))
    answer = await agent.run(user_msg=query)
    print(f"[{kind}] offered {plan.offered[0] if plan.offered else []}")
    print(f"[{kind}] called  {plan.calls}")
    print(f"[{kind}] answer  {answer}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="both", choices=["function", "react", "both"])
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--query-index", type=int, default=1)
    args = parser.parse_args()

    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever=args.retriever))
    impls = {i: fake_implementation(catalog[i]) for i in catalog.ids}
    retriever = ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=args.top_k)
    query = load_queries(default_catalog_path())[args.query_index]
    tool_name = function_names(catalog[i] for i in catalog.ids)[(query.calls or query.relevant)[0]]
    print(f"query: {query.query}\ngold tool: {tool_name}")
    for kind in ("function", "react") if args.agent == "both" else (args.agent,):
        asyncio.run(run_agent(kind, retriever, query.query, tool_name))


if __name__ == "__main__":
    main()
