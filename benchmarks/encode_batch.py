"""Encoding throughput of the bundled MiniLM by batch size: API texts (index builds) and requests (``learn``).

``DenseConfig.batch_size`` decides how many texts go through the encoder at once when an index is built, a
catalog changes or a usage log is learned. Each batch size encodes the same texts (sentence-transformers sorts
them by length first, so padding is small at any size); the sizes are interleaved over ``--rounds`` passes so a
change in the machine's load hits all of them, and the median pass is reported as texts per second and as a
ratio to ``--reference`` (64, the earlier default).

Usage::

    python benchmarks/encode_batch.py --data ../shared/data --texts 600 --rounds 3 --threads 1 2 \\
        --out runs/encode_batch.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins.encoders import SentenceTransformerEmbedder
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.render import render_tool


def texts(data: Path, n: int, seed: int) -> dict[str, list[str]]:
    """``n`` rendered ToolBench APIs and ``n`` MetaTool train requests, drawn with ``seed``."""
    rng = random.Random(seed)
    catalog = load_catalog(data / "toolbench")
    ids = list(catalog.ids)
    rng.shuffle(ids)
    requests = [q.query for q in load_queries(data / "metatool", split="train")]
    rng.shuffle(requests)
    return {"api texts (ToolBench)": [render_tool(catalog[i]) for i in ids[:n]], "requests (MetaTool)": requests[:n]}


def measure(model: Any, corpus: list[str], sizes: list[int], rounds: int) -> dict[int, float]:
    """Median texts/s per batch size over ``rounds`` interleaved passes (the order rotating per pass)."""
    model.encode(corpus[:32], batch_size=16)  # warm-up
    runs: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(rounds):
        order = sizes[r % len(sizes) :] + sizes[: r % len(sizes)]
        for b in order:
            t = time.perf_counter()
            model.encode(corpus, batch_size=b, normalize_embeddings=True)
            runs[b].append(len(corpus) / (time.perf_counter() - t))
    return {b: statistics.median(v) for b, v in runs.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, type=Path, help="folder holding toolbench/ and metatool/")
    p.add_argument("--texts", type=int, default=600, help="texts of each kind")
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    p.add_argument("--reference", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op threads to try")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    import torch

    sizes = sorted(set(args.sizes) | {args.reference})
    corpora = texts(args.data, args.texts, args.seed)
    model = SentenceTransformerEmbedder("default", device="cpu").model
    results: dict[str, Any] = {"sizes": sizes, "reference": args.reference, "runs": []}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for kind, corpus in corpora.items():
            rates = measure(model, corpus, sizes, args.rounds)
            ref = rates[args.reference]
            row = {"threads": threads, "texts": kind, "n": len(corpus), "texts_per_s": rates}
            results["runs"].append(row)
            cells = "  ".join(f"{b}: {v:.1f}/s ({v / ref:.2f}x)" for b, v in rates.items())
            print(f"threads {threads}  {kind:22s} {cells}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
