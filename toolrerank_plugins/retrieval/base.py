"""The first-stage retriever interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

#: (API id, score) pairs, best first.
Hit = tuple[str, float]


@runtime_checkable
class FirstStageRetriever(Protocol):
    """Indexes API texts by id and answers queries with the best ids.

    Implementations support incremental ``add`` / ``remove`` without re-encoding what is already indexed.
    """

    name: str

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None: ...

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None: ...

    def remove(self, ids: Sequence[str]) -> None: ...

    def search(self, queries: Sequence[str], top_k: int) -> list[list[Hit]]: ...

    def save(self, path: Path) -> None: ...

    def __len__(self) -> int: ...
