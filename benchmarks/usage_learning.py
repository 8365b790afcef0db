"""Learning from usage (issue 13): train splits as the agent's log, dev splits as the new requests.

For each dataset: the base pipeline; the same pipeline after ``engine.learn`` of an empty log (must give the
base rankings exactly); after learning 10 %, 30 % and 100 % of the log (a prefix: a log grows over time);
and after learning a poisoned log (a share of the records point at random tools). Datasets without a train
split (API-Bank, NESTFUL) are measured by K-fold cross-validation (the other folds are the log). Reports
Recall@5 and Sufficiency@5 (percent), memorised vs generalised queries (dev text identical to a log request),
query latency, and the learn time.

    python benchmarks/usage_learning.py --data ../shared/data --datasets metatool seal-tools api-bank nestful \
        --poison-seeds 5 --out usage.json
    python benchmarks/usage_learning.py --data ../shared/data --datasets toolbench --engine toolbench=ENGINE_DIR
    OMP_NUM_THREADS=2 python benchmarks/usage_learning.py --data ../shared/data --learn-timing 20000
    python benchmarks/usage_learning.py --data ../shared/data --latency metatool --limit 200

``--cache DIR`` keeps every text's vector (the bundled MiniLM's) in DIR (``vectors.npy`` + ``texts.json``) so
reruns do not re-encode; vectors are the ones the engine would compute. Results: docs/benchmarks/usage.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins import Engine
from toolrerank_plugins.encoders import SentenceTransformerEmbedder
from toolrerank_plugins.evaluation import evaluate
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import known_pipelines, pipeline_config
from toolrerank_plugins.usage import UsageRecord, memorised_split

logger = logging.getLogger("usage_learning")


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class CachedEmbedder:
    """An embedder that remembers every text's vector (on disk with ``save``): benchmark reruns skip encoding."""

    def __init__(self, inner: Any, folder: Path | None) -> None:
        self.inner = inner
        self.folder = folder
        self.vectors: dict[str, np.ndarray] = {}
        if folder is not None and (folder / "texts.json").exists():
            keys = json.loads((folder / "texts.json").read_text())
            arr = np.load(folder / "vectors.npy", allow_pickle=False)
            self.vectors = dict(zip(keys, arr))
        self.encoded = 0

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None):
        keys = [self.key(t) for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts) if k not in self.vectors}.items())
        if todo:
            new = self.inner.encode([t for _, t in todo], batch_size=batch_size, show_progress_bar=show_progress_bar)
            self.encoded += len(todo)
            for (k, _), v in zip(todo, new):
                self.vectors[k] = v
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.vectors[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        np.save(self.folder / "vectors.npy", np.stack([self.vectors[k] for k in keys]), allow_pickle=False)
        (self.folder / "texts.json").write_text(json.dumps(keys))


def fresh(base: Engine, embedder: Any) -> Engine:
    """A new engine over the base engine's catalog and index (no stage added; nothing re-encoded)."""
    return Engine.from_parts(base.catalog.copy(), base.config, base.first_stage, embedder=embedder)


def records(queries: Sequence[Any]) -> list[UsageRecord]:
    return [UsageRecord(q.query, relevant=q.relevant, calls=q.calls, id=f"log-{q.id}") for q in queries]


def poisoned(log: list[UsageRecord], ids: list[str], share: float, seed: int) -> list[UsageRecord]:
    rng = random.Random(seed)
    out = []
    for r in log:
        if rng.random() < share:
            r = UsageRecord(r.query, relevant=(rng.choice(ids),), id=r.id + "-poisoned")
        out.append(r)
    return out


def measure(engine: Engine, dev: Sequence[Any], log_texts: set[str] | None = None) -> dict[str, Any]:
    rep = evaluate(engine, dev, ks=(5,), batch_size=None)
    out = {
        "recall@5": 100 * rep.overall["recall@5"],
        "sufficiency@5": 100 * rep.overall["sufficiency@5"],
        "n": rep.overall["n"],
        "latency_ms": rep.latency_ms,
        "rankings": [(p["ranking"], p["scores"]) for p in rep.per_query],
    }
    groups = sorted({p["group"] for p in rep.per_query if p["group"]})
    if len(groups) > 1:  # e.g. MetaTool's single- and two-tool requests
        out["groups"] = {
            g: {
                m: 100 * float(np.mean([p["metrics"][m] for p in rep.per_query if p["group"] == g]))
                for m in ("recall@5", "sufficiency@5")
            }
            | {"n": sum(p["group"] == g for p in rep.per_query)}
            for g in groups
        }
    if log_texts is not None:
        split = memorised_split(rep.per_query, log_texts)
        out["memorised"] = {k: (100 * v if k != "n" else v) for k, v in split["memorised"].items()}
        out["generalised"] = {k: (100 * v if k != "n" else v) for k, v in split["generalised"].items()}
    return out


def run_split(base: Engine, emb: Any, log_qs: list[Any], dev: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"n_log": len(log_qs), "n_dev": len(dev)}
    res["base"] = measure(fresh(base, emb), dev)
    empty = fresh(base, emb)
    empty.learn([])
    res["no_log"] = measure(empty, dev)
    res["no_log_identical"] = res["no_log"]["rankings"] == res["base"]["rankings"]
    log = records(log_qs)
    texts = {r.query for r in log}
    for frac in args.fractions:
        eng = fresh(base, emb)
        n = max(1, round(frac * len(log)))
        t = time.perf_counter()
        report = eng.learn(log[:n])
        res[f"log_{int(round(100 * frac))}"] = {
            **measure(eng, dev, {r.query for r in log[:n]}),
            "learn_seconds": time.perf_counter() - t,
            "learned": report["learned"],
            "unknown_tool_ids": report["unknown_tool_ids"],
        }
    if args.poison:
        runs = []
        for seed in range(args.seed, args.seed + args.poison_seeds):
            eng = fresh(base, emb)
            eng.learn(poisoned(log, base.catalog.ids, args.poison, seed))
            runs.append(measure(eng, dev, texts))
            if seed == args.seed:
                res["poisoned"] = runs[-1]
        if len(runs) > 1:  # one poisoned log is one draw: the mean over several seeds is steadier
            res["poisoned_mean"] = {m: float(np.mean([r[m] for r in runs])) for m in ("recall@5", "sufficiency@5")} | {
                "latency_ms": {"p50": float(np.mean([r["latency_ms"]["p50"] for r in runs]))},
                "seeds": len(runs),
            }
            res["poisoned_mean"]["per_seed_recall@5"] = [r["recall@5"] for r in runs]
    return res


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Weighted means of K folds' metrics (by number of dev queries)."""
    total = sum(p["n_dev"] for p in parts)
    out: dict[str, Any] = {"n_log": parts[0]["n_log"], "n_dev": total}
    out["no_log_identical"] = all(p["no_log_identical"] for p in parts)
    for key, val in parts[0].items():
        if not isinstance(val, dict):
            continue
        merged: dict[str, Any] = {}
        for m in ("recall@5", "sufficiency@5"):
            merged[m] = sum(p[key][m] * p["n_dev"] for p in parts) / total
        merged["latency_ms"] = {"p50": float(np.mean([p[key]["latency_ms"]["p50"] for p in parts]))}
        if "per_seed_recall@5" in val:
            merged["per_seed_recall@5"] = [
                sum(p[key]["per_seed_recall@5"][j] * p["n_dev"] for p in parts) / total
                for j in range(len(val["per_seed_recall@5"]))
            ]
        for sub in ("memorised", "generalised"):
            if sub in val:
                n = sum(p[key][sub]["n"] for p in parts)
                merged[sub] = {"n": n}
                for m in ("recall@5", "sufficiency@5"):
                    merged[sub][m] = (
                        sum(p[key][sub].get(m, 0.0) * p[key][sub]["n"] for p in parts) / n if n else float("nan")
                    )
        out[key] = merged
    return out


def run_dataset(name: str, args: argparse.Namespace, emb: Any) -> dict[str, Any]:
    folder = Path(args.data) / name
    engines = dict(e.split("=", 1) for e in args.engine or [])
    t = time.perf_counter()
    if name in engines:  # a saved engine's vectors (e.g. ToolBench's 47k APIs), the --pipeline over them
        cache = Engine.load(engines[name], embedder=emb, verify=False).first_stage.embedding_cache()
        base = Engine.build(load_catalog(folder), pipeline_config(args.pipeline), embedder=emb, embedding_cache=cache)
    else:
        base = Engine.build(load_catalog(folder), pipeline_config(args.pipeline), embedder=emb)
    say(f"{name}: engine ready in {time.perf_counter() - t:.1f}s ({base!r})")
    train = load_queries(folder, split="train")
    dev = load_queries(folder, split="dev")
    if args.limit:
        dev = dev[: args.limit]
    if train:
        res = run_split(base, emb, train, dev, args)
        res["protocol"] = "train -> dev"
    else:
        qs = load_queries(folder)
        order = list(range(len(qs)))
        random.Random(args.seed).shuffle(order)
        folds = [order[k :: args.folds] for k in range(args.folds)]
        parts = []
        for k in range(args.folds):
            log_qs = [qs[i] for j, f in enumerate(folds) if j != k for i in sorted(f)]
            parts.append(run_split(base, emb, log_qs, [qs[i] for i in sorted(folds[k])], args))
        res = merge(parts)
        res["protocol"] = f"{args.folds}-fold CV"
    for v in res.values():
        if isinstance(v, dict):
            v.pop("rankings", None)
    return res


def timing_log(folder: Path, n: int, seed: int = 0) -> list[UsageRecord]:
    """``--learn-timing``'s log: the first ``n`` train requests of ``folder``, then (past those) two-request
    messages made of random pairs of them."""
    train = load_queries(folder, split="train")
    log = records(train)[:n]
    rng = random.Random(seed)
    while len(log) < n:
        a, b = rng.sample(train, 2)
        log.append(UsageRecord(f"{a.query} {b.query}", relevant=(*a.relevant, *b.relevant), id=f"pair-{len(log)}"))
    return log


def learn_timing(args: argparse.Namespace) -> dict[str, Any]:
    """``learn`` of N MetaTool records into a fresh engine (``--pipeline``), every request encoded by MiniLM:
    the train requests, then (past 19,440) two-request messages made of pairs of train requests."""
    folder = Path(args.data) / "metatool"
    emb = SentenceTransformerEmbedder("default", device="cpu", torch_threads=args.threads)
    base = Engine.build(load_catalog(folder), pipeline_config(args.pipeline), embedder=emb)
    log = timing_log(folder, args.learn_timing, args.seed)
    t = time.perf_counter()
    report = base.learn(log)
    secs = time.perf_counter() - t
    return {
        "records": len(log),
        "seconds": secs,
        "encode_seconds": report["encode_seconds"],
        "calibrate_seconds": report.get("calibrate_seconds"),
        "report": report,
        "torch_threads": args.threads,
        "load_before": os.getloadavg(),
    }


def latency(args: argparse.Namespace) -> dict[str, Any]:
    """Query latency of the base pipeline and of the same pipeline with the whole train log learned, on
    ``--limit`` dev queries of ``--latency`` (every n-th, so multi-request messages are in), every query text
    (and its requests) encoded for real during its search, as in production; only the log's vectors may come
    from ``--cache``."""
    folder = Path(args.data) / args.latency
    emb = CachedEmbedder(SentenceTransformerEmbedder("default", device="cpu"), Path(args.cache) if args.cache else None)
    dev = load_queries(folder, split="dev")
    limit = args.limit or 200
    dev = dev[:: max(1, len(dev) // limit)][:limit]
    base = Engine.build(load_catalog(folder), pipeline_config(args.pipeline), embedder=emb)
    learned = fresh(base, emb)
    report = learned.learn(records(load_queries(folder, split="train")))
    out: dict[str, Any] = {}
    for _ in range(2):  # alternate, so load changes hit both alike
        for name, eng in (("base", base), ("log_100", learned)):
            emb.vectors.clear()  # nothing a search encodes comes from the cache
            rep = evaluate(eng, dev, ks=(5,), batch_size=None, warmup=0)
            out.setdefault(name, []).append(rep.latency_ms)
    res: dict[str, Any] = {
        k: {"p50": float(np.mean([r["p50"] for r in v])), "mean": float(np.mean([r["mean"] for r in v]))}
        for k, v in out.items()
    }
    res["ratio_p50"] = res["log_100"]["p50"] / res["base"]["p50"]
    res["ratio_mean"] = res["log_100"]["mean"] / res["base"]["mean"]
    res["queries"] = len(dev)
    res["memory_size"] = report["memory_size"]
    res["load_before"] = os.getloadavg()
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder holding the benchmark folders (../shared/data)")
    p.add_argument("--datasets", nargs="*", default=["metatool", "seal-tools", "toolbench", "api-bank", "nestful"])
    p.add_argument("--pipeline", default="default", help=f"base pipeline (one of {', '.join(known_pipelines())})")
    p.add_argument("--engine", action="append", help="NAME=SAVED_ENGINE_DIR (e.g. toolbench's 47k index)")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    p.add_argument("--poison", type=float, default=0.1, help="share of log records pointing at random tools")
    p.add_argument("--poison-seeds", type=int, default=1, help="poisoned logs drawn (seeds --seed, --seed+1, ...)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N dev queries")
    p.add_argument("--cache", help="folder keeping text vectors between runs")
    p.add_argument("--learn-timing", type=int, default=0, help="time learn() of N MetaTool records and exit")
    p.add_argument("--threads", type=int, default=2, help="torch threads for --learn-timing")
    p.add_argument("--latency", help="measure query latency on this dataset (base vs whole train log) and exit")
    p.add_argument("--out", help="write the results as JSON")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.latency:
        res = latency(args)
        say(json.dumps(res, indent=1))
        return 0
    if args.learn_timing:
        res = learn_timing(args)
        say(json.dumps(res, indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1))
        return 0
    emb = CachedEmbedder(SentenceTransformerEmbedder("default", device="cpu"), Path(args.cache) if args.cache else None)
    results: dict[str, Any] = {"pipeline": args.pipeline, "datasets": {}}
    for name in args.datasets:
        res = run_dataset(name, args, emb)
        emb.save()
        results["datasets"][name] = res
        say(f"{name} ({res['protocol']}, {res['n_log']} log records, {res['n_dev']} new requests)")
        say(f"  no log identical to base: {res['no_log_identical']}")
        for key, val in res.items():
            if isinstance(val, dict):
                extra = ""
                if "generalised" in val:
                    extra = (
                        f"  [memorised n={val['memorised']['n']}, generalised n={val['generalised']['n']}: "
                        f"R@5 {val['generalised'].get('recall@5', float('nan')):.1f}]"
                    )
                say(
                    f"  {key:<10} R@5 {val['recall@5']:5.1f}  S@5 {val['sufficiency@5']:5.1f}  "
                    f"p50 {val['latency_ms']['p50']:.1f} ms{extra}"
                )
                for g, gv in val.get("groups", {}).items():
                    say(f"    {g:<8} n={gv['n']}: R@5 {gv['recall@5']:5.1f}  S@5 {gv['sufficiency@5']:5.1f}")
                if "per_seed_recall@5" in val:
                    say(f"    per seed R@5: {', '.join(f'{x:.1f}' for x in val['per_seed_recall@5'])}")
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
