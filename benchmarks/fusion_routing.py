"""Can a label-free feature of the message choose its fusion? Agreement or reciprocal-rank fusion per message,
judged leaving one catalog out (issue 29, item 2).

Reciprocal-rank fusion (today's default) loses 4.5 Recall@5 to the agreement fusion on MetaTool's single-intent
requests and gains 1.4 on the agent-style tasks of ``npm-mcp-tasks`` (3.9 and 3.2 with step 7's parts); the
catalog cannot choose (the npm requests and the tasks share one catalog). This script asks whether the *message*
can: a rule "the agreement fusion where the message's feature is at most T, else reciprocal-rank fusion", with
features read off the text alone (words; commas, semicolons and line breaks; line breaks; sentences), applied to
every fusion of the message (its whole and, where ``multi_intent`` splits it, its requests). Such a rule's
Recall@5 on a query is then exactly the default's or the agreement option's, so it is read off a ``transfer.py``
run that measured both (``--parts "default +agreement fusion"``) without another search. Each rule is judged as
a knob is (``knob_choice.choose``): for each catalog C, among the rules the transfer rule keeps against
reciprocal-rank fusion on the other catalogs, the largest mean gain, and the table shows what that choice does
on C.

Usage::

    python benchmarks/transfer.py --data ../shared/data --extra runs/dev-catalogs/* --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --parts "default +agreement fusion" \\
        --out runs/bench/agreement.json --md runs/bench/agreement.md
    python benchmarks/fusion_routing.py --data ../shared/data --extra runs/dev-catalogs/* \\
        --results runs/bench/agreement.json --md runs/bench/fusion_routing.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from default_pipeline import bootstrap  # noqa: E402
from knob_choice import choose  # noqa: E402
from transfer import SHARED, catalog_folders  # noqa: E402

from toolrerank_plugins.loaders import load_queries  # noqa: E402

AGREEMENT = "default +agreement fusion"
#: feature name -> (the feature of a message's text, the thresholds tried: agreement where feature <= T)
FEATURES: dict[str, tuple[Callable[[str], int], tuple[int, ...]]] = {
    "words": (lambda q: len(q.split()), (6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32, 40)),
    "commas+lines": (lambda q: q.count(",") + q.count(";") + q.strip().count("\n"), (0, 1, 2, 3, 4)),
    "lines": (lambda q: q.strip().count("\n"), (0, 1, 2)),
    "sentences": (lambda q: len([s for s in re.split(r"[.?!\n]+", q) if s.strip()]), (1, 2, 3, 4)),
}


def routed(results: Mapping[str, Any], folders: Mapping[str, Path]) -> dict[str, Any]:
    """Per catalog, the per-query Recall@5 of "rrf" (today's default), "agreement" and every rule."""
    out: dict[str, Any] = {}
    for name, res in results.items():
        texts = {q.id: q.query for q in load_queries(folders[name])}
        rrf = np.asarray(res["recall@5"]["default"], dtype=float)
        agreement = np.asarray(res["recall@5"][AGREEMENT], dtype=float)
        rows: dict[str, list[float]] = {"rrf": rrf.tolist(), "agreement": agreement.tolist()}
        for feature, (fn, thresholds) in FEATURES.items():
            values = np.asarray([fn(texts[q]) for q in res["queries"]])
            for t in thresholds:
                rows[f"{feature}<={t}"] = np.where(values <= t, agreement, rrf).tolist()
        out[name] = {"recall@5": rows}
    return out


def markdown(table: Mapping[str, Any]) -> str:
    cats = list(table)
    labels = [x for x in next(iter(table.values()))["recall@5"] if x != "rrf"]
    mean = {c: 100 * np.mean(table[c]["recall@5"]["rrf"]) for c in cats}
    lines = [
        "Recall@5 minus reciprocal-rank fusion's (the default's), per catalog:",
        "",
        "| rule: agreement where | " + " | ".join(cats) + " |",
        "|---|" + "---|" * len(cats),
        "| *rrf (R@5)* | " + " | ".join(f"{mean[c]:.1f}" for c in cats) + " |",
    ]
    for label in labels:
        cells = [f"{100 * np.mean(table[c]['recall@5'][label]) - mean[c]:+.1f}" for c in cats]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    rules = [x for x in labels if x != "agreement"]
    lines += ["", "| held-out catalog | rule chosen without it | vs RRF on it (95 % interval) |", "|---|---|---|"]
    for c in cats:
        best = choose(table, [x for x in cats if x != c], ["rrf", *rules], "rrf")
        d, lo, hi = bootstrap(table[c]["recall@5"][best], table[c]["recall@5"]["rrf"])
        lines.append(f"| {c} | {best} | {d:+.1f} [{lo:+.1f}, {hi:+.1f}] |")
    lines.append(f"| *all catalogs* | {choose(table, cats, ['rrf', *rules], 'rrf')} | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", default=list(SHARED), choices=SHARED)
    ap.add_argument("--extra", nargs="*", type=Path, default=[], help="assembled catalog folders")
    ap.add_argument("--results", type=Path, required=True, help="a transfer.py --out file with the agreement option")
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    saved = json.loads(args.results.read_text(encoding="utf-8"))
    results = saved["results"]  # transfer.py's --out: catalog -> its queries and per-query Recall@5 by config
    missing = [n for n, r in results.items() if AGREEMENT not in r["recall@5"]]
    if missing:
        raise SystemExit(f"{args.results}: no {AGREEMENT!r} measured on {missing}")
    text = markdown(routed(results, catalog_folders(args.data, args.datasets, args.extra)))
    print(text)
    if args.md:
        args.md.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
