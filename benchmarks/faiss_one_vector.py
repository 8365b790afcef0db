"""A single query vector on faiss: one OpenMP thread against faiss's default team, wall time and CPU time.

faiss opens a team of every OpenMP thread for a search, even for one query vector, and libgomp's threads spin
for a while after the call (its default wait policy). This script times searches of one vector (and of three,
the batch a multi-request message makes without the spare thread) over a flat inner-product index, with a pause
after each (as between an agent's searches), and reads the process's CPU time: what the spinning costs the other
cores. ``DenseRetriever.search_vectors`` searches one vector on one thread because of it (docs/benchmarks.md, "The
default at hybrid's cost?"). ``--index flat flat-fp16`` times the index of ``DenseConfig(index="flat-fp16")`` (the
vectors as 16-bit floats) beside the flat one, in the same run (docs/benchmarks.md, "Vectors as 16-bit floats");
``flat-auto`` the flat index searched as ``DenseConfig(scan="auto")`` searches it (torch loaded): the exact top k
ordered by score then row, its candidates from one float32 matrix product for several vectors, from faiss for one
(docs/benchmarks.md, "One pass for a message and its requests"); ``flat-bfloat16`` as ``scan="bfloat16"`` does:
the candidates from one bfloat16 product, one vector's too (docs/benchmarks.md, "Half the bytes per scan").

Usage::

    python benchmarks/faiss_one_vector.py --vectors 47427 --dim 384 --searches 200
    python benchmarks/faiss_one_vector.py --engine runs/engines/toolbench-hybrid   # a saved engine's vectors
    python benchmarks/faiss_one_vector.py --engine runs/engines/toolbench-hybrid --index flat flat-fp16
    python benchmarks/faiss_one_vector.py --engine runs/engines/toolbench-hybrid --index flat flat-auto flat-bfloat16
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _index(kind: str, dim: int) -> Any:
    """The faiss index ``DenseConfig(index=kind)`` builds (flat or flat-fp16; flat-auto and flat-bfloat16: flat)."""
    from toolrerank_plugins.retrieval.dense import DenseConfig, faiss_index

    return faiss_index(DenseConfig(index="flat-fp16" if kind == "flat-fp16" else "flat"), dim)


def _searcher(kind: str, index: Any) -> Any:
    """``search(vectors, k, threads)`` as the dense retriever runs it for ``kind``."""
    import faiss

    if kind in ("flat-auto", "flat-bfloat16"):
        import torch  # noqa: F401  (the matrix products run only where torch is loaded)

        from toolrerank_plugins.retrieval.dense import exact_search

        bf16 = kind == "flat-bfloat16"
        return lambda x, k, threads: exact_search(index, x, k, threads, bfloat16=bf16)

    def search(x: np.ndarray, k: int, threads: int) -> Any:
        faiss.omp_set_num_threads(threads)
        return index.search(x, k)

    return search


def measure(
    raw: np.ndarray, *, searches: int, pause_ms: float, k: int = 100, kinds: Sequence[str] = ("flat",)
) -> list[dict[str, Any]]:
    import faiss

    indexes = {kind: _index(kind, raw.shape[1]) for kind in kinds}
    for index in indexes.values():
        index.add(raw)
    searchers = {kind: _searcher(kind, index) for kind, index in indexes.items()}
    rng = np.random.default_rng(0)
    queries = raw[rng.integers(0, len(raw), 3 * searches)]
    most = faiss.omp_get_max_threads()
    rows = []
    for nq in (1, 3):
        for threads in sorted({1, most}):
            for search in searchers.values():
                search(queries[:nq], k, threads)  # warm-up
            walls: dict[str, list[float]] = {kind: [] for kind in indexes}
            cpu = dict.fromkeys(indexes, 0.0)
            for i in range(searches):
                for kind, search in searchers.items():  # the kinds interleaved: the machine's load reaches each alike
                    cpu0, t = _cpu(), time.perf_counter()
                    search(queries[i * nq : (i + 1) * nq], k, threads)
                    walls[kind].append((time.perf_counter() - t) * 1000)
                    time.sleep(pause_ms / 1000)  # the spinning after a search counts to it
                    cpu[kind] += _cpu() - cpu0
            for kind in indexes:
                rows.append(
                    {
                        "index": kind,
                        "vectors_per_search": nq,
                        "threads": threads,
                        "search_p50_ms": round(float(np.percentile(walls[kind], 50)), 2),
                        "cpu_ms_per_search": round(cpu[kind] * 1000 / searches, 2),
                    }
                )
    faiss.omp_set_num_threads(most)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", type=Path, help="a saved engine folder: its dense vectors (else random ones)")
    ap.add_argument("--vectors", type=int, default=47_427)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--pause-ms", type=float, default=5.0, help="an untimed pause after each search")
    ap.add_argument(
        "--index",
        nargs="+",
        choices=("flat", "flat-fp16", "flat-auto", "flat-bfloat16"),
        default=["flat"],
        help="the indexes timed",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.engine:
        from toolrerank_plugins.engine import Engine

        raw = np.stack(list(Engine.load(args.engine).first_stage.embedding_cache().values())).astype(np.float32)
    else:
        raw = np.random.default_rng(0).standard_normal((args.vectors, args.dim)).astype(np.float32)
        raw /= np.linalg.norm(raw, axis=1, keepdims=True)
    rows = measure(np.ascontiguousarray(raw), searches=args.searches, pause_ms=args.pause_ms, kinds=args.index)
    for row in rows:
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
