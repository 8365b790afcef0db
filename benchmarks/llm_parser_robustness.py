"""Parser robustness over the corpus of realistic malformed LLM outputs (tests/llm/malformed_outputs.jsonl).

For every case the expected outcome is written next to it (the items to extract, or the status that must
make the stage fall back); this reports how many parse as expected, per parser, and the parse time.

    python benchmarks/llm_parser_robustness.py --out /work/runs/llm/parser.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "llm" / "malformed_outputs.jsonl"))
    ap.add_argument("--out", default="/work/runs/llm/parser.json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.llm.test_parsing import _check  # the same expectations the tests assert
    from toolrerank_plugins.llm.parsing import parse_query_list, parse_refinement, parse_rewrite

    parse = {"list": parse_query_list, "rewrite": parse_rewrite, "refinement": parse_refinement}
    cases = [json.loads(x) for x in Path(args.corpus).read_text(encoding="utf-8").splitlines() if x.strip()]
    by_parser: dict[str, Counter[str]] = {}
    failures: list[str] = []
    outcome: Counter[str] = Counter()
    times = []
    for c in cases:
        cnt = by_parser.setdefault(c["parser"], Counter())
        cnt["cases"] += 1
        t = time.perf_counter()
        res: Any = parse[c["parser"]](c["text"])
        times.append((time.perf_counter() - t) * 1e6)
        usable = getattr(res, "items", None) or getattr(res, "text", None) or getattr(res, "kind", "") == "stop"
        if getattr(res, "kind", None) == "refine":
            usable = True
        outcome["usable" if usable else "fallback"] += 1
        try:
            _check(c)
            cnt["as_expected"] += 1
        except AssertionError:
            failures.append(c["id"])
    out = {
        "n_cases": len(cases),
        "as_expected": sum(c["as_expected"] for c in by_parser.values()),
        "by_parser": {k: dict(v) for k, v in by_parser.items()},
        "outcomes": dict(outcome),
        "failures": failures,
        "parse_time_us": {"mean": sum(times) / len(times), "max": max(times)},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1), encoding="utf-8")
    sys.stdout.write(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
