"""Evaluation with a usage history: queries the memory has seen word for word (``memorised``) reported apart
from the others (``generalised``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def memorised_split(per_query: Sequence[Mapping[str, Any]], log_texts: Iterable[str]) -> dict[str, Any]:
    """Mean metrics of the evaluated queries whose text is identical to a logged request (``memorised``:
    the memory has seen the answer) and of the others (``generalised``), from an evaluation's ``per_query``
    rows (``query`` and ``metrics``)."""
    texts = set(log_texts)
    groups: dict[str, list[Mapping[str, float]]] = {"memorised": [], "generalised": []}
    for row in per_query:
        groups["memorised" if row["query"] in texts else "generalised"].append(row["metrics"])
    out: dict[str, Any] = {}
    for name, rows in groups.items():
        means: dict[str, float] = {k: float(np.mean([r[k] for r in rows])) for k in (rows[0] if rows else {})}
        means["n"] = len(rows)
        out[name] = means
    return out
