"""The query weight of word-mapped requests (``DenseConfig.part_query_weight``), chosen leaving one catalog out.

Reads what ``benchmarks/transfer.py`` wrote for the three ``+word-mapped requests`` options (query weight 0.25,
0.5 and 1) and, for every catalog C, picks the weight with the largest mean Recall@5 change over the default on
the other catalogs, then reports that weight's change on C (docs/benchmarks.md, "Requests without the encoder").

Usage::

    python benchmarks/transfer.py --data ../shared/data --extra runs/dev-catalogs/* --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/transfer_wm.json \\
        --parts "default +word-mapped requests" "default +word-mapped requests (query weight 0.25)" \\
                "default +word-mapped requests (query weight 1)"
    python benchmarks/word_map_weight.py runs/bench/transfer_wm.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

OPTIONS = {
    0.25: "default +word-mapped requests (query weight 0.25)",
    0.5: "default +word-mapped requests",
    1.0: "default +word-mapped requests (query weight 1)",
}


def changes(results: dict[str, dict[str, dict[str, list[float]]]]) -> dict[str, dict[float, float]]:
    """catalog -> weight -> Recall@5 of the option minus the default's (points)."""
    out = {}
    for name, res in results.items():
        recall = res["recall@5"]
        base = float(np.mean(recall["default"]))
        out[name] = {w: 100 * (float(np.mean(recall[o])) - base) for w, o in OPTIONS.items() if o in recall}
    return out


def leave_one_out(delta: dict[str, dict[float, float]]) -> list[tuple[str, float, float]]:
    """(catalog, the weight chosen without it, that weight's change on it)."""
    rows = []
    for name in delta:
        others = [d for c, d in delta.items() if c != name]
        weights = [w for w in OPTIONS if all(w in d for d in others) and w in delta[name]]
        pick = max(weights, key=lambda w: float(np.mean([d[w] for d in others])))
        rows.append((name, pick, delta[name][pick]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("transfer_json", type=Path, help="benchmarks/transfer.py --out of the three options")
    args = ap.parse_args(argv)
    delta = changes(json.loads(args.transfer_json.read_text())["results"])
    print("| catalog | " + " | ".join(f"weight {w:g}" for w in OPTIONS) + " | chosen without it | its change |")
    print("|---|" + "---|" * (len(OPTIONS) + 2))
    for name, pick, change in leave_one_out(delta):
        cells = " | ".join(f"{delta[name][w]:+.1f}" if w in delta[name] else "" for w in OPTIONS)
        print(f"| {name} | {cells} | {pick:g} | {change:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
