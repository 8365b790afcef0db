"""LangChain 1.x ``create_agent`` with ToolRerankMiddleware: the model sees a few of the catalog's tools per call.

Run:  python examples/langchain_create_agent.py [--retriever bm25|dense|hybrid] [--max-tools 3]

The bundled catalog's 235 APIs run as deterministic fake callables; a scripted chat model stands in for the LLM
(offline). The conversation ends with a follow-up ("yes, do it") that names no tool: the middleware builds the
query from the earlier turns, so the flight-booking tool is offered anyway.
"""

from __future__ import annotations

import argparse

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_toolrerank import ToolRerankMiddleware, ToolSelector
from langchain_toolrerank.testing import ScriptedToolCallingModel, demo_catalog, fake_implementation

from toolrerank_plugins.engine import Engine, EngineConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--max-tools", type=int, default=3)
    args = parser.parse_args()

    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever=args.retriever))
    tools = ToolSelector.from_engine(engine, {i: fake_implementation(catalog[i]) for i in catalog.ids}).tools_by_id
    rerank = ToolRerankMiddleware(engine, tools, max_tools=args.max_tools, include_search_tool=True)

    model = ScriptedToolCallingModel(
        plan=[{"tools": ["book_flight"], "args": {"flight_id": "SR212"}, "search": "reserve and ticket a flight"}]
    )
    agent = create_agent(model, middleware=[rerank])  # the middleware registers the catalog's tools
    conversation = [
        HumanMessage("Find flights from Boston to Lisbon on 12 May for two adults"),
        AIMessage("The cheapest offer is SR212 at 18:05 for 412 EUR. Shall I reserve and ticket it for you?"),
        HumanMessage("yes, do it"),
    ]
    out = agent.invoke({"messages": conversation}, {"recursion_limit": 12})

    print(f"catalog: {len(catalog)} tools; max_tools={args.max_tools}")
    for call, offered in enumerate(model.offered, start=1):
        print(f"model call {call}: offered {offered}")
    print(f"'yes, do it' alone would find: {[r.tool.name for r in engine.search('yes, do it', top_k=3)]}")
    print(f"tool calls: {[m.name for m in out['messages'] if isinstance(m, ToolMessage)]}")
    print(f"answer: {out['messages'][-1].content}")


if __name__ == "__main__":
    main()
