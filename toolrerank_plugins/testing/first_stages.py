"""A toy first-stage backend for tests of the backend seam: it implements only ``FirstStage``'s abstract
methods, so the base class's defaults (``copy`` = deepcopy, ``update`` = remove + add) are what it gets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolrerank_plugins.retrieval.base import FirstStage, Hit


class WordSetIndex(FirstStage):
    """Score = number of query words in the text (lower-cased, split on spaces). Saved as ``words/index.json``.

    Example:
        >>> idx = WordSetIndex()
        >>> idx.index(["a", "b"], ["send email", "weather"])
        >>> idx.search(["send an email"], 2)
        [[Hit(id='a', score=2.0, scores=mappingproxy({}))]]
    """

    name = "words"

    def __init__(self) -> None:
        self._docs: dict[str, set[str]] = {}

    @property
    def ids(self) -> list[str]:
        return list(self._docs)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        self._docs = {}
        self.add(ids, texts)

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._docs.update({i: set(t.lower().split()) for i, t in zip(ids, texts)})

    def remove(self, ids: Sequence[str]) -> None:
        for i in ids:
            self._docs.pop(i, None)

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        out = []
        for q in queries:
            words = set(q.lower().split())
            scored = sorted(((len(words & d), i) for i, d in self._docs.items()), key=lambda x: -x[0])
            out.append([Hit(i, float(s)) for s, i in scored[:depth] if s > 0])
        return out

    def save(self, root: Path) -> None:
        (root / self.name).mkdir()
        (root / self.name / "index.json").write_text(json.dumps({k: sorted(v) for k, v in self._docs.items()}))

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Any = None) -> WordSetIndex:
        self = cls()
        self._docs = {k: set(v) for k, v in json.loads((root / cls.name / "index.json").read_text()).items()}
        return self
