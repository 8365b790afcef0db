"""Search latency by intra-op thread setting, on an idle machine and beside a torch neighbour (issue 28, item 1).

For every non-LLM preset, each setting runs in its own process over the bundled catalog (its 88 labelled
queries, one ``engine.search`` per query, two passes after a warm-up), and reports p50 / p95 of the per-query
latency:

- ``default``: the library's default (threads chosen per encode call: one for a search);
- ``omp1``: ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1`` for the whole process (the hand-picked fix of the issue);
- ``threads2``: ``DenseConfig.torch_threads=2``, every call on two threads (what torch's own default gave
  before, on a 2-core machine).

The ``neighbour`` condition starts a second process that multiplies 1024x1024 torch matrices on two threads for
the whole run (the load of another model-serving process on the same cores). Settings are run interleaved,
``--rounds`` times; a setting's figure is its median over rounds. The table states ``default`` against the
best of the hand-picked settings in the same condition and round (targets: ≤ 1.3x at p50 and at p95).

Usage::

    python benchmarks/threads.py --out runs/bench/threads.json --md runs/bench/threads.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SETTINGS = ("default", "omp1", "threads2")
HAND_PICKED = ("omp1", "threads2")
PRESETS = (
    "default",
    "default-fast",
    "hybrid",
    "dense",
    "bm25",
    "dense-hnsw",
    "hybrid+tgr",
    "hybrid-hierarchy",
    "dense-hierarchy",
    "bm25-hierarchy",
)
NEIGHBOUR = (
    "import torch\n"
    "torch.set_num_threads(2)\n"
    "a = torch.randn(1024, 1024)\n"
    "while True:\n"
    "    a = torch.nn.functional.normalize(a @ a, dim=1)\n"
)


def worker(preset: str, setting: str, cache_file: Path, passes: int) -> dict[str, Any]:
    """One process: build ``preset`` over the bundled catalog (vectors from ``cache_file``), time each query."""
    import numpy as np

    from toolrerank_plugins import Engine, default_catalog_path, load_catalog
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.pipelines import pipeline_config

    config = pipeline_config(preset)
    if setting == "threads2":
        config = pipeline_config(preset, dense={**config.dense.model_dump(), "torch_threads": 2})
    catalog = load_catalog(default_catalog_path())
    with np.load(cache_file) as data:
        cache = {k: data[k] for k in data.files}
    engine = Engine.build(catalog, config, embedding_cache=cache)
    queries = [q.query for q in load_queries(default_catalog_path())]
    for q in queries[:5]:
        engine.search(q, top_k=5)  # warm-up: models loaded, caches filled
    times = []
    for _ in range(passes):
        for q in queries:
            t = time.perf_counter()
            engine.search(q, top_k=5)
            times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {
        "p50": statistics.median(times),
        "p95": times[min(len(times) - 1, int(0.95 * len(times)))],
        "n": len(times),
    }


def _run_worker(preset: str, setting: str, cache_file: Path, passes: int) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)
    if setting == "omp1":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", preset, setting, str(cache_file), str(passes)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{preset}/{setting} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cache(path: Path) -> None:
    import numpy as np

    from toolrerank_plugins import Engine, default_catalog_path, load_catalog
    from toolrerank_plugins.pipelines import pipeline_config

    engine = Engine.build(load_catalog(default_catalog_path()), pipeline_config("dense"))
    np.savez(path, **engine.first_stage.embedding_cache())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--conditions", nargs="+", default=["idle", "neighbour"], choices=["idle", "neighbour"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--passes", type=int, default=2, help="passes over the 88 queries per run")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="threads-"))
    cache_file = tmp / "vectors.npz"
    _cache(cache_file)
    runs: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    started = time.time()
    for condition in args.conditions:
        neighbour = None
        if condition == "neighbour":
            neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], env={**os.environ})
            time.sleep(2)
        try:
            for r in range(args.rounds):
                for preset in args.presets:
                    for setting in SETTINGS:
                        res = _run_worker(preset, setting, cache_file, args.passes)
                        runs.setdefault(condition, {}).setdefault(preset, {}).setdefault(setting, []).append(res)
                        print(f"[{time.time() - started:6.0f}s] {condition} round {r + 1} {preset:>16} {setting:>9}: "
                              f"p50 {res['p50']:7.1f} ms  p95 {res['p95']:7.1f} ms", flush=True)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
    table = summarise(runs)
    out = {"runs": runs, "summary": table, "cpu_count": os.cpu_count(), "rounds": args.rounds, "passes": args.passes}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    md = markdown(table)
    print(md)
    if args.md:
        args.md.write_text(md)


def summarise(runs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for condition, presets in runs.items():
        for preset, settings in presets.items():
            row: dict[str, Any] = {"condition": condition, "preset": preset}
            for stat in ("p50", "p95"):
                med = {s: statistics.median(r[stat] for r in settings[s]) for s in settings}
                best = min(HAND_PICKED, key=lambda s: med[s])
                row[stat] = {**{s: round(v, 2) for s, v in med.items()}, "best": best,
                             "ratio": round(med["default"] / med[best], 3)}
            rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| condition | preset | default p50 | omp1 p50 | threads2 p50 | ratio p50 | default p95 | omp1 p95 | "
        "threads2 p95 | ratio p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["p50"], r["p95"]
        lines.append(
            f"| {r['condition']} | {r['preset']} | {a['default']:.1f} | {a['omp1']:.1f} | {a['threads2']:.1f} | "
            f"{a['ratio']:.2f} | {b['default']:.1f} | {b['omp1']:.1f} | {b['threads2']:.1f} | {b['ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5]))))
    else:
        main()
