"""How to get the whole message's vector in ``multi_intent`` without encoding it twice (train splits only).

For messages that split into several requests, the merged ranking (RRF k=1 of the whole message's ranking and
each request's) is computed with the dense retriever alone, with the whole message's vector taken three ways:

- ``apart``: the message encoded on its own, as well as each request (two encodings of every word);
- ``pooled``: the mean of the requests' vectors weighted by their lengths (each word encoded once) — what
  ``MultiIntentConfig.pooled`` does;
- ``late``: "late chunking": the message encoded once, each request's vector pooled from the message's token
  embeddings over the request's span (one encoding; also tried for the requests' own vectors).

Reports Recall@5 over the sampled *train* queries (messages with one request count with the whole-message
ranking). Usage::

    python benchmarks/multi_intent_pooling.py --data ../shared/data --datasets seal-tools metatool --limit 1500 \\
        --cache-dir runs/emb
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from default_pipeline import _cache  # sibling script (benchmarks/ is on sys.path when run)

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.rerank.intents import split_requests


def _merge(rankings: Sequence[Sequence[str]]) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, t in enumerate(ranking, start=1):
            scores[t] = scores.get(t, 0.0) + 1.0 / (1 + rank)
    return sorted(scores, key=lambda t: -scores[t])


def _spans(text: str, parts: Sequence[str]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for p in parts:
        i = text.find(p, pos)
        i = text.find(p) if i < 0 else i
        out.append((i, i + len(p)))
        pos = i + len(p)
    return out


def run(data: Path, ds: str, limit: int, seed: int, cache_dir: Path | None = None) -> dict[str, float]:
    import torch

    catalog = load_catalog(data / ds)
    queries = [q for q in load_queries(data / ds) if q.split == "train"]
    order = np.random.default_rng(seed).permutation(len(queries))[:limit]
    queries = [queries[i] for i in order]
    engine = Engine.build(catalog, pipeline_config("dense"), embedding_cache=_cache(cache_dir, ds))
    dense = engine.first_stage
    encoder = dense.encoder
    if encoder is None:
        raise SystemExit("the dense pipeline has no encoder")
    emb, ids = dense.embeddings_for(dense.ids), dense.ids
    model = encoder.model  # type: ignore[attr-defined]
    tok = model.tokenizer

    def rank(v: np.ndarray) -> list[str]:
        return [ids[i] for i in np.argsort(-(emb @ v))[:50]]

    def late(text: str, spans: Sequence[tuple[int, int]]) -> np.ndarray:
        feats = tok([text], return_offsets_mapping=True, truncation=True, max_length=model.max_seq_length)
        offsets = np.asarray(feats.pop("offset_mapping")[0])
        feats = {k: torch.tensor(v) for k, v in feats.items()}
        with torch.inference_mode():
            tokens = model.forward(feats)["token_embeddings"][0].numpy()
        out = []
        for s, e in spans:
            m = (offsets[:, 0] < e) & (offsets[:, 1] > s) & (offsets[:, 1] > offsets[:, 0])
            v = tokens[m].mean(0) if m.any() else tokens.mean(0)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out)

    recall: dict[str, list[float]] = {"whole only": [], "apart": [], "pooled": [], "late": []}
    multi = 0
    for q in queries:
        rel = set(q.relevant)

        def r5(ranking: Sequence[str], rel: set[str] = rel) -> float:
            return len(rel & set(ranking[:5])) / len(rel)

        whole = rank(encoder.encode([q.query])[0])
        recall["whole only"].append(r5(whole))
        requests = split_requests(q.query)
        if len(requests) < 2:
            for k in ("apart", "pooled", "late"):
                recall[k].append(r5(whole))
            continue
        multi += 1
        vectors = encoder.encode(requests)
        per_request = [rank(v) for v in vectors]
        recall["apart"].append(r5(_merge([whole, *per_request])))
        lengths = np.asarray([len(r) for r in requests], dtype=np.float32)
        mean = (vectors * lengths[:, None]).sum(axis=0)
        recall["pooled"].append(r5(_merge([rank(mean / np.linalg.norm(mean)), *per_request])))
        recall["late"].append(r5(_merge([whole, *(rank(v) for v in late(q.query, _spans(q.query, requests)))])))
    print(f"{ds}: {len(queries)} train queries, {multi} with several requests")
    return {k: round(100 * float(np.mean(v)), 1) for k, v in recall.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", default=["seal-tools", "metatool"])
    ap.add_argument("--limit", type=int, default=1500, help="train queries sampled per dataset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, help="catalog vectors kept by default_pipeline.py --cache-dir")
    args = ap.parse_args(argv)
    for ds in args.datasets:
        print(ds, run(args.data, ds, args.limit, args.seed, args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
