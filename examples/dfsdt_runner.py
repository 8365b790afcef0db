"""A DFSDT (ToolLLM depth-first search decision tree) run that retrieves tools per node and backtracks.

Run:  python examples/dfsdt_runner.py [--retriever bm25|dense|hybrid] [--break-first]

With --break-first (default on) the first gold API "is down": its call fails, the runner backtracks, and
the node's next retrieval leaves the failed tool out so the model can take an alternative.
"""

from __future__ import annotations

import argparse

from langchain_toolrerank import DFSDTRunner, ToolSelector
from langchain_toolrerank.testing import ScriptedToolCallingModel, demo_catalog, fake_implementation

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import function_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--max-tools", type=int, default=4)
    parser.add_argument("--query", default="weather forecast for the next days")
    parser.add_argument("--no-break", action="store_true", help="keep every tool working")
    args = parser.parse_args()

    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever=args.retriever))
    names = function_names(catalog[i] for i in catalog.ids)
    impls = {i: fake_implementation(catalog[i]) for i in catalog.ids}
    # The model prefers the retrieved tools in rank order; the best one is broken.
    ranked = [names[st.tool.id] for st in engine.search(args.query, top_k=args.max_tools)]
    if not args.no_break:
        broken = next(i for i in catalog.ids if names[i] == ranked[0])

        def down(**kwargs: object) -> str:
            raise RuntimeError("503 service unavailable")

        impls[broken] = down
    selector = ToolSelector.from_engine(engine, impls, max_tools=args.max_tools)
    model = ScriptedToolCallingModel(plan=[{"tools": ranked, "args": {}}])
    result = DFSDTRunner(model, selector, max_children=3).run(args.query)

    print(f"query:        {args.query}")
    for n, offered in enumerate(result.offered, start=1):
        print(f"expansion {n}: retrieved {offered}")
    print(f"failed calls: {result.failed_calls}  backtracks: {result.backtracks}")
    print(f"path:         {result.path}")
    print(f"answer:       {result.answer}")


if __name__ == "__main__":
    main()
