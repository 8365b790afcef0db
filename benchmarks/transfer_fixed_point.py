"""Which parts of the default pass issue 29's transfer rule *together*? A search for a fixed point of the rule.

``benchmarks/transfer.py`` judges each part against one given default: switched off alone. When several parts
fail there, switching them off changes what the others are judged against, and parts that passed may fail (or
failed ones pass). This script searches for a set of parts where the rule agrees with itself: every part that is
on passes the rule against the default without it (default minus default-without-it), and every part that is off
fails it against the default with it (default-with-it minus default) — on the same catalogs, by the same rule
(``transfer.decide_where_it_acts``: no catalog loses more than 0.5 Recall@5 and it gains on at least half of the
catalogs where it acts).

It starts from ``--start`` (the parts off; default: none — every part on, ``named_tools`` and the per-catalog
stemmer included, with the library's fusion knobs), judges every part, and flips every part
whose verdict disagrees with its state; if that leads back to a set of parts already judged, it flips only the
part with the largest mean effect against its state instead. A part whose parent is off (the ``multi_intent``
rules without ``multi_intent``, the confidence weights without the agreement fusion) cannot act and keeps its
state. Every configuration's per-query Recall@5 is kept in ``--out`` (the run resumes from it); the last state's
table is printed in ``transfer.py``'s form (``-X``: a part on, judged off; ``+X``: a part off, judged on).

Usage::

    python benchmarks/transfer_fixed_point.py --data ../shared/data --extra runs/dev-catalogs/* \\
        --cache-dir runs/emb --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/fixed_point.json \\
        --md runs/bench/fixed_point.md
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from default_pipeline import ABLATIONS  # noqa: E402
from transfer import (  # noqa: E402
    OPTIONS,
    add_catalog_args,
    analyse,
    ancestors,
    configs,
    markdown,
    measure_catalogs,
)
from transfer import PARTS as TRANSFER_PARTS  # noqa: E402
from transfer import _resolved as resolved  # noqa: E402

from toolrerank_plugins import EngineConfig  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402

logger = logging.getLogger("transfer_fixed_point")

#: the parts searched, each its ``default -X`` ablation (the parts they need on to act: transfer.PARENTS)
PARTS: tuple[str, ...] = (
    "identifiers",
    "stemming",
    "agreement fusion (RRF k=5)",
    "confidence weights",
    "multi_intent",
    "asking lines (every line a request)",
    "preamble as context (self-description a request)",
    "action verbs",
    "action compounds",
    "and before a verb",
    "named tools",
    "tool_evidence",
    "tgr",
    "auto stemming",
)


def all_on() -> dict[str, Any]:
    """The default's config with every part on (the options among them switched on)."""
    data = pipeline_config("default").model_dump(mode="json")
    for part in PARTS:
        if f"default +{part}" in ABLATIONS:
            ABLATIONS[f"default +{part}"](data)
    return data


def key(off: frozenset[str]) -> str:
    """A configuration's label: the parts switched off."""
    return "off: " + (" | ".join(sorted(off)) if off else "none")


def config(off: frozenset[str], base: Mapping[str, Any]) -> EngineConfig:
    data = copy.deepcopy(dict(base))
    for part in sorted(off):
        ABLATIONS[f"default -{part}"](data)
    return EngineConfig.model_validate(data)


def applicable(part: str, off: frozenset[str]) -> bool:
    return not any(parent in off for parent in ancestors(part))


def needed(off: frozenset[str]) -> list[frozenset[str]]:
    """The configurations judging every applicable part at state ``off`` needs: the state, each part on and off."""
    out = {off}
    for part in PARTS:
        if applicable(part, off):
            out |= {off - {part}, off | {part}}
    return sorted(out, key=key)


def table_at(off: frozenset[str], results: Mapping[str, Any]) -> dict[str, Any]:
    """``transfer.analyse``'s table for the default at state ``off``: ``-X`` rows for the parts on, ``+X`` for off."""
    shaped: dict[str, Any] = {}
    labels = []
    for name, res in results.items():
        r = res["recall@5"]
        rows = {"default": r[key(off)], "hybrid": r["hybrid"]}
        for part in PARTS:
            if not applicable(part, off):
                continue
            if part in off:
                rows[f"default +{part}"] = r[key(off - {part})]
            else:
                rows[f"default -{part}"] = r[key(off | {part})]
        shaped[name] = {"queries": res["queries"], "recall@5": rows}
        labels = [label for label in rows if label.startswith("default ")]
    return {"results": shaped, "table": analyse(shaped, labels)}


