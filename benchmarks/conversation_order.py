"""Which order the adapters' conversation query should have, measured on API-Bank's dialogues.

API-Bank's multi-line messages are a user's side of a dialogue: a request, then answers to the assistant
("Olivia Davis, October 10th.", "Yes, that's correct."). Read as a conversation (each line a user turn, the last
one the current message), the query the LangChain middleware searches with (``selection.conversation_query``)
is built two ways and searched with the ``default`` pipeline:

- ``chronological`` (what ships): the earlier turns, oldest first, then the current message;
- ``current first``: the current message, then the earlier turns (``multi_intent`` always reads a first line as
  a request, so a follow-up with no asking word would be one — and so would a last line that only answers).

Usage::

    python benchmarks/conversation_order.py --data ../shared/data --cache-dir runs/emb
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from default_pipeline import _cache  # sibling script (benchmarks/ is on sys.path when run)

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.metrics import recall_at_k, sufficiency_at_k
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.selection import Turn, conversation_query


def current_first(turns: Sequence[Turn], history_turns: int) -> str:
    earlier = [t.text for t in turns[:-1]]
    return "\n".join([turns[-1].text, *earlier[max(0, len(earlier) - history_turns) :]])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--history-turns", type=int, nargs="+", default=[2, 10])
    args = ap.parse_args(argv)
    folder = args.data / "api-bank"
    engine = Engine.build(
        load_catalog(folder), pipeline_config("default"), embedding_cache=_cache(args.cache_dir, "api-bank")
    )
    queries = [q for q in load_queries(folder) if "\n" in q.query]
    orders: dict[str, Callable[[Sequence[Turn], int], str]] = {
        "chronological": conversation_query,
        "current first": current_first,
    }
    print(f"{len(queries)} API-Bank messages with several lines; Recall@5 / Sufficiency@5 of the default pipeline")
    for h in args.history_turns:
        for name, build in orders.items():
            r, s = [], []
            for q in queries:
                turns = [Turn("user", line) for line in q.query.split("\n") if line.strip()]
                top = [hit.id for hit in engine.search(build(turns, h), top_k=5)]
                r.append(recall_at_k(top, q.relevant, 5))
                s.append(sufficiency_at_k(top, q.relevant, 5))
            print(f"history_turns={h:<3} {name:<14} {100 * np.mean(r):.1f} / {100 * np.mean(s):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
