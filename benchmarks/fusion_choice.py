"""How the default's agreement fusion was chosen: its knobs picked leaving one catalog out (issue 29, items 1-2).

Z-score fusion (the default before) lost 3.0 Recall@5 to plain reciprocal-rank fusion on RestBench and reciprocal-
rank fusion lost on five other catalogs, so no fixed fusion passed the transfer rule. ``fusion="agreement"``
(``retrieval.hybrid.agreement_fuse``) picks per query: reciprocal-rank fusion where the dense and BM25 top 5 share at
least ``agreement_min`` hits, else a merge of the confidence-weighted z-score ranking and the reciprocal-rank one
(weights 1 and ``disagreement_rrf_weight``). This script runs the default pipeline (``auto_tune``'s fusion off) with
reciprocal-rank fusion, z-score fusion and each ``agreement_min`` x ``disagreement_rrf_weight`` of a small grid on
every dev catalog (as ``benchmarks/transfer.py``: the shared sets leak-free, 400 dev queries at most), then, for each
catalog C, chooses the setting on the *other* catalogs (the transfer rule against reciprocal-rank fusion, the part's
"off": no loss over 0.5 Recall@5 on any of them where it acts and gains on at least half; among those, the largest
mean gain) and reports what that choice did on C.

Usage::

    python benchmarks/fusion_choice.py --data ../shared/data --extra runs/dev-catalogs/* --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/fusion_choice.json
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from default_pipeline import bootstrap  # noqa: E402
from knob_choice import choose, measure, settings_table  # noqa: E402
from transfer import add_catalog_args  # noqa: E402

from toolrerank_plugins import EngineConfig  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402

MIN_SHARED = (1, 2, 3)
RRF_WEIGHTS = (0.5, 1.0)


def candidates() -> dict[str, EngineConfig]:
    base = pipeline_config("default").model_dump(mode="json")

    def with_fusion(**hybrid: Any) -> EngineConfig:
        data = copy.deepcopy(base)
        data["auto_tune"] = [k for k in data["auto_tune"] if k != "hybrid.fusion"]
        data["hybrid"].update(hybrid)
        return EngineConfig.model_validate(data)

    out = {"rrf": with_fusion(fusion="rrf"), "zc": with_fusion(fusion="zscore")}
    for t in MIN_SHARED:
        for w in RRF_WEIGHTS:
            out[f"ag_t{t}_w{w}"] = with_fusion(fusion="agreement", agreement_min=t, disagreement_rrf_weight=w)
    return out


def choose_without(results: Mapping[str, Any], held_out: str, labels: list[str]) -> str:
    """The setting the transfer rule (against reciprocal-rank fusion) keeps on the catalogs other than
    ``held_out``; among those, the largest mean gain; ``"rrf"`` (the part off) when the rule keeps none."""
    return choose(results, [c for c in results if c != held_out], labels, "rrf")


def markdown(results: Mapping[str, Any]) -> str:
    cats = list(results)
    labels = list(next(iter(results.values()))["recall@5"])
    lines = settings_table(results)
    agreement = [x for x in labels if x.startswith("ag_")]
    lines += ["", "| held-out catalog | chosen without it | vs RRF | vs z-score |", "|---|---|---|---|"]
    for c in cats:
        best = choose_without(results, c, agreement)
        r = results[c]["recall@5"]
        vs_rrf, lo, hi = bootstrap(r[best], r["rrf"])
        vs_z, lo2, hi2 = bootstrap(r[best], r["zc"])
        lines.append(f"| {c} | {best} | {vs_rrf:+.1f} [{lo:+.1f}, {hi:+.1f}] | {vs_z:+.1f} [{lo2:+.1f}, {hi2:+.1f}] |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_catalog_args(ap)
    ap.add_argument("--max-queries", type=int, default=400)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(markdown(measure(args, candidates())))


if __name__ == "__main__":
    main()
