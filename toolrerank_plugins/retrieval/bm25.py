"""BM25 on bm25s."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins._extras import require
from toolrerank_plugins.errors import PersistenceError
from toolrerank_plugins.retrieval.base import FirstStage, FirstStageType, Hit


class BM25Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k1: float = Field(1.5, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    stopwords: str | None = Field("en", description="bm25s stopword list name, or None")


class BM25Retriever(FirstStage):
    """Lexical retrieval with bm25s.

    BM25's IDF depends on the whole corpus, so ``add``/``remove`` rebuild the index from the stored token
    lists; only new texts are tokenised. Hits with score 0 (no shared term) are dropped. Saved in the
    ``bm25/`` folder of an engine directory.
    """

    name = "bm25"

    def __init__(self, config: BM25Config | None = None) -> None:
        self.config = config or BM25Config()
        self._ids: list[str] = []
        self._texts: list[str] = []
        self._tokens: list[list[str]] = []
        self._model: Any = None

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        bm25s = require("bm25s")
        return bm25s.tokenize(  # type: ignore[no-any-return]
            list(texts), stopwords=self.config.stopwords, return_ids=False, show_progress=False
        )

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        if len(ids) != len(texts):
            raise ValueError("ids and texts must have the same length")
        self._ids, self._texts = list(ids), list(texts)
        self._tokens = self._tokenize(texts) if texts else []
        self._rebuild()

    def _rebuild(self) -> None:
        bm25s = require("bm25s")
        model = bm25s.BM25(k1=self.config.k1, b=self.config.b, method=self.config.method)
        # bm25s cannot index a corpus without a single term (e.g. only stopwords): no lexical hits then.
        if any(self._tokens):
            model.index(self._tokens, show_progress=False)
            self._model = model
        else:
            self._model = None

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._ids += list(ids)
        self._texts += list(texts)
        self._tokens += self._tokenize(texts) if texts else []
        self._rebuild()

    def remove(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        keep = [i for i, t in enumerate(self._ids) if t not in gone]
        self._ids = [self._ids[i] for i in keep]
        self._texts = [self._texts[i] for i in keep]
        self._tokens = [self._tokens[i] for i in keep]
        self._rebuild()

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        if not queries:
            return []
        if not self._ids or self._model is None:
            return [[] for _ in queries]
        k = min(depth, len(self._ids))
        toks = self._tokenize(queries)
        out: list[list[Hit]] = []
        # bm25s cannot score an empty query; such queries simply have no lexical hits.
        nonempty = [i for i, t in enumerate(toks) if t]
        res: dict[int, list[Hit]] = {i: [] for i in range(len(queries))}
        if nonempty:
            docs, scores = self._model.retrieve([toks[i] for i in nonempty], k=k, show_progress=False)
            for qi, drow, srow in zip(nonempty, docs, scores):
                res[qi] = [Hit(self._ids[int(d)], float(s)) for d, s in zip(drow, srow) if s > 0]
        out = [res[i] for i in range(len(queries))]
        return out

    def save(self, root: Path) -> None:
        """Write ``bm25.json`` (ids and texts) into ``root/bm25``."""
        path = root / self.name
        path.mkdir(parents=True, exist_ok=True)
        # Texts are stored (not a pickle of the model); loading re-indexes deterministically.
        (path / "bm25.json").write_text(
            json.dumps({"ids": self._ids, "texts": self._texts}, ensure_ascii=False), encoding="utf-8"
        )

    @classmethod
    def load(cls, root: Path, config: BM25Config, *, embedder: Any = None) -> BM25Retriever:
        path = root / cls.name
        try:
            data = json.loads((path / "bm25.json").read_text(encoding="utf-8"))
            ids, texts = data["ids"], data["texts"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise PersistenceError(f"{path}: BM25 index file is missing or corrupt ({exc})") from exc
        if len(ids) != len(texts):
            raise PersistenceError(f"{path}: BM25 index has {len(ids)} ids for {len(texts)} texts")
        self = cls(config)
        self.index(ids, texts)
        return self


FIRST_STAGE_TYPE = FirstStageType(
    build=lambda config, embedder: BM25Retriever(config.bm25),
    load=lambda root, config, embedder: BM25Retriever.load(root, config.bm25),
)
