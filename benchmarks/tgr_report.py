"""Print the markdown tables of docs/benchmarks/tgr.md from the JSON written by tgr_eval.py / tgr_scale.py.

python benchmarks/tgr_report.py /work/runs/helper_tgr/tgr_eval_nodisc.json /work/runs/helper_tgr/tgr_eval_seal.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("recall@5", "recall@10", "ndcg@5", "ndcg@10", "sufficiency@5", "sufficiency@10")


def main(paths: list[str]) -> None:
    out = sys.stdout
    for p in paths:
        data = json.loads(Path(p).read_text())
        for ds, v in data.items():
            out.write(f"\n#### {ds} ({v['n_queries']} dev queries, {v['n_apis']} APIs) — `{p}`\n\n")
            out.write(
                "| variant | R@5 | R@10 | N@5 | N@10 | S@5 | S@10 | edges | p50 ms |\n"
                "|---|---|---|---|---|---|---|---|---|\n"
            )
            base = v["rows"].get("base dense")
            for name, r in v["rows"].items():
                cells = []
                for k in KEYS:
                    d = f" ({r[k] - base[k]:+.1f})" if base and name != "base dense" else ""
                    cells.append(f"{r[k]:.1f}{d}")
                edges = (r.get("graph_stats") or {}).get("edges", "-")
                lat = r["latency_ms"]["p50"] if r.get("latency_ms") else float("nan")
                out.write(f"| {name} | " + " | ".join(cells) + f" | {edges} | {lat:.0f} |\n")


if __name__ == "__main__":
    main(sys.argv[1:])
