"""langgraph-bigtool agent whose ``retrieve_tools`` step searches a toolrerank-plugins engine (offline).

Run:  python examples/langgraph_bigtool_agent.py [--retriever bm25|dense|hybrid] [--limit 3]

Needs the optional ``langgraph-bigtool`` (``pip install -e "./integrations/langchain[bigtool]"``). The bundled
catalog's 235 APIs run as deterministic fake callables and a scripted chat model stands in for the LLM: it starts
with only ``retrieve_tools``, asks for the tools it needs, and calls the one the engine found.
"""

from __future__ import annotations

import argparse

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_toolrerank import ToolSelector
from langchain_toolrerank.bigtool import retrieve_tools_coroutine, retrieve_tools_function
from langchain_toolrerank.testing import ScriptedToolCallingModel, demo_catalog, fake_implementation
from langgraph.prebuilt import ToolNode
from langgraph_bigtool import create_agent

from toolrerank_plugins.engine import Engine, EngineConfig

# langgraph-bigtool 0.0.3 (the latest release) calls ToolNode.inject_tool_args, which langgraph-prebuilt 1.x made
# private; ToolNode 1.x injects state and store itself when it runs a call, so passing the call through suffices.
if not hasattr(ToolNode, "inject_tool_args"):
    ToolNode.inject_tool_args = lambda self, tool_call, state, store: tool_call  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--limit", type=int, default=3, help="tool ids per retrieve_tools call")
    args = parser.parse_args()

    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever=args.retriever))
    # bigtool's registry: tool id -> tool; the hook returns engine catalog ids, so key the registry by them
    registry = ToolSelector.from_engine(engine, {i: fake_implementation(catalog[i]) for i in catalog.ids}).tools_by_id

    model = ScriptedToolCallingModel(
        plan=[{"tools": ["cancel_booking"], "args": {"booking_id": "QX7P2L"}, "search": "cancel a flight reservation"}],
        search_tool_name="retrieve_tools",
    )
    builder = create_agent(
        model,
        registry,
        retrieve_tools_function=retrieve_tools_function(engine, limit=args.limit),
        retrieve_tools_coroutine=retrieve_tools_coroutine(engine, limit=args.limit),
    )
    agent = builder.compile()
    out = agent.invoke({"messages": [HumanMessage("Cancel my flight reservation QX7P2L and get my money back")]})

    print(f"catalog: {len(catalog)} tools; limit={args.limit}")
    for call, offered in enumerate(model.offered, start=1):
        print(f"model call {call}: offered {offered}")
    print(f"selected tool ids: {out['selected_tool_ids']}")
    print(f"tool calls: {[m.name or 'retrieve_tools' for m in out['messages'] if isinstance(m, ToolMessage)]}")
    print(f"answer: {out['messages'][-1].content}")


if __name__ == "__main__":
    main()
