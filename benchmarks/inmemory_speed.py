"""Does the in-memory path keep its speed after the first stage became a plug-in (issue 27, "Done means")?

The same measurements run on two checkouts of the code, in the same run: ``--base`` (a folder holding the code
before the change, e.g. ``git worktree add OUT/base 98dc27d~1``) and this checkout. Each measurement runs in a
child process per checkout (the two cannot share a process: same package name), alternating A B B A over
``--rounds`` rounds, on the bundled catalog (235 APIs, 88 requests; or ``--catalog``, e.g. ToolBench's 47,427 APIs
with ``--vectors-from`` a saved engine) with its vectors encoded once and passed to both (``embedding_cache``), so
what is compared is the code around the libraries, not the encoder:

- ``build``: ``Engine.build`` of each preset from the catalog and the cached vectors (seconds);
- ``search``: p50 / p95 of ``engine.search(request, top_k=10)`` over the dev requests (``--queries``), three passes;
- ``add``/``remove``: adding 10 APIs one at a time (each encodes its one new text) and removing them again (ms a
  change, median; changes go through the first stage's change contract now, a copy and swap in memory as before).

Ratios are this checkout's median over the base's (< 1: faster now). One torch thread in every child.

    git worktree add OUT/base 98dc27d~1
    python benchmarks/inmemory_speed.py --base OUT/base --rounds 2 --out runs/bench/inmemory_speed.json
    python benchmarks/inmemory_speed.py --base OUT/base --rounds 1 --presets bm25 hybrid \
        --catalog ../shared/data/toolbench --vectors-from runs/engines/toolbench-hybrid --queries 50 \
        --out runs/bench/inmemory_speed_toolbench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PRESETS = ("bm25", "dense", "hybrid", "hybrid+tgr")

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
from toolrerank_plugins import Engine
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.records import ToolSpec

folder, cache_path, preset = sys.argv[1], sys.argv[2], sys.argv[3]
catalog = load_catalog(folder)
queries = [q.query for q in load_queries(folder) if q.split in (None, "dev")][: int(sys.argv[4])]
with np.load(cache_path) as z:
    cache = {k: z[k] for k in z.files}
cfg = pipeline_config(preset)
Engine.build(catalog, cfg, embedding_cache=dict(cache))  # warm-up: imports, model load
t = time.perf_counter()
engine = Engine.build(catalog, cfg, embedding_cache=dict(cache))
build = time.perf_counter() - t
for q in queries[:5]:
    engine.search(q, top_k=10)
ms = []
for _ in range(3):
    for q in queries:
        t = time.perf_counter()
        engine.search(q, top_k=10)
        ms.append((time.perf_counter() - t) * 1000)
ms.sort()
new = [ToolSpec(id=f"bench_copy_{i}", name=f"bench_copy_{i}", description=catalog[x].description, tool="bench")
       for i, x in enumerate(catalog.ids[:10])]
add, remove = [], []
for s in new:
    t = time.perf_counter()
    engine.add([s])
    add.append((time.perf_counter() - t) * 1000)
for s in new:
    t = time.perf_counter()
    engine.remove([s.id])
    remove.append((time.perf_counter() - t) * 1000)
print(json.dumps({"build_s": build, "p50": statistics.median(ms), "p95": ms[int(0.95 * len(ms))],
                  "add_ms": statistics.median(add), "remove_ms": statistics.median(remove)}))
"""


def child(code: Path, folder: Path, cache: Path, preset: str, queries: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    argv = [sys.executable, "-c", CHILD, str(folder), str(cache), preset, str(queries)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(code), timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{code} {preset}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the code before the change")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--catalog", type=Path, help="a catalog folder with dev queries (default: the bundled catalog)")
    ap.add_argument("--vectors-from", type=Path, help="a saved engine over --catalog whose vectors are reused")
    ap.add_argument("--queries", type=int, default=100, help="dev queries searched (three passes)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    here = HERE.parent
    folder = (args.catalog or here / "toolrerank_plugins" / "data" / "default_catalog").resolve()
    cache = args.out.resolve().with_suffix(".vectors.npz")
    if not cache.exists():
        import numpy as np

        from toolrerank_plugins import Engine, load_catalog
        from toolrerank_plugins.pipelines import pipeline_config

        if args.vectors_from:
            vectors = Engine.load(args.vectors_from).first_stage.embedding_cache()
        else:
            vectors = Engine.build(load_catalog(folder), pipeline_config("dense")).first_stage.embedding_cache()
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, **vectors)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    for r in range(args.rounds):
        for preset in args.presets:
            order = (("base", args.base), ("now", here)) if r % 2 == 0 else (("now", here), ("base", args.base))
            for name, code in (*order, *reversed(order)):  # A B B A
                res = child(code, folder, cache, preset, args.queries)
                runs.setdefault(preset, {}).setdefault(name, []).append(res)
                print(f"round {r} {preset} {name}: {res}", file=sys.stderr, flush=True)
    table: dict[str, Any] = {}
    for preset, sides in runs.items():
        row: dict[str, Any] = {}
        for metric in ("build_s", "p50", "p95", "add_ms", "remove_ms"):
            base = statistics.median(x[metric] for x in sides["base"])
            now = statistics.median(x[metric] for x in sides["now"])
            row[metric] = {"base": round(base, 3), "now": round(now, 3), "ratio": round(now / base, 2)}
        table[preset] = row
    result = {"base": str(args.base), "rounds": args.rounds, "table": table, "runs": runs,
              "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print("| preset | build s (base → now, ratio) | search p50 ms | search p95 ms | add ms | remove ms |")
    print("|---|---|---|---|---|---|")
    for preset, row in table.items():
        cells = [f"{row[m]['base']} → {row[m]['now']} ({row[m]['ratio']}×)"
                 for m in ("build_s", "p50", "p95", "add_ms", "remove_ms")]
        print(f"| {preset} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
