"""A search's encoding: a message and its requests packed into one sequence vs sentence-transformers' padded calls.

The ``default`` pipeline encodes each message and the requests ``multi_intent`` splits it into. Bare
sentence-transformers (``SentenceTransformer.encode``, what the dense first stage called before) needs two calls
for that (one padded batch would pad every request to the message's length); ``SentenceTransformerEmbedder.encode``
now packs a short call into one sequence with a block-diagonal attention mask (``encoders._Packer``). For every
dev message of ``--dataset`` this times, interleaved over ``--rounds`` passes (the order alternating per message):

- ``padded, 2 calls``: bare ``model.encode([message])`` + ``model.encode(requests)``;
- ``packed, 1 call``: ``embedder.encode([message, *requests])``;
- and a message alone both ways (what ``hybrid`` encodes per search).

It reports p50/mean milliseconds, the ratio of the padded p50 to the packed one, and the largest absolute
difference between the vectors.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/encode_packed.py --data ../shared/data --threads 1 2 --out runs/packed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.encoders import SentenceTransformerEmbedder
from toolrerank_plugins.loaders import load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.rerank.intents import MultiIntentConfig, MultiIntentStage


def messages(data: Path, dataset: str) -> list[list[str]]:
    """Each dev message followed by its requests as the default pipeline splits them (none if it is one request)."""
    params = next(s for s in pipeline_config("default").stages if s.type == "multi_intent").params
    stage = MultiIntentStage(MultiIntentConfig.model_validate(params))
    out = []
    for q in load_queries(data / dataset, split="dev"):
        parts = stage.query_parts(q.query)  # what the engine hands the first stage with the message
        out.append([q.query, *(parts.parts if parts is not None else ())])
    return out


def measure(embedder: SentenceTransformerEmbedder, texts: list[list[str]], rounds: int) -> dict[str, Any]:
    model = embedder.model
    assert embedder.packs_texts, "this encoder does not pack"

    def padded(t: list[str]) -> np.ndarray:
        a = model.encode(t[:1], normalize_embeddings=True, convert_to_numpy=True)
        if len(t) == 1:
            return a
        return np.vstack([a, model.encode(t[1:], normalize_embeddings=True, convert_to_numpy=True)])

    runs: dict[str, list[float]] = {k: [] for k in ("padded", "packed", "padded_one", "packed_one")}
    diff = 0.0
    for t in texts[:5]:  # warm-up
        padded(t), embedder.encode(t)
    for r in range(rounds):
        for i, t in enumerate(texts):
            order: list[tuple[str, Callable[[list[str]], np.ndarray], list[str]]] = [
                ("padded", padded, t),
                ("packed", embedder.encode, t),
                ("padded_one", padded, t[:1]),
                ("packed_one", embedder.encode, t[:1]),
            ]
            if (i + r) % 2:
                order.reverse()
            out = {}
            for name, fn, arg in order:
                start = time.perf_counter()
                out[name] = fn(arg)
                runs[name].append(time.perf_counter() - start)
            diff = max(diff, float(np.abs(out["padded"] - out["packed"]).max()))
    p50 = {k: 1e3 * statistics.median(v) for k, v in runs.items()}
    return {
        "messages": len(texts),
        "texts_per_message": round(statistics.mean(len(t) for t in texts), 2),
        "rounds": rounds,
        **{f"{k}_p50_ms": round(v, 2) for k, v in p50.items()},
        **{f"{k}_mean_ms": round(1e3 * statistics.mean(v), 2) for k, v in runs.items()},
        "ratio_p50": round(p50["padded"] / p50["packed"], 3),
        "ratio_one_p50": round(p50["padded_one"] / p50["packed_one"], 3),
        "max_abs_diff": diff,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--datasets", nargs="+", default=["toolbench"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    import torch

    embedder = SentenceTransformerEmbedder("default", device="cpu")
    results: dict[str, Any] = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        # every call on this many threads (the embedder otherwise picks a short call's threads itself, by speed)
        embedder.torch_threads = threads
        for ds in args.datasets:
            key = f"{ds}, {threads} thread{'s' if threads > 1 else ''}"
            results[key] = measure(embedder, messages(args.data, ds), args.rounds)
            print(key, json.dumps(results[key]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
