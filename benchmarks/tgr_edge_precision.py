"""Precision / recall of the zero-training schema graph against labelled dependency edges.

For each dataset with an ``edges.jsonl`` (API-Bank, NESTFUL, Seal-Tools, and the bundled catalog, whose
edges are hand-declared), the schema detector (``toolrerank_plugins.graph.schema_deps``) runs on the catalog
*without* its edges, once per evidence rule, and its edges are compared with the labelled ones:

- ``P`` / ``R`` / ``F1``: against every labelled edge (``source -> target``; direction counts).
- ``P co-called``: precision over the predicted edges whose two APIs are called together in at least one
  labelled query (``calls``). The labels were derived from those queries' data flow, so only such pairs
  can be labelled at all; a predicted edge between two APIs no query uses together is unjudged, not wrong
  (Seal-Tools labels 72 edges among 4,076 APIs).
- rows by evidence: ``cross-tool`` (APIs of different tools; every API is its own tool in a flat catalog)
  and ``same tool``; ``weight 1`` = typed id evidence only (what the ``closure`` expansion trusts).

Rules compared (``SchemaConfig``): ``name`` = any shared name with compatible types (the behaviour before
typed evidence; reproduces the old detector's edges exactly), ``typed_id`` = the default (typed id evidence
between tools, name match inside a tool), ``typed_id everywhere`` (also inside a tool), ``none`` (no edges
between tools).

    python benchmarks/tgr_edge_precision.py --data ../shared/data --out /tmp/tgr_edge_precision.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from toolrerank_plugins.catalog import Catalog, default_catalog_path
from toolrerank_plugins.graph.schema_deps import SchemaConfig, SchemaDependencyDetector
from toolrerank_plugins.loaders import load_catalog, load_queries

RULES: dict[str, dict[str, Any]] = {
    "name (before)": {"cross_tool": "name", "same_tool": "name"},
    "typed_id (default)": {"cross_tool": "typed_id", "same_tool": "name"},
    "typed_id everywhere": {"cross_tool": "typed_id", "same_tool": "typed_id"},
    "no cross-tool": {"cross_tool": "none", "same_tool": "name"},
}


def _prf(pred: set[tuple[str, str]], gold: set[tuple[str, str]], judged: set[frozenset[str]]) -> dict[str, Any]:
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    in_scope = {e for e in pred if frozenset(e) in judged}
    return {
        "pred": len(pred),
        "tp": tp,
        "P": round(100 * p, 1),
        "R": round(100 * r, 1),
        "F1": round(100 * (2 * p * r / (p + r) if p + r else 0.0), 1),
        "co_called": len(in_scope),
        "P_co_called": round(100 * len(in_scope & gold) / len(in_scope), 1) if in_scope else None,
    }


def measure(catalog: Catalog, gold: set[tuple[str, str]], judged: set[frozenset[str]]) -> dict[str, Any]:
    tool = {s.id: s.tool_key for s in catalog}
    out: dict[str, Any] = {}
    for name, params in RULES.items():
        edges = SchemaDependencyDetector(SchemaConfig(**params)).detect(catalog)
        pred = {(e.source, e.target) for e in edges}
        cross = {e for e in pred if tool[e[0]] != tool[e[1]]}
        gold_cross = {e for e in gold if tool[e[0]] != tool[e[1]]}
        strong = {(e.source, e.target) for e in edges if e.weight >= 1.0}
        out[name] = {
            "all": _prf(pred, gold, judged),
            "cross-tool": _prf(cross, gold_cross, judged),
            "same tool": _prf(pred - cross, gold - gold_cross, judged),
            "weight 1": _prf(strong, gold, judged),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--datasets", nargs="+", default=["api-bank", "nestful", "seal-tools", "bundled"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for ds in args.datasets:
        root = Path(default_catalog_path()) if ds == "bundled" else Path(args.data) / ds
        catalog = load_catalog(root)
        gold = {(e.source, e.target) for e in catalog.edges if e.source != e.target}
        judged = {frozenset((a, b)) for q in load_queries(root) for a in (q.calls or []) for b in (q.calls or [])}
        bare = Catalog(list(catalog), source=catalog.source)  # the detector never sees the labels
        results[ds] = {"n_apis": len(catalog), "n_gold": len(gold), "rules": measure(bare, gold, judged)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print("| dataset | rule | edges | P | R | F1 | P co-called (n) | cross-tool edges: n / P | weight-1 edges: n / P |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ds, res in results.items():
        for rule, m in res["rules"].items():
            a, c, w = m["all"], m["cross-tool"], m["weight 1"]
            print(
                f"| {ds} ({res['n_apis']} APIs, {res['n_gold']} labelled) | {rule} | {a['pred']} | {a['P']} | "
                f"{a['R']} | {a['F1']} | {a['P_co_called']} ({a['co_called']}) | {c['pred']} / {c['P']} | "
                f"{w['pred']} / {w['P']} |"
            )


if __name__ == "__main__":
    main()
