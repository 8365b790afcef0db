"""Adapter overhead: each LangChain / LlamaIndex adapter call against the bare engine call it wraps.

Target: <= 1 ms per call over the bare engine. The adapter and its bare engine call run on the same engine
in the same process, interleaved call by call (A, B, B, A, ...) over the same queries, so machine noise hits
both sides alike. Reported per pair: median and p95 of each side and of the per-call paired difference
(adapter - bare) over all repetitions.

Pairs measured:

- LangChain ``ToolRerankRetriever.invoke(q, k=)`` vs ``engine.search(q, top_k)`` (and ``ainvoke`` vs ``asearch``)
- the same two retrievers' own code without the framework's callbacks / instrumentation
  (``_get_relevant_documents`` / ``_retrieve`` called directly): what the conversion itself costs
- LangChain ``ToolRerankCompressor.compress_documents`` vs ``engine.rerank`` over the same 20 candidates
- LangChain ``ToolSelector.select`` vs ``engine.search``
- LlamaIndex ``ToolRerankRetriever.retrieve`` vs ``engine.search``
- LlamaIndex ``ToolRerankPostprocessor.postprocess_nodes`` vs ``engine.rerank`` over the same 20 candidates
- LlamaIndex ``ToolRerankToolRetriever.retrieve`` vs ``engine.search``

The default engine is dense with the deterministic ``FakeEmbedder`` over the bundled catalog (the overhead
does not depend on the encoder; a fast one keeps the noise down). ``--engine DIR`` loads a saved engine
instead (e.g. ``/work/runs/engines/toolbench-bm25``).

Usage::

    python benchmarks/adapter_overhead.py --out /work/runs/bench/adapter_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import FakeEmbedder

logger = logging.getLogger("adapter_overhead")


def _paired(bare: Callable[[str], Any], adapter: Callable[[str], Any], queries: list[str], repeats: int) -> dict:
    for q in queries[:5]:  # warm-up (imports, caches, first-call costs)
        bare(q)
        adapter(q)
    t_bare, t_adapter = [], []
    for r in range(repeats):
        for i, q in enumerate(queries):
            order = (bare, adapter) if (i + r) % 2 == 0 else (adapter, bare)
            times = {}
            for fn in order:
                t0 = time.perf_counter()
                fn(q)
                times[fn] = (time.perf_counter() - t0) * 1000
            t_bare.append(times[bare])
            t_adapter.append(times[adapter])
    b, a = np.array(t_bare), np.array(t_adapter)
    diff = a - b
    return {
        "calls": len(b),
        "bare_ms": {"p50": float(np.median(b)), "p95": float(np.percentile(b, 95))},
        "adapter_ms": {"p50": float(np.median(a)), "p95": float(np.percentile(a, 95))},
        "overhead_ms": {
            "p50": float(np.median(diff)),
            "p95": float(np.percentile(diff, 95)),
            "mean": float(diff.mean()),
            "median_of_sides": float(np.median(a) - np.median(b)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(default_catalog_path()), help="catalog folder (tools.jsonl, queries)")
    parser.add_argument("--engine", default=None, help="load this saved engine instead of building one")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=20, help="documents/nodes handed to compressors")
    parser.add_argument("--out", default="/work/runs/bench/adapter_overhead.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from langchain_core.documents import Document
    from langchain_toolrerank import ToolRerankCompressor, ToolSelector
    from langchain_toolrerank import ToolRerankRetriever as LCRetriever
    from langchain_toolrerank.testing import fake_implementation
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.postprocessor.toolrerank import ToolRerankPostprocessor
    from llama_index.retrievers.toolrerank import ToolRerankRetriever as LIRetriever
    from llama_index.retrievers.toolrerank import ToolRerankToolRetriever
    from llama_index.retrievers.toolrerank.testing import fake_implementation as li_fake

    if args.engine:
        engine = Engine.load(args.engine)
        engine_desc = f"Engine.load({args.engine})"
    else:
        catalog = load_catalog(args.data)
        engine = Engine.build(catalog, pipeline_config("dense"), embedder=FakeEmbedder())
        engine_desc = f"dense FakeEmbedder over {args.data}"
    queries = [q.query for q in load_queries(args.data)][: args.queries] if not args.engine else None
    if not queries:
        queries = [engine.catalog[i].description or engine.catalog[i].name for i in engine.catalog.ids[: args.queries]]
    k = args.top_k
    logger.info("engine: %r (%s), %d queries x %d repeats", engine, engine_desc, len(queries), args.repeats)

    ids = engine.catalog.ids
    cand_ids = ids[: args.candidates]
    specs = [engine.catalog[i] for i in cand_ids]
    docs = [Document(engine.catalog[i].description, metadata={"tool_id": i}) for i in cand_ids]
    nodes = [
        NodeWithScore(node=TextNode(id_=i, text=engine.catalog[i].description, metadata={"tool_id": i}))
        for i in cand_ids
    ]

    lc_ret = LCRetriever(engine=engine, k=k)
    lc_comp = ToolRerankCompressor(engine=engine, top_n=k)
    small = {i: fake_implementation(engine.catalog[i]) for i in ids}
    selector = ToolSelector.from_engine(engine, small, max_tools=k)
    li_ret = LIRetriever(engine, similarity_top_k=k)
    li_post = ToolRerankPostprocessor(engine=engine, top_n=k)
    li_tools = ToolRerankToolRetriever.from_engine(
        engine, {i: li_fake(engine.catalog[i]) for i in ids}, similarity_top_k=k
    )

    loop = asyncio.new_event_loop()
    pairs: dict[str, tuple[Callable[[str], Any], Callable[[str], Any]]] = {
        "langchain.ToolRerankRetriever.invoke": (lambda q: engine.search(q, top_k=k), lambda q: lc_ret.invoke(q, k=k)),
        "langchain.ToolRerankRetriever.ainvoke": (
            lambda q: loop.run_until_complete(engine.asearch(q, top_k=k)),
            lambda q: loop.run_until_complete(lc_ret.ainvoke(q, k=k)),
        ),
        # The adapter's own code (convert + engine call) without the framework's callback/tracing machinery:
        "langchain.ToolRerankRetriever._get_relevant_documents": (
            lambda q: engine.search(q, top_k=k),
            lambda q: lc_ret._get_relevant_documents(q, run_manager=None, k=k),  # type: ignore[arg-type]
        ),
        "langchain.ToolRerankCompressor.compress_documents": (
            lambda q: engine.rerank(q, specs, top_k=k),
            lambda q: lc_comp.compress_documents(docs, q),
        ),
        "langchain.ToolSelector.select": (lambda q: engine.search(q, top_k=k), lambda q: selector.select(q)),
        "llama_index.ToolRerankRetriever.retrieve": (lambda q: engine.search(q, top_k=k), lambda q: li_ret.retrieve(q)),
        "llama_index.ToolRerankRetriever._retrieve": (
            lambda q: engine.search(q, top_k=k),
            lambda q: li_ret._retrieve(QueryBundle(q)),
        ),
        "llama_index.ToolRerankPostprocessor.postprocess_nodes": (
            lambda q: engine.rerank(q, specs, top_k=k),
            lambda q: li_post.postprocess_nodes(nodes, query_bundle=QueryBundle(q)),
        ),
        "llama_index.ToolRerankToolRetriever.retrieve": (
            lambda q: engine.search(q, top_k=k),
            lambda q: li_tools.retrieve(q),
        ),
    }
    results: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    for name, (bare, adapter) in pairs.items():
        results[name] = _paired(bare, adapter, queries, args.repeats)
        o = results[name]["overhead_ms"]
        logger.info(
            "%-55s bare p50 %.3f ms  adapter p50 %.3f ms  overhead p50 %.3f / mean %.3f / p95 %.3f ms",
            name,
            results[name]["bare_ms"]["p50"],
            results[name]["adapter_ms"]["p50"],
            o["p50"],
            o["mean"],
            o["p95"],
        )
    loop.close()
    out = {
        "engine": engine_desc,
        "top_k": k,
        "queries": len(queries),
        "repeats": args.repeats,
        "candidates": args.candidates,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m_before_after": [load_before, os.getloadavg()[0]],
        "machine": platform.machine(),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    logger.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
