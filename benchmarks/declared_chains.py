"""Declared dependencies followed to the end (issue 29 item 3): the default with ``declared_chains`` vs today's
default vs the peer graph-tool-call's published protocol, on dev sets whose queries need a chain.

Dev sets (``--sets``), none of them copied into the repository:

- ``bundled``: the bundled catalog's 88 labelled queries and its hand-declared edges; group ``chain``: the queries
  whose gold set is one API plus some of its declared prerequisites (at least 2 APIs).
- ``wf-restbench``, ``wf-api-bank``, ``wf-toolbench``: a shared catalog's tools (``DATA/<name>``) with only the
  dependencies an owner would declare that ``benchmarks/declared_workflows.json`` lists (the catalog's own
  ``edges.jsonl`` is left out), and that file's requests, which name only the final step; gold = the target
  plus every API it transitively depends on. ToolBench's vectors come from ``--toolbench-engine``.
- ``synthetic``: ``benchmarks/declared_chains_data.py`` (seed 0): 16 services, chains of depth 2-5.

Pipelines: ``without chains`` (the default before, ``declared_chains: false``), ``default (chains from top_k 10)``
(``EngineConfig()``: ``declared_chains: true``, budget scaled with the caller's ``top_k``, from ``chain_min_top_k``
10 up), ``chains at every top_k`` (``chain_min_top_k: 1``) and a few ``chain_depth`` / ``chain_order`` / share
variants of it, and ``peer`` (graph-tool-call's protocol: the dense top-4 targets, then every prerequisite up to 3 hops
over the declared edges, breadth first per target in rank order, then the rest of the dense ranking).

Each query runs the default pipeline once with its ``tgr`` expansion off (the ``tgr`` stage's input, 50 deep);
every expansion variant is then applied to those candidates with ``expand_prerequisites`` and the caller's
``top_k`` -- one search per k, so a variant whose budget scales with ``top_k`` is measured at @5 with
``top_k=5`` and at @10 with ``top_k=10`` (checked: the default through ``Engine.search`` gives the same top 5 and
top 10 on the first 25 queries of every set). ``@5 of top-10`` is R@5 / S@5 read from the
``top_k=10`` search, what ``evaluate(ks=(5, 10))`` reports.

``--experiments single``: the default with and without declared chains on the six shared dev sets (each with
its own ``edges.jsonl``: their edges are ``derived`` from call data, not declared, so they keep today's rule) and
the bundled catalog; R@5 / S@5 at ``top_k=5`` overall and R@5 of single-tool queries, paired bootstrap 95 %
intervals; ``+ derived`` also follows ``derived`` edges to the end (a sensitivity check).

    OMP_NUM_THREADS=1 python benchmarks/declared_chains.py --data ../shared/data --cache-dir /tmp/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out /tmp/chains.json --md /tmp/chains.md
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from declared_chains_data import generate, write  # noqa: E402  (sibling script)

from toolrerank_plugins.catalog import Catalog, default_catalog_path  # noqa: E402
from toolrerank_plugins.config import EngineConfig  # noqa: E402
from toolrerank_plugins.engine import Engine  # noqa: E402
from toolrerank_plugins.evaluation import query_metrics  # noqa: E402
from toolrerank_plugins.graph.expansion import ExpansionConfig, expand_prerequisites  # noqa: E402
from toolrerank_plugins.graph.tool_graph import ToolGraph  # noqa: E402
from toolrerank_plugins.loaders import load_catalog, load_queries  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402
from toolrerank_plugins.records import Edge, LabelledQuery, ScoredTool  # noqa: E402

logger = logging.getLogger("declared_chains")
HERE = Path(__file__).resolve().parent
DEPTH = 50
CHAIN_SETS = ("bundled", "wf-restbench", "wf-api-bank", "wf-toolbench", "synthetic")
SINGLE_SETS = ("bundled", "api-bank", "nestful", "seal-tools", "restbench", "metatool", "toolbench")
PEER = "peer (dense top-4 + 3 hops)"


# -- data ------------------------------------------------------------------------------------------
def _closure(edges: Sequence[Edge], target: str) -> list[str]:
    into: dict[str, list[str]] = {}
    for e in edges:
        into.setdefault(e.target, []).append(e.source)
    out: list[str] = []
    queue = deque([target])
    while queue:
        for pre in into.get(queue.popleft(), []):
            if pre != target and pre not in out:
                out.append(pre)
                queue.append(pre)
    return out


def chain_queries(catalog: Catalog, queries: Sequence[LabelledQuery]) -> list[LabelledQuery]:
    """Queries whose gold set is one API plus some of its declared prerequisites (at least 2 APIs)."""
    out = []
    for q in queries:
        if len(q.relevant) >= 2 and any(set(q.relevant) <= {t, *_closure(catalog.edges, t)} for t in q.relevant):
            out.append(q)
    return out


def load_set(name: str, data: Path) -> tuple[Catalog, list[LabelledQuery], str]:
    """The catalog, dev queries and the name of the vectors it shares (``base``) of a dev set."""
    if name == "bundled":
        folder = Path(default_catalog_path())
        return load_catalog(folder), load_queries(folder, split="dev"), "bundled"
    if name == "synthetic":
        with tempfile.TemporaryDirectory() as tmp:
            write(Path(tmp), generate(0), 0)
            return load_catalog(tmp), load_queries(tmp, split="dev"), "synthetic"
    if name.startswith("wf-"):
        base = name[3:]
        spec = json.loads((HERE / "declared_workflows.json").read_text(encoding="utf-8"))["catalogs"][base]
        tools = load_catalog(data / base, with_edges=False)
        edges = [Edge(s, t, origin="labelled") for s, t in spec["edges"]]
        catalog = Catalog(list(tools), edges=edges, source=f"{data / base} + declared_workflows.json")
        queries = [
            LabelledQuery(f"{name}-{i:03d}", q["query"], (q["target"], *_closure(edges, q["target"])), "dev", "chain")
            for i, q in enumerate(spec["queries"])
        ]
        return catalog, queries, base
    folder = data / name
    return load_catalog(folder), load_queries(folder, split="dev"), name


def vectors(
    base: str, catalog: Catalog, cache_dir: Path | None, toolbench_engine: Path | None
) -> dict[str, np.ndarray]:
    """The API vectors of ``base`` (encoded once, kept in ``cache_dir``; ToolBench's from the saved engine)."""
    if base == "toolbench":
        if toolbench_engine is None:
            raise SystemExit("toolbench needs --toolbench-engine (a saved hybrid engine over DATA/toolbench)")
        return Engine.load(toolbench_engine).first_stage.embedding_cache()
    file = None if cache_dir is None else cache_dir / f"{base}.npz"
    if file is not None and file.exists():
        with np.load(file) as z:
            return {k: z[k] for k in z.files}
    t = time.perf_counter()
    cache = Engine.build(catalog, pipeline_config("dense")).first_stage.embedding_cache()
    logger.info("%s: encoded %d APIs in %.0f s", base, len(catalog), time.perf_counter() - t)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, **cache)  # type: ignore[arg-type]
    return cache


