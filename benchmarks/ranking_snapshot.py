"""Rankings of every preset pipeline on the bundled catalog, to show a refactor changed no result.

Dumps, for each preset in ``known_pipelines()``, the top-10 ids and scores (5 decimals) of every labelled
query of the bundled catalog with the real bundled MiniLM. LLM presets run on a ``ScriptedLLM`` with a fixed
answer, so they are deterministic too. Run it on two checkouts and compare::

    python benchmarks/ranking_snapshot.py --out after.json
    PYTHONPATH=/path/to/old/checkout python benchmarks/ranking_snapshot.py --out before.json
    python benchmarks/ranking_snapshot.py --compare before.json after.json

Works on checkouts from before the CLI moved (presets then registered when the CLI parser was built).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

LLM_STAGES = ("query_generation", "qta_rewrite", "iterative_feedback")
LLM_ANSWER = "1. send an email message\n2. current weather forecast in a city\n3. log in"


def snapshot() -> dict[str, Any]:
    import toolrerank_plugins
    from toolrerank_plugins import Engine, load_catalog, load_queries
    from toolrerank_plugins.llm import register_llm
    from toolrerank_plugins.pipelines import known_pipelines, pipeline_config
    from toolrerank_plugins.testing import ScriptedLLM

    try:  # older checkouts registered most presets as a side effect of building the CLI parser
        import toolrerank_plugins.cli as cli

        cli.build_parser()
    except (ImportError, AttributeError):
        pass
    try:
        from toolrerank_plugins.catalog import default_catalog_path
    except ImportError:
        from toolrerank_plugins.testing import default_catalog_path  # type: ignore[attr-defined,no-redef]

    root = default_catalog_path()
    catalog = load_catalog(root)
    queries = [q.query for q in load_queries(root)]
    out: dict[str, Any] = {"library": str(Path(toolrerank_plugins.__file__).parent), "pipelines": {}}
    for name in known_pipelines():
        cfg = pipeline_config(name)
        if any(s.type in LLM_STAGES for s in cfg.stages):
            register_llm("default", ScriptedLLM(default=LLM_ANSWER))
        engine = Engine.build(catalog, cfg)
        out["pipelines"][name] = [
            [(r.id, round(r.score, 5)) for r in rs] for rs in engine.search_batch(queries, top_k=10)
        ]
        print(f"{name}: {len(queries)} queries", file=sys.stderr)
    return out


def compare(a_path: str, b_path: str) -> int:
    a = json.loads(Path(a_path).read_text())["pipelines"]
    b = json.loads(Path(b_path).read_text())["pipelines"]
    differing = 0
    for name in sorted(set(a) | set(b)):
        same = a.get(name) == b.get(name)
        differing += not same
        status = "identical" if same else ("missing" if name not in a or name not in b else "DIFFERENT")
        n = len(a.get(name) or b.get(name) or [])
        print(f"{name:20s} {n:4d} queries  {status}")
    print(f"{len(set(a) | set(b)) - differing} of {len(set(a) | set(b))} presets identical (ids and scores)")
    return 1 if differing else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="write the snapshot here (JSON)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("--out or --compare is required")
    Path(args.out).write_text(json.dumps(snapshot()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
