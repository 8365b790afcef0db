"""LangChain tool-calling agent that only sees the tools selected for the request (offline, scripted model).

Run:  python examples/langchain_tool_agent.py [--retriever bm25|dense|hybrid] [--max-tools 3]

The bundled catalog's APIs run as deterministic fake callables; the scripted model calls the gold APIs of
a bundled query, fetching any tool it was not offered through the tool-search tool.
"""

from __future__ import annotations

import argparse

from langchain_toolrerank import ToolSelector, run_tool_calling_agent
from langchain_toolrerank.testing import ScriptedToolCallingModel, demo_catalog, fake_implementation

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import function_names
from toolrerank_plugins.loaders import load_queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--max-tools", type=int, default=3)
    parser.add_argument("--query-index", type=int, default=0, help="which bundled query to answer")
    args = parser.parse_args()

    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever=args.retriever))
    selector = ToolSelector.from_engine(
        engine, {i: fake_implementation(catalog[i]) for i in catalog.ids}, max_tools=args.max_tools
    )
    query = load_queries(default_catalog_path())[args.query_index]
    names = function_names(catalog[i] for i in catalog.ids)
    gold = query.calls or query.relevant
    plan = [{"tools": [names[i]], "search": catalog[i].description} for i in gold]
    model = ScriptedToolCallingModel(plan=plan)

    run = run_tool_calling_agent(model, selector, query.query)
    print(f"query:   {query.query}")
    for turn, offered in enumerate(run.offered, start=1):
        print(f"turn {turn}: offered {offered}")
    print(f"called:  {run.called}")
    print(f"answer:  {run.answer}")


if __name__ == "__main__":
    main()
