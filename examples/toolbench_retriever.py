"""Drop-in for ToolBench's retriever: ``retrieving(query, top_k, excluded_tools)`` over our engine.

Run:  python examples/toolbench_retriever.py [--engine /work/runs/engines/toolbench-dense] [--query "..."]

Without --engine it builds a BM25 engine over the bundled catalog. In ToolBench's DFSDT pipeline, pass
``ToolBenchRetriever(engine)`` where it builds its ``ToolRetriever``; its ``retrieve_rapidapi_tools`` keeps
working because the result has the same keys (category, tool_name, api_name, standardized the same way).
It needs no agent framework: only ``toolrerank-plugins``.
"""

from __future__ import annotations

import argparse
import json

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.testing import demo_catalog
from toolrerank_plugins.toolbench import ToolBenchRetriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default=None, help="folder of a saved engine (Engine.save)")
    parser.add_argument("--query", default="I need the weather forecast and a flight to Lisbon")
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()

    engine = Engine.load(args.engine) if args.engine else Engine.build(demo_catalog(), EngineConfig(retriever="bm25"))
    retriever = ToolBenchRetriever(engine)
    first = retriever.retrieving(args.query, top_k=args.top_k)
    print(json.dumps(first, indent=1))
    excluded = {first[0]["category"]: [first[0]["tool_name"]]}
    print(f"excluding {excluded}:")
    print(json.dumps(retriever.retrieving(args.query, top_k=args.top_k, excluded_tools=excluded), indent=1))


if __name__ == "__main__":
    main()