# -- pipelines -------------------------------------------------------------------------------------
def default_expansion() -> dict[str, Any]:
    tgr = next(s for s in EngineConfig().stages if s.type == "tgr")
    return dict(tgr.params["expansion"])


def config_with(expansion: Mapping[str, Any]) -> EngineConfig:
    """The default pipeline with these ``tgr`` expansion settings."""
    cfg = EngineConfig()
    stages = []
    for s in cfg.stages:
        if s.type == "tgr":
            s = s.model_copy(update={"params": {**s.params, "expansion": dict(expansion)}})
        stages.append(s)
    return cfg.model_copy(update={"stages": stages})


BASE = "without chains"
NEW = "default (chains from top_k 10)"
EVERY_K = "chains at every top_k"


def variants(experiment: str) -> dict[str, dict[str, Any]]:
    default = default_expansion()  # declared_chains on, chain_min_top_k 10
    base = {**default, "declared_chains": False}
    every = {**default, "chain_min_top_k": 1}
    if experiment == "single":
        return {
            BASE: base,
            NEW: default,
            EVERY_K: every,
            "+ derived": {**every, "chain_origins": ["declared", "labelled", "derived"]},
            "chains + direct": {**every, "chain_keep_direct": True},
            "chains, share 0.6": {**every, "chain_share": 0.6},
            "chains, share 0.8": {**every, "chain_share": 0.8},
        }
    out = {BASE: base, NEW: default, EVERY_K: every}
    for depth in (2, 3, 5):
        out[f"chains depth {depth}"] = {**every, "chain_depth": depth}
    out["chains, order by depth"] = {**every, "chain_order": "depth"}
    out["chains, share 0.4"] = {**every, "chain_share": 0.4}
    out["chains, keep today's direct rule"] = {**every, "chain_keep_direct": True}
    return out