def disagreements(off: frozenset[str], table: Mapping[str, Any]) -> dict[str, float]:
    """Parts whose verdict disagrees with their state -> mean effect against the state (larger: flip first)."""
    out: dict[str, float] = {}
    for label, row in table.items():
        part = label.removeprefix("default -").removeprefix("default +")
        if row["default_unchanged"]:
            continue
        acting = [c["delta"] for n, c in row["per_catalog"].items() if row["acts"][n]]
        mean = float(np.mean(acting)) if acting else 0.0
        out[part] = -mean if part not in off else mean
    return out


def seeded(runs: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """``transfer.py``'s runs of today's default (each part off, each option on) relabelled as the states they are,
    matched by resolved config, so that they need not run again."""
    default = pipeline_config("default").model_dump(mode="json")

    def fingerprint(config_data: Any) -> str:  # resolved configs compare equal; their repr is a dict key
        return repr(resolved(config_data))

    def edited(part: str) -> Any:
        data = copy.deepcopy(default)
        ABLATIONS[f"default -{part}"](data)
        return resolved(data)

    today = frozenset(p for p in PARTS if edited(p) == resolved(default))  # the parts today's default has off
    if resolved(config(today, base).model_dump(mode="json")) != resolved(default):
        raise SystemExit(f"today's default is no state of the parts searched (off: {sorted(today)})")
    candidates = [today, *(today ^ {p} for p in PARTS)]
    states = {fingerprint(config(s, base).model_dump(mode="json")): key(s) for s in candidates}
    states[fingerprint(pipeline_config("hybrid").model_dump(mode="json"))] = "hybrid"
    labels = {
        label: states[r]
        for label, c in configs(TRANSFER_PARTS + OPTIONS).items()
        if (r := fingerprint(c.model_dump(mode="json"))) in states
    }
    return {
        name: {
            "queries": res["queries"],
            "recall@5": {labels[k]: v for k, v in res["recall@5"].items() if k in labels},
            "p50_ms": {},
        }
        for name, res in runs.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_catalog_args(ap)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--max-queries", type=int, default=400)
    ap.add_argument("--start", nargs="*", default=[], choices=list(PARTS), help="parts off at the start")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--seed", type=Path, help="a transfer.py --out of today's default: its runs are reused")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    base = all_on()
    saved = json.loads(args.out.read_text()) if args.out.exists() else {}
    results: dict[str, Any] = saved.get("results", {})
    if args.seed and not results:
        results = seeded(json.loads(args.seed.read_text())["results"], base)
    path: list[dict[str, Any]] = []
    off = frozenset(args.start)
    seen: set[frozenset[str]] = set()
    fixed = False

    def save() -> None:  # every configuration measured so far, and the path taken
        args.out.write_text(json.dumps({"results": results, "path": path}, indent=0))

    for _ in range(args.max_steps):
        seen.add(off)
        cfgs = {"hybrid": pipeline_config("hybrid"), **{key(s): config(s, base) for s in needed(off)}}
        names = measure_catalogs(
            args,
            cfgs,
            results,
            results,  # each catalog resumed from what earlier steps (or runs) measured
            save,
            split=args.split,
            max_queries=args.max_queries or None,
        )
        judged = table_at(off, {n: results[n] for n in names})  # --out may hold catalogs this run leaves out
        flips = disagreements(off, judged["table"])
        path.append({"off": sorted(off), "disagree": flips})
        logger.info("state %s: disagree %s", key(off), flips)
        save()
        if not flips:
            fixed = True
            break
        nxt = off ^ frozenset(flips)
        if nxt in seen:
            nxt = off ^ {max(flips, key=flips.__getitem__)}
        if nxt in seen:
            logger.info("cycle: every next state was judged before")
            break
        off = nxt
    md = markdown(judged["results"], judged["table"])
    head = (
        f"State: {key(off)} — {'a fixed point of the rule' if fixed else 'NOT a fixed point'}; "
        f"path: {' -> '.join(key(frozenset(p['off'])) for p in path)}\n\n"
    )
    print(head + md)
    args.out.write_text(
        json.dumps({"results": results, "path": path, "fixed": fixed, "table": judged["table"]}, indent=0)
    )
    if args.md:
        args.md.write_text(head + md)


if __name__ == "__main__":
    main()
