"""Cache-stable selections (issue 31): how often a turn's offered tools keep the previous turn's tool block as a
prefix (a prompt-cache hit on the tools), before and after, and what it costs in recall and tools offered.

Dialogues, stated exactly: for each benchmark, the ``--split`` queries of ``queries.jsonl`` in file order are cut
into consecutive groups of ``--turns`` queries; each group is one conversation and each query one user turn
(a trailing group shorter than ``--turns`` is dropped; ``--max-queries`` caps the queries read per set, from the
top). Consecutive queries of a dev set are unrelated requests or related ones depending on the set: this is a
worst case for a conversation's tools, where most turns need new tools.

Each turn, the core's ``BaseToolSelector`` selects the ``--k`` best tools for the query (no pins). Policies:

* ``before``: each turn offers its own selection (what every adapter did without ``stable``);
* ``stable``: ``OfferLog`` / ``stable_offer`` — the conversation's offered tools keep their positions and the
  turn's new ones are appended; ``max_offered`` bounds the list, and when the new ones do not fit the list
  ``restart``s (keeps, in order, the offered tools the fresh selection still has, then the rest) or ``keep``s
  its prefix (only the new tools that fit are added).

Per policy: ``prefix kept`` = share of turns 2..T whose previous offered list is a prefix of theirs (the tool
block is unchanged up to where it grows); ``identical`` = share where the list did not change at all;
``recall`` = Recall of the gold APIs among the tools offered on the turn (for ``before`` this is Recall@k of
the fresh selection; a stable list may offer more tools, so it can be higher); ``fresh kept`` = share of the
turn's own top-k that is offered (1.0 unless ``keep`` leaves some out); ``tools`` = mean tools offered.

Usage::

    python benchmarks/cache_stability.py --data ../shared/data --out runs/bench/cache_stability.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolrerank_plugins.agents import BaseToolSelector
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.selection import OnFull, stable_offer

SETS = ["api-bank", "nestful", "restbench", "metatool", "seal-tools", "toolbench"]
#: (label, max_offered as a multiple of k or None, on_full)
POLICIES: list[tuple[str, int | None, OnFull]] = [
    ("stable, unbounded", None, "restart"),
    ("stable, max 2k, restart", 2, "restart"),
    ("stable, max 2k, keep", 2, "keep"),
    ("stable, max k, restart", 1, "restart"),
    ("stable, max k, keep", 1, "keep"),
]


def _conversations(queries: Sequence[Any], turns: int) -> list[list[Any]]:
    return [list(queries[i : i + turns]) for i in range(0, len(queries) - turns + 1, turns)]


def _measure(
    dialogues: list[list[tuple[list[str], set[str]]]], max_offered: int | None, on_full: OnFull | None
) -> dict[str, float]:
    """``dialogues``: per conversation, per turn, (fresh selection ids, gold ids). ``on_full=None``: before."""
    kept = identical = later = 0
    recall: list[float] = []
    fresh_kept: list[float] = []
    sizes: list[int] = []
    for turns in dialogues:
        offered: tuple[str, ...] = ()
        for i, (fresh, gold) in enumerate(turns):
            previous = offered
            if on_full is None:
                offered = tuple(fresh)
            else:
                offered = stable_offer(previous, fresh, max_offered=max_offered, on_full=on_full).names
            if i > 0:
                later += 1
                kept += offered[: len(previous)] == previous
                identical += offered == previous
            shown = set(offered)
            recall.append(len(gold & shown) / len(gold) if gold else 0.0)
            fresh_kept.append(len(set(fresh) & shown) / len(fresh) if fresh else 1.0)
            sizes.append(len(offered))
    return {
        "prefix_kept": kept / later if later else 0.0,
        "identical": identical / later if later else 0.0,
        "recall": sum(recall) / len(recall) if recall else 0.0,
        "fresh_kept": sum(fresh_kept) / len(fresh_kept) if fresh_kept else 0.0,
        "tools": sum(sizes) / len(sizes) if sizes else 0.0,
        "turns": len(sizes),
        "later_turns": later,
    }


def run_set(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    catalog = load_catalog(folder)
    queries = [q for q in load_queries(folder / "queries.jsonl") if q.split == args.split][: args.max_queries]
    conversations = _conversations(queries, args.turns)
    t = time.perf_counter()
    engine = Engine.build(catalog, pipeline_config(args.pipeline))
    build_s = time.perf_counter() - t
    selector = BaseToolSelector(engine, {i: i for i in engine.catalog.ids}, name=str, max_tools=args.k)
    t = time.perf_counter()
    dialogues = [[(selector.select(q.query, args.k), set(q.relevant)) for q in conv] for conv in conversations]
    search_s = time.perf_counter() - t
    out: dict[str, Any] = {
        "tools": len(catalog),
        "queries": sum(len(c) for c in conversations),
        "conversations": len(conversations),
        "build_s": round(build_s, 1),
        "search_s": round(search_s, 1),
        "policies": {"before": _measure(dialogues, None, None)},
    }
    for label, multiple, on_full in POLICIES:
        max_offered = None if multiple is None else multiple * args.k
        out["policies"][label] = _measure(dialogues, max_offered, on_full)
    return out


def _table(results: dict[str, Any], k: int) -> str:
    labels = ["before", *(p[0] for p in POLICIES)]
    lines = []
    for name, res in results.items():
        lines.append(
            f"\n{name}: {res['tools']} tools, {res['conversations']} conversations of {res['queries']} queries "
            f"(build {res['build_s']} s, search {res['search_s']} s)"
        )
        lines.append(f"| policy | prefix kept | identical | recall (offered) | top-{k} offered | tools offered |")
        lines.append("|---|---|---|---|---|---|")
        for label in labels:
            m = res["policies"][label]
            lines.append(
                f"| {label} | {100 * m['prefix_kept']:.1f} | {100 * m['identical']:.1f} | {100 * m['recall']:.1f} "
                f"| {100 * m['fresh_kept']:.1f} | {m['tools']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", required=True, help="folder holding one sub-folder per benchmark (DATA)")
    p.add_argument("--sets", nargs="*", default=SETS)
    p.add_argument("--split", default="dev")
    p.add_argument("--turns", type=int, default=4, help="user turns per conversation")
    p.add_argument("--k", type=int, default=5, help="tools selected per turn (Recall@k)")
    p.add_argument("--pipeline", default="bm25", help="engine pipeline (default: bm25)")
    p.add_argument("--max-queries", type=int, default=400, help="most queries read per set (from the top)")
    p.add_argument("--out", default=None, help="JSON results")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, Any] = {}
    for name in args.sets:
        folder = Path(args.data) / name
        if not (folder / "queries.jsonl").exists():
            print(f"{name}: no {folder}/queries.jsonl, skipped")
            continue
        results[name] = run_set(folder, args)
        print(_table({name: results[name]}, args.k), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "argv": vars(args),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        }
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
