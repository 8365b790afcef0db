"""Search over real third-party OpenAPI / Swagger specs: where does the obvious operation rank?

The specs are not in this repository (they belong to their vendors); pass their files. The queries are ours,
in ``benchmarks/openapi_queries.json``, keyed by each spec's ``info.title`` and written before any ranking was
looked at: each names the operationId(s) we consider the obvious answer. For every spec the script loads the
file with ``from_openapi``, builds an engine with the recommended ``default`` pipeline and prints, per query,
the best rank of an expected operation (``-`` when it is not in the first ``--depth`` results).

To compare two versions of the loader, run this same script with each version on ``PYTHONPATH`` (a
``git worktree`` of each commit), write ``--out`` JSON files and join them with ``--compare``::

    git worktree add /tmp/before <commit>^ && git worktree add /tmp/after <commit>
    PYTHONPATH=/tmp/before python benchmarks/openapi_search.py SPEC... --out before.json
    PYTHONPATH=/tmp/after python benchmarks/openapi_search.py SPEC... --out after.json
    python benchmarks/openapi_search.py --compare before.json after.json --labels before after

(docs/benchmarks.md, "OpenAPI specs from the wild", has the exact specs, commits and results.)
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "openapi_queries.json"


def _commit(module_file: str) -> str:
    """The git commit of the checkout the library was imported from (``?`` outside git)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(module_file).parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(Path(module_file).parent), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def measure(spec_path: Path, queries: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.loaders import from_openapi
    from toolrerank_plugins.pipelines import pipeline_config

    catalog = from_openapi(spec_path)
    by_name: dict[str, list[str]] = {}
    for spec in catalog:
        by_name.setdefault(spec.name, []).append(spec.id)
    empty = sum(1 for spec in catalog if not spec.description.strip())
    t = time.perf_counter()
    engine = Engine.build(catalog, pipeline_config("default"))
    build_s = time.perf_counter() - t
    rows = []
    for q in queries:
        missing = [name for name in q["expected"] if name not in by_name]
        if missing:
            raise SystemExit(f"{spec_path}: query {q['query']!r} expects unknown operations {missing}")
        wanted = {i for name in q["expected"] for i in by_name[name]}
        hits = engine.search(q["query"], top_k=depth)
        rank = next((h.rank for h in hits if h.id in wanted), None)
        rows.append({"query": q["query"], "expected": q["expected"], "rank": rank, "top1": hits[0].tool.name})
    return {"apis": len(catalog), "empty_descriptions": empty, "build_s": round(build_s, 1), "queries": rows}


def _summary(rows: list[dict[str, Any]]) -> str:
    ranks = [r["rank"] for r in rows]
    top1 = sum(1 for r in ranks if r == 1)
    top5 = sum(1 for r in ranks if r is not None and r <= 5)
    mrr = sum(1 / r for r in ranks if r) / len(ranks)
    return f"top-1 {top1}/{len(ranks)}, top-5 {top5}/{len(ranks)}, MRR {mrr:.3f}"


def run(args: argparse.Namespace) -> None:
    import toolrerank_plugins

    logging.basicConfig(level=logging.ERROR)  # the loaders' warnings about specs we did not write are noise here
    table = json.loads(QUERIES.read_text(encoding="utf-8"))
    result: dict[str, Any] = {"library": toolrerank_plugins.__file__, "commit": _commit(toolrerank_plugins.__file__)}
    result["specs"] = {}
    for path in args.specs:
        title = json.loads(Path(path).read_text(encoding="utf-8"))["info"]["title"] if path.suffix == ".json" else None
        if title is None:
            import yaml

            title = yaml.safe_load(Path(path).read_text(encoding="utf-8"))["info"]["title"]
        if title not in table:
            raise SystemExit(f"{path}: no queries for info.title {title!r} in {QUERIES.name}")
        res = measure(path, table[title], args.depth)
        res["file"] = path.name
        result["specs"][title] = res
        print(
            f"== {title} ({path.name}): {res['apis']} operations, {res['empty_descriptions']} without text; "
            f"built in {res['build_s']}s; library at {result['commit']}"
        )
        for r in res["queries"]:
            shown = "-" if r["rank"] is None else r["rank"]
            print(f"  {shown!s:>3}  {r['query']}  -> {'/'.join(r['expected'])}  (first: {r['top1']})")
        print("  " + _summary(res["queries"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")


def compare(paths: list[Path], labels: list[str] | None) -> None:
    """A markdown table of several runs' ranks, query by query (the first run's specs and queries)."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    names = labels or [r["commit"] for r in runs]
    if len(names) != len(runs):
        raise SystemExit(f"--labels gives {len(names)} names for {len(runs)} runs")
    print("| spec | query | obvious operation | " + " | ".join(f"rank: {n}" for n in names) + " |")
    print("|---|---|---|" + "---:|" * len(runs))
    for title, res in runs[0]["specs"].items():
        ranks = [{r["query"]: r["rank"] for r in run["specs"][title]["queries"]} for run in runs]
        for r in res["queries"]:
            cells = ["-" if rank[r["query"]] is None else str(rank[r["query"]]) for rank in ranks]
            print(f"| {title} | {r['query']} | {' / '.join(r['expected'])} | {' | '.join(cells)} |")
    print()
    for title in runs[0]["specs"]:
        parts = [f"{n}: {_summary(run['specs'][title]['queries'])}" for n, run in zip(names, runs)]
        print(f"- {title}: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("specs", nargs="*", type=Path, help="OpenAPI / Swagger files (JSON or YAML)")
    p.add_argument("--depth", type=int, default=50, help="ranks looked at (default 50)")
    p.add_argument("--out", type=Path, help="write the ranks as JSON")
    p.add_argument("--compare", nargs="+", type=Path, metavar="RUN", help="join --out files (two or more)")
    p.add_argument("--labels", nargs="+", help="a column name per --compare file (default: their commits)")
    args = p.parse_args(argv)
    if args.compare:
        compare(args.compare, args.labels)
    elif args.specs:
        run(args)
    else:
        p.error("give spec files, or --compare RUN RUN ...")


if __name__ == "__main__":
    sys.exit(main())
