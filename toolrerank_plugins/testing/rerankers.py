"""A deterministic, dependency-free cross-encoder for tests: word overlap between query and text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeCrossEncoder:
    """Scores a text by the share of the query's words it contains, in [0, 1].

    Counts calls and scored pairs so tests can check batching and caching.

    Example:
        >>> ce = FakeCrossEncoder()
        >>> ce.score("weather in paris", ["paris weather forecast", "send email"])
        [0.6666666666666666, 0.0]
    """

    def __init__(self, *, seen_tools: Iterable[str] = ()) -> None:
        self.seen_tools = frozenset(seen_tools)
        self.calls = 0
        self.pairs_scored = 0

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]:
        self.calls += 1
        self.pairs_scored += len(texts)
        q = set(_WORD.findall(query.lower()))
        if not q:
            return [0.0] * len(texts)
        return [len(q & set(_WORD.findall(t.lower()))) / len(q) for t in texts]
