"""Markdown tables from the JSON files written by toolrerank_eval.py (numbers are copied, never typed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

GROUP_ORDER = ["G1_instruction", "G2_instruction", "G3_instruction", "G1_tool", "G1_category", "G2_category"]


def _groups(res: dict[str, Any]) -> list[str]:
    gs = [g for g in next(iter(res["first_stage"].values())) if g not in ("macro", "seconds")]
    return [g for g in GROUP_ORDER if g in gs] + [g for g in gs if g not in GROUP_ORDER]


def main_table(res: dict[str, Any], metrics: tuple[str, ...] = ("recall@5", "ndcg@5", "sufficiency@5")) -> str:
    groups = _groups(res)
    rows = [(f"{k} (first stage)", v) for k, v in res["first_stage"].items()]
    rows += [(k + (f" ({res['reranked_first_stage']})"), v) for k, v in res["runs"].items()]
    out = []
    for metric in metrics:
        head = f"| {metric} | " + " | ".join(groups) + " | macro |"
        out += [head, "|" + "---|" * (len(groups) + 2)]
        for name, v in rows:
            out.append(
                f"| {name} | " + " | ".join(f"{v[g][metric]:.1f}" for g in groups) + f" | {v['macro'][metric]:.1f} |"
            )
        out.append("")
    return "\n".join(out)


def ablation_table(res: dict[str, Any], metric: str = "recall@5") -> str:
    groups = _groups(res)
    out = [f"| ablation ({metric}) | " + " | ".join(groups) + " | macro |", "|" + "---|" * (len(groups) + 2)]
    for name, v in [("ToolRerank (tuned)", res["runs"]["ToolRerank"]), *res["ablations"].items()]:
        out.append(
            f"| {name} | " + " | ".join(f"{v[g][metric]:.1f}" for g in groups) + f" | {v['macro'][metric]:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    for path in args.results:
        res = json.loads(Path(path).read_text())
        print(f"### {res['bench']} {res['split']} ({res['n_queries']} queries) — `{path}`\n")
        print(f"reranked first stage: {res['reranked_first_stage']}; params: `{json.dumps(res['params'])}`")
        if "classifier_accuracy" in res:
            print(f"; classifier accuracy {res['classifier_accuracy']:.1f}%")
        print(
            "\nseen share of relevant APIs (%): "
            + ", ".join(f"{g} {v:.0f}" for g, v in res["seen_share_of_relevant"].items())
        )
        print()
        print(main_table(res))
        print(ablation_table(res))
        print()


if __name__ == "__main__":
    main()