def peer_ranking(dense_ids: Sequence[str], graph: ToolGraph, k: int, *, targets: int = 4, hops: int = 3) -> list[str]:
    """graph-tool-call's protocol: the dense top-``targets``, every declared prerequisite up to ``hops`` hops
    (breadth first, per target in rank order), then the rest of the dense ranking; the first ``k``."""
    out = list(dict.fromkeys(dense_ids[:targets]))
    for t in dense_ids[:targets]:
        seen = {t}
        queue = deque([(t, 0)])
        while queue:
            node, depth = queue.popleft()
            if depth >= hops:
                continue
            for pre, data in graph.prerequisites(node):
                if data["origin"] != "declared" or pre in seen:
                    continue
                seen.add(pre)
                if pre not in out:
                    out.append(pre)
                queue.append((pre, depth + 1))
    out += [i for i in dense_ids if i not in out]
    return out[:k]


def bootstrap(a: Sequence[float], b: Sequence[float], *, n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``a - b`` (paired) and its 95 % bootstrap interval, in points."""
    d = 100 * (np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    if len(d) == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


# -- one dev set -----------------------------------------------------------------------------------
def run_set(
    name: str,
    data: Path,
    experiment: str,
    cache_dir: Path | None,
    toolbench_engine: Path | None,
    check: int,
) -> dict[str, Any]:
    catalog, queries, base = load_set(name, data)
    queries = [q for q in queries if q.relevant]
    cache = vectors(base, catalog, cache_dir, toolbench_engine)
    candidates_engine = Engine.build(catalog, config_with({"enabled": False}), embedding_cache=cache)
    graph = candidates_engine.stages[-1].graph  # type: ignore[attr-defined]
    t = time.perf_counter()
    cands: dict[str, list[ScoredTool]] = {q.id: candidates_engine.search(q.query, DEPTH) for q in queries}
    logger.info("%s: %d queries, candidates in %.0f s", name, len(queries), time.perf_counter() - t)
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    rankings: dict[tuple[str, int], dict[str, list[str]]] = {}
    for label, kw in variants(experiment).items():
        cfg = ExpansionConfig(**kw)
        rows: dict[str, dict[str, float]] = {}
        for q in queries:
            row: dict[str, float] = {}
            for k in (5, 10):
                ranked = [c.id for c in expand_prerequisites(cands[q.id], graph, catalog, cfg, top_k=k)[0][:k]]
                row.update(query_metrics(ranked, q.relevant, (k,)))
                rankings.setdefault((label, k), {})[q.id] = ranked
                if k == 10:
                    five = query_metrics(ranked, q.relevant, (5,))
                    row["recall@5 of top-10"] = five["recall@5"]
                    row["sufficiency@5 of top-10"] = five["sufficiency@5"]
            rows[q.id] = row
        per_query[label] = rows
    if experiment == "chains":
        dense = Engine.build(catalog, pipeline_config("dense"), embedding_cache=cache)
        rows = {}
        for q in queries:
            ids = [r.id for r in dense.search(q.query, DEPTH)]
            row = {}
            for k in (5, 10):
                row.update(query_metrics(peer_ranking(ids, graph, k), q.relevant, (k,)))
            five = query_metrics(peer_ranking(ids, graph, 10), q.relevant, (5,))
            row["recall@5 of top-10"], row["sufficiency@5 of top-10"] = five["recall@5"], five["sufficiency@5"]
            rows[q.id] = row
        per_query[PEER] = rows
    # the simulated variant equals a real search with that config
    mismatches = 0
    if check:
        engine = Engine.build(catalog, config_with(variants(experiment)[NEW]), embedding_cache=cache)
        for q in queries[:check]:
            for k in (5, 10):
                got = [r.id for r in engine.search(q.query, k)]
                mismatches += got != rankings[(NEW, k)][q.id]
    groups: dict[str, list[str]] = {"all": [q.id for q in queries]}
    if name == "bundled":
        groups["chain"] = [q.id for q in chain_queries(catalog, queries)]
    groups["single-tool"] = [q.id for q in queries if len(q.relevant) == 1]
    for q in queries:
        if q.group and q.group.startswith("depth-"):
            groups.setdefault(q.group, []).append(q.id)
    return {
        "set": name,
        "n_apis": len(catalog),
        "n_edges": len(catalog.edges),
        "groups": {g: len(ids) for g, ids in groups.items()},
        "check": {"queries": min(check, len(queries)), "mismatches": mismatches},
        "means": {
            label: {
                g: {m: round(100 * float(np.mean([rows[i][m] for i in ids])), 1) for m in rows[ids[0]]} if ids else {}
                for g, ids in groups.items()
            }
            for label, rows in per_query.items()
        },
        "intervals": _intervals(per_query, groups, experiment),
    }


def _intervals(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]], groups: Mapping[str, list[str]], experiment: str
) -> dict[str, Any]:
    pairs = [(NEW, BASE), (EVERY_K, BASE)] + ([(NEW, PEER)] if experiment == "chains" else [("+ derived", BASE)])
    metrics = ("recall@10", "sufficiency@10") if experiment == "chains" else ("recall@5", "sufficiency@5")
    out: dict[str, Any] = {}
    for a, b in pairs:
        for g, ids in groups.items():
            if not ids:
                continue
            for m in metrics:
                mean, lo, hi = bootstrap([per_query[a][i][m] for i in ids], [per_query[b][i][m] for i in ids])
                out[f"{a} - {b} | {g} | {m}"] = [round(mean, 1), round(lo, 1), round(hi, 1)]
    return out


def markdown(results: Sequence[Mapping[str, Any]], experiment: str) -> str:
    lines = []
    cols = (
        ("recall@10", "sufficiency@10", "recall@5", "sufficiency@5")
        if experiment == "chains"
        else ("recall@5", "sufficiency@5", "recall@10", "sufficiency@10", "recall@5 of top-10")
    )
    for res in results:
        lines.append(
            f"\n{res['set']} ({res['n_apis']} APIs, {res['n_edges']} edges; groups {res['groups']}; "
            f"check {res['check']})\n"
        )
        lines.append("| pipeline | group | " + " | ".join(cols) + " |")
        lines.append("|---|---|" + "---|" * len(cols))
        for label, by_group in res["means"].items():
            for g, m in by_group.items():
                if m:
                    lines.append(
                        f"| {label} | {g} | " + " | ".join(f"{m.get(c, float('nan')):.1f}" for c in cols) + " |"
                    )
        for key, (mean, lo, hi) in res["intervals"].items():
            lines.append(f"- {key}: {mean:+.1f} [{lo:+.1f}, {hi:+.1f}]")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder of the shared benchmark catalogs")
    ap.add_argument("--experiments", nargs="+", default=["chains", "single"], choices=["chains", "single"])
    ap.add_argument("--sets", nargs="+", default=None, help="dev sets (default: every set of each experiment)")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--toolbench-engine", type=Path, default=None)
    ap.add_argument("--check", type=int, default=25, help="queries per set re-run through Engine.search")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    report: dict[str, Any] = {}
    text = []
    runners: dict[str, Callable[[str], dict[str, Any]]] = {}
    for experiment in args.experiments:
        sets = args.sets or (CHAIN_SETS if experiment == "chains" else SINGLE_SETS)
        runners[experiment] = lambda s, e=experiment: run_set(  # type: ignore[misc]
            s, args.data, e, args.cache_dir, args.toolbench_engine, args.check
        )
        results = []
        for s in sets:
            results.append(runners[experiment](s))
            report[experiment] = results
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        text.append(f"\n## {experiment}\n" + markdown(results, experiment))
    if args.md is not None:
        args.md.write_text("".join(text), encoding="utf-8")
    print("".join(text))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
