"""First-stage speed on the 47k-API ToolBench corpus: the engine against the bare libraries, in the same run.

The machine is shared and noisy, so every target is a *ratio* against the bare library measured in the same
process (or, for builds, in sibling child processes) with engine and bare measurements interleaved:

- build: ``Engine.build`` (dense, flat) vs ``SentenceTransformer.encode`` of the same rendered texts (+ a bare
  ``faiss.IndexFlatIP``), each in its own child process (time and peak RSS), in ABBA order; ``--limit N``
  builds over the first N APIs only (encoding 47k texts 4x on 2 shared cores takes too long). BM25 build over
  all APIs vs bare ``bm25s`` tokenize+index the same way.
- dense search, one query at a time: ``engine.search`` on the prebuilt 47k dense engine vs the engine's own
  SentenceTransformer + a bare ``faiss.IndexFlatIP`` over the same vectors (target <= 1.2x).
- BM25 search, one query at a time: ``engine.search`` on the prebuilt BM25 engine vs bare ``bm25s`` (<= 1.2x).
- hybrid search per query (vs bare dense + bare BM25 at the fusion depth), batch throughput (32 queries per
  call), and adding 100 APIs to a built 47k engine vs encoding those 100 texts.

Per-query timings alternate engine/bare order query by query; each side's p50/p95 is taken over all
repetitions, and the ratio reported is of the medians (plus the median of per-query paired ratios).

Usage::

    python benchmarks/first_stage_speed.py --data ../shared/data --engines-dir /work/runs/engines \
        --limit 5000 --out /work/runs/bench/first_stage_speed.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("first_stage_speed")
TOP_K = 10
BATCH = 32


def _rss_mb() -> float:
    """Current resident set size (MB), from /proc (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_mb() -> float:
    """Peak RSS of this process image (VmHWM). Unlike ``ru_maxrss`` it is not inherited through fork+exec
    from a large parent (Linux keeps ``ru_maxrss`` across exec), so child builds report their own peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _peak_mb()


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pct(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "mean": float(a.mean()),
        "n": int(a.size),
    }


def _set_threads(n: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


# -- child processes: one build each (time + peak memory) -----------------------------------------
def child_build(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in a fresh process: load the model (untimed), then one timed build; report time and memory."""
    _set_threads(args.threads)
    from toolrerank_plugins.catalog import Catalog
    from toolrerank_plugins.encoders import SentenceTransformerEmbedder
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.loaders import load_catalog
    from toolrerank_plugins.loaders.jsonl import spec_from_dict
    from toolrerank_plugins.pipelines import pipeline_config

    tools_file = Path(args.data) / "toolbench" / "tools.jsonl"
    if args.limit:  # parse only the first N records (parsing all 47k is slow on a loaded machine)
        with tools_file.open(encoding="utf-8") as fh:
            specs = [
                spec_from_dict(json.loads(line), f"{tools_file}:{i + 1}") for i, line in zip(range(args.limit), fh)
            ]
        catalog = Catalog(specs, source=str(tools_file))
    else:
        catalog = load_catalog(tools_file)
    kind = args.child
    out: dict[str, Any] = {"kind": kind, "n_apis": len(catalog)}
    if kind in ("engine-dense", "bare-dense"):
        embedder = SentenceTransformerEmbedder("default", device="cpu")
        model = embedder.model  # model load is not part of either build
        model.encode(["warm up"], normalize_embeddings=True)
        cfg = pipeline_config("dense")
        from toolrerank_plugins.render import render_tool

        # The bare side gets the same texts, rendered before the clock starts (rendering is engine overhead).
        texts = [render_tool(catalog[i], cfg.render) for i in catalog.ids] if kind == "bare-dense" else None
        base_rss, base_peak = _rss_mb(), _hwm_mb()
        t = time.perf_counter()
        if kind == "engine-dense":
            Engine.build(catalog, cfg, embedder=embedder)
        else:
            import faiss

            assert texts is not None
            emb = model.encode(texts, batch_size=cfg.dense.batch_size, convert_to_numpy=True, normalize_embeddings=True)
            t_enc = time.perf_counter() - t
            index = faiss.IndexFlatIP(emb.shape[1])
            index.add(np.ascontiguousarray(emb, dtype=np.float32))
            out["encode_only_seconds"] = t_enc
    else:  # engine-bm25 / bare-bm25
        cfg = pipeline_config("bm25")
        from toolrerank_plugins.render import render_tool

        texts = [render_tool(catalog[i], cfg.render) for i in catalog.ids] if kind == "bare-bm25" else None
        base_rss, base_peak = _rss_mb(), _hwm_mb()
        t = time.perf_counter()
        if kind == "engine-bm25":
            Engine.build(catalog, cfg)
        else:
            import bm25s

            retriever = bm25s.BM25(k1=cfg.bm25.k1, b=cfg.bm25.b, method=cfg.bm25.method)
            retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    out["seconds"] = time.perf_counter() - t
    out["rss_before_mb"] = base_rss
    out["peak_rss_mb"] = _hwm_mb()
    out["peak_before_mb"] = base_peak
    out["load"] = _load()
    return out


def run_child(args: argparse.Namespace, kind: str, limit: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--data",
        args.data,
        "--limit",
        str(limit),
        "--threads",
        str(args.threads),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} failed:\n{proc.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    logger.info("child %s: %s", kind, res)
    return res


def bench_builds(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # ABBA order so a drift in machine load hits both sides alike.
    for name, (a, b), limit, reps in (
        ("dense", ("engine-dense", "bare-dense"), args.limit, args.build_repeats),
        ("bm25", ("engine-bm25", "bare-bm25"), 0, 2),
    ):
        runs: dict[str, list[dict[str, Any]]] = {a: [], b: []}
        order = [a, b, b, a] * ((reps + 1) // 2)
        for kind in order[: 2 * reps]:
            runs[kind].append(run_child(args, kind, limit))
        eng = float(np.median([r["seconds"] for r in runs[a]]))
        bare = float(np.median([r["seconds"] for r in runs[b]]))
        out[name] = {
            "n_apis": runs[a][0]["n_apis"],
            "engine_seconds_median": eng,
            "bare_seconds_median": bare,
            "ratio": eng / bare,
            "runs": runs,
        }
    return out


# -- in-process measurements on the prebuilt 47k engines -----------------------------------------
def interleaved(
    queries: Sequence[str], engine_fn: Callable[[str], Any], bare_fn: Callable[[str], Any], repeats: int
) -> dict[str, Any]:
    """Time ``engine_fn`` and ``bare_fn`` per query, alternating which goes first, ``repeats`` passes."""
    eng: list[float] = []
    bare: list[float] = []
    paired: list[float] = []
    for rep in range(repeats):
        for i, q in enumerate(queries):
            first_engine = (i + rep) % 2 == 0
            pair = {}
            for side in ("engine", "bare") if first_engine else ("bare", "engine"):
                fn = engine_fn if side == "engine" else bare_fn
                t = time.perf_counter()
                fn(q)
                pair[side] = (time.perf_counter() - t) * 1000
            eng.append(pair["engine"])
            bare.append(pair["bare"])
            paired.append(pair["engine"] / pair["bare"])
    e, b = _pct(eng), _pct(bare)
    return {
        "engine_ms": e,
        "bare_ms": b,
        "ratio_p50": e["p50"] / b["p50"],
        "ratio_p95": e["p95"] / b["p95"],
        "paired_ratio_median": float(np.median(paired)),
    }


class _Engines:
    """The 47k ToolBench engines: loaded from ``--engines-dir``, or built here with synthetic vectors.

    Exact (flat) inner-product search costs the same whatever the vectors hold, so when the prebuilt dense
    engines are missing (encoding 47k texts takes far too long on a loaded 2-core machine) the engine is
    built over the real catalog with random unit vectors seeded through ``embedding_cache``: timings are
    valid, rankings are not (nothing here measures quality). BM25 is always real.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.dir = Path(args.engines_dir)
        self.data = Path(args.data)
        self.synthetic: list[str] = []
        self._catalog: Any = None
        self._cache: dict[str, np.ndarray] | None = None

    def get(self, kind: str, embedder: Any = None) -> Any:
        from toolrerank_plugins.engine import Engine

        path = self.dir / f"toolbench-{kind}"
        if path.is_dir():
            return Engine.load(path, embedder=embedder)
        from toolrerank_plugins.loaders import load_catalog
        from toolrerank_plugins.pipelines import pipeline_config
        from toolrerank_plugins.retrieval.dense import text_key

        if self._catalog is None:
            self._catalog = load_catalog(self.data / "toolbench")
        cfg = pipeline_config(kind)
        if kind != "bm25" and self._cache is None:
            from toolrerank_plugins.render import render_tool

            keys = [text_key(render_tool(self._catalog[i], cfg.render)) for i in self._catalog.ids]
            rng = np.random.default_rng(0)
            vecs = rng.standard_normal((len(keys), 384)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            self._cache = dict(zip(keys, vecs, strict=True))
        if kind != "bm25":
            self.synthetic.append(kind)
            logger.warning("%s missing: building toolbench-%s with synthetic vectors (timing only)", path, kind)
        return Engine.build(self._catalog.copy(), cfg, embedder=embedder, embedding_cache=self._cache)


def bench_search(args: argparse.Namespace) -> dict[str, Any]:
    import bm25s
    import faiss

    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.records import ToolSpec

    _set_threads(args.threads)
    engines = _Engines(args)
    queries = [q.query for q in load_queries(Path(args.data) / "toolbench")]
    if args.queries:
        queries = queries[: args.queries]
    out: dict[str, Any] = {"n_queries": len(queries), "repeats": args.repeats}

    # dense ------------------------------------------------------------------------------------------
    t = time.perf_counter()
    rss0 = _rss_mb()
    dense = engines.get("dense")
    assert dense.dense is not None
    model = dense.dense.embedder.model  # type: ignore[attr-defined]  # the same model object for both sides
    out["dense_load"] = {"seconds": time.perf_counter() - t, "rss_delta_mb": _rss_mb() - rss0}
    index = faiss.IndexFlatIP(dense.dense.embeddings.shape[1])
    index.add(np.ascontiguousarray(dense.dense.embeddings))
    ids = dense.dense.ids
    bs = dense.config.dense.batch_size

    def bare_dense(q: str) -> list[tuple[str, float]]:
        v = model.encode([q], batch_size=bs, convert_to_numpy=True, normalize_embeddings=True)
        s, r = index.search(np.ascontiguousarray(v, dtype=np.float32), TOP_K)
        return [(ids[j], float(x)) for j, x in zip(r[0], s[0], strict=True)]

    for q in queries[:5]:  # warm-up (first-call costs)
        dense.search(q, TOP_K)
        bare_dense(q)
    same = sum([r.id for r in dense.search(q, TOP_K)] == [i for i, _ in bare_dense(q)] for q in queries[:20])
    out["dense_same_top10_of_20"] = same
    out["load_before_dense"] = _load()
    out["dense"] = interleaved(queries, lambda q: dense.search(q, TOP_K), bare_dense, args.repeats)
    logger.info("dense search: %s", {k: v for k, v in out["dense"].items()})

    # bm25 -------------------------------------------------------------------------------------------
    t = time.perf_counter()
    rss0 = _rss_mb()
    bm = engines.get("bm25")
    out["bm25_load"] = {"seconds": time.perf_counter() - t, "rss_delta_mb": _rss_mb() - rss0}
    assert bm.bm25 is not None
    c = bm.config.bm25
    texts = bm.bm25._texts
    bare_bm = bm25s.BM25(k1=c.k1, b=c.b, method=c.method)
    bare_bm.index(bm25s.tokenize(texts, stopwords=c.stopwords, show_progress=False), show_progress=False)
    bm_ids = bm.bm25._ids

    def bare_bm25(q: str) -> list[tuple[str, float]]:
        toks = bm25s.tokenize([q], stopwords=c.stopwords, show_progress=False)
        docs, scores = bare_bm.retrieve(toks, k=TOP_K, show_progress=False)
        return [(bm_ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True)]

    for q in queries[:5]:
        bm.search(q, TOP_K)
        bare_bm25(q)
    same = sum([r.id for r in bm.search(q, TOP_K)] == [i for i, s in bare_bm25(q) if s > 0] for q in queries[:20])
    out["bm25_same_top10_of_20"] = same
    out["load_before_bm25"] = _load()
    out["bm25"] = interleaved(queries, lambda q: bm.search(q, TOP_K), bare_bm25, args.repeats)
    logger.info("bm25 search: %s", out["bm25"])

    # hybrid (engine) vs bare dense + bare bm25 at the fusion depth --------------------------------------
    t = time.perf_counter()
    rss0 = _rss_mb()
    hy = engines.get("hybrid", embedder=dense.dense.embedder)
    out["hybrid_load"] = {"seconds": time.perf_counter() - t, "rss_delta_mb": _rss_mb() - rss0}
    depth = max(TOP_K, hy.config.hybrid.candidates)

    def bare_both(q: str) -> None:
        v = model.encode([q], batch_size=bs, convert_to_numpy=True, normalize_embeddings=True)
        index.search(np.ascontiguousarray(v, dtype=np.float32), depth)
        toks = bm25s.tokenize([q], stopwords=c.stopwords, show_progress=False)
        bare_bm.retrieve(toks, k=depth, show_progress=False)

    for q in queries[:5]:
        hy.search(q, TOP_K)
    out["load_before_hybrid"] = _load()
    out["hybrid"] = interleaved(queries, lambda q: hy.search(q, TOP_K), bare_both, args.repeats)
    out["hybrid"]["bare_is"] = f"bare dense + bare bm25s at depth {depth} (no fusion)"
    logger.info("hybrid search: %s", out["hybrid"])

    # batch throughput -------------------------------------------------------------------------------
    def qps(fn: Callable[[list[str]], Any]) -> float:
        t = time.perf_counter()
        for i in range(0, len(queries), BATCH):
            fn(queries[i : i + BATCH])
        return len(queries) / (time.perf_counter() - t)

    def bare_dense_batch(qs: list[str]) -> None:
        v = model.encode(qs, batch_size=bs, convert_to_numpy=True, normalize_embeddings=True)
        index.search(np.ascontiguousarray(v, dtype=np.float32), TOP_K)

    def bare_bm25_batch(qs: list[str]) -> None:
        bare_bm.retrieve(bm25s.tokenize(qs, stopwords=c.stopwords, show_progress=False), k=TOP_K, show_progress=False)

    thr: dict[str, list[float]] = {k: [] for k in ("dense", "bare_dense", "bm25", "bare_bm25", "hybrid")}
    for _ in range(args.repeats):
        thr["dense"].append(qps(lambda qs: dense.search_batch(qs, TOP_K)))
        thr["bare_dense"].append(qps(bare_dense_batch))
        thr["bare_bm25"].append(qps(bare_bm25_batch))
        thr["bm25"].append(qps(lambda qs: bm.search_batch(qs, TOP_K)))
        thr["hybrid"].append(qps(lambda qs: hy.search_batch(qs, TOP_K)))
    out["batch_qps"] = {k: float(np.median(v)) for k, v in thr.items()}
    out["batch_qps_runs"] = thr
    out["batch_size"] = BATCH
    logger.info("batch qps: %s", out["batch_qps"])

    # adding 100 APIs to the built 47k engines vs encoding those 100 texts ------------------------------
    base = [dense.catalog[i] for i in dense.catalog.ids[: args.add_n]]
    add: dict[str, list[float]] = {"encode_new": [], "dense_add": [], "bm25_add": [], "hybrid_add": []}
    for rep in range(args.add_repeats):
        new = [
            ToolSpec(
                id=f"bench-added-{rep}-{k}",
                name=s.name,
                description=f"{s.description} (variant {rep})",
                tool=s.tool,
                tool_description=s.tool_description,
                category=s.category,
                parameters=s.parameters,
                returns=s.returns,
            )
            for k, s in enumerate(base)
        ]
        texts_new = [dense.render(s) for s in new]
        t = time.perf_counter()
        model.encode(texts_new, batch_size=bs, convert_to_numpy=True, normalize_embeddings=True)
        add["encode_new"].append(time.perf_counter() - t)
        for name, eng in (("dense_add", dense), ("bm25_add", bm), ("hybrid_add", hy)):
            t = time.perf_counter()
            eng.add(new)
            add[name].append(time.perf_counter() - t)
            eng.remove([s.id for s in new])  # untimed: restore the 47k index
    out["add"] = {k: float(np.median(v)) for k, v in add.items()}
    out["add"]["n"] = args.add_n
    out["add"]["dense_ratio_vs_encode"] = out["add"]["dense_add"] / out["add"]["encode_new"]
    out["add_runs"] = add
    logger.info("add %d: %s", args.add_n, out["add"])
    out["peak_rss_mb_search_process"] = _peak_mb()
    out["synthetic_vectors"] = engines.synthetic
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--engines-dir", default="/work/runs/engines", help="holds toolbench-{bm25,dense,hybrid}")
    p.add_argument("--out", default="/work/runs/bench/first_stage_speed.json")
    p.add_argument("--limit", type=int, default=0, help="dense build over the first N APIs only (0: all 47k)")
    p.add_argument("--build-repeats", type=int, default=2, help="dense build runs per side (ABBA order)")
    p.add_argument("--repeats", type=int, default=3, help="passes over the queries for per-query timings")
    p.add_argument("--queries", type=int, default=0, help="only the first N ToolBench queries (0: all 384)")
    p.add_argument("--add-n", type=int, default=100)
    p.add_argument("--add-repeats", type=int, default=3)
    p.add_argument(
        "--threads", type=int, default=1, help="torch and faiss threads, both sides (1 copes best with a loaded CPU)"
    )
    p.add_argument("--skip-builds", action="store_true")
    p.add_argument("--skip-search", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        sys.stdout.write(json.dumps(child_build(args)) + "\n")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "argv": sys.argv,
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "load_start": _load(),
    }
    t0 = time.perf_counter()
    if not args.skip_search:
        result["search"] = bench_search(args)
    if not args.skip_builds:
        result["builds"] = bench_builds(args)
    result["load_end"] = _load()
    result["total_seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    logger.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
