"""BM25 on bm25s."""

from __future__ import annotations

import copy as _copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import require
from toolrerank_plugins.errors import PersistenceError
from toolrerank_plugins.retrieval.base import FirstStage, FirstStageType, Hit

#: The stopword lists bm25s knows (by language name or code), for error messages; bm25s itself decides.
STOPWORD_LISTS = (
    "en", "english", "en_plus", "english_plus", "de", "german", "nl", "dutch", "fr", "french", "es", "spanish",
    "pt", "portuguese", "it", "italian", "ru", "russian", "sv", "swedish", "no", "norwegian", "zh", "chinese",
    "tr", "turkish", "ko", "korean", "da", "danish",
)  # fmt: skip


class BM25Config(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    k1: float = Field(1.5, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    stopwords: str | None = Field("en", description="bm25s stopword list name, or None")
    # The defaults are the recommended pipeline's (config.DEFAULT_PIPELINE); the "bm25" preset spells out plain.
    tokenizer: Literal["plain", "identifiers"] = Field(
        "plain",
        description="plain: bm25s' word tokens; identifiers: also split camelCase, snake_case, kebab-case "
        "and letter/digit runs into their words, keeping the whole identifier as a token too",
    )
    stemmer: str | None = Field(
        None, description="Snowball stemmer language (e.g. 'english', needs PyStemmer), or None for no stemming"
    )

    @field_validator("stopwords")
    @classmethod
    def _known_stopwords(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                import bm25s  # noqa: F401
            except ImportError:  # checked again, with the install command, when the index is built
                return value
            try:
                _stopword_set(value)
            except ValueError:  # bm25s' own check: it knows a list by its name or language code
                raise ValueError(
                    f"unknown stopword list {value!r}; known: {', '.join(STOPWORD_LISTS)}, or null for none"
                ) from None
        return value

    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                import Stemmer
            except ImportError:  # checked again, with the install command, when the stemmer is first used
                return value
            if value not in Stemmer.algorithms():
                raise ValueError(f"unknown stemmer {value!r}; known: {', '.join(Stemmer.algorithms())}")
        return value


class BM25Retriever(FirstStage):
    """Lexical retrieval with bm25s.

    BM25's IDF depends on the whole corpus, so ``add``/``update``/``remove`` rebuild the index from the
    stored token lists; only new or changed texts are tokenised, and ``update`` keeps each id's position.
    Hits with score 0 (no shared term) are dropped. Saved in the ``bm25/`` folder of an engine directory.

    Every change builds the new lists and bm25s model first and then assigns them (a tokeniser error
    leaves the retriever as it was), and nothing is changed in place, so :meth:`copy` is a cheap shallow
    copy that searches can keep using while the copy changes.
    """

    name = "bm25"

    def score_scales(self) -> Mapping[str, str]:
        return {"bm25": "BM25 of the request's words in the API text: 0 (no shared word) up, unbounded; grows with "
                "rare shared words, so compare it within one query only"}

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
        c = self.config
        if c.tokenizer == "plain" and c.stemmer is None:
            bm25s = require("bm25s")
            return bm25s.tokenize(  # type: ignore[no-any-return]
                list(texts), stopwords=c.stopwords, return_ids=False, show_progress=False
            )
        return [
            tokenize(t, identifiers=c.tokenizer == "identifiers", stopwords=c.stopwords, stemmer=c.stemmer)
            for t in texts
        ]

    def copy(self) -> BM25Retriever:
        # Shallow: the lists and the bm25s model are shared, and every change below replaces them.
        return _copy.copy(self)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        _check_batch(ids, texts)
        tokens = self._tokenize(texts) if texts else []
        self._set(list(ids), list(texts), tokens)

    def _set(self, ids: list[str], texts: list[str], tokens: list[list[str]]) -> None:
        """Build the model for ``tokens``, then make this the retriever's state (one step for readers)."""
        model = self._build_model(tokens)
        self._ids, self._texts, self._tokens, self._model = ids, texts, tokens, model

    def _build_model(self, tokens: list[list[str]]) -> Any:
        bm25s = require("bm25s")
        # bm25s cannot index a corpus without a single term (e.g. only stopwords): no lexical hits then.
        if not any(tokens):
            return None
        model = bm25s.BM25(k1=self.config.k1, b=self.config.b, method=self.config.method)
        model.index(tokens, show_progress=False)
        return model

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        _check_batch(ids, texts)
        if not ids:
            return
        tokens = self._tokenize(texts)
        self._set([*self._ids, *ids], [*self._texts, *texts], [*self._tokens, *tokens])

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Re-tokenise the texts of indexed ``ids``; their positions in :attr:`ids` do not move."""
        _check_batch(ids, texts)
        if not ids:
            return
        pos = {t: i for i, t in enumerate(self._ids)}
        missing = [t for t in ids if t not in pos]
        if missing:
            raise ValueError(f"update(): ids not in the BM25 index: {missing[:5]!r}")
        if len(set(ids)) != len(ids):
            raise ValueError("update(): ids repeat")
        new_tokens = self._tokenize(texts)
        all_texts, all_tokens = list(self._texts), list(self._tokens)
        for t, text, toks in zip(ids, texts, new_tokens):
            all_texts[pos[t]], all_tokens[pos[t]] = text, toks
        self._set(self._ids, all_texts, all_tokens)

    def remove(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        keep = [i for i, t in enumerate(self._ids) if t not in gone]
        self._set([self._ids[i] for i in keep], [self._texts[i] for i in keep], [self._tokens[i] for i in keep])

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        if not queries:
            return []
        ids, model = self._ids, self._model
        if not ids or model is None:
            return [[] for _ in queries]
        k = min(depth, len(ids))
        out: list[list[Hit]] = []
        for toks in self._tokenize(queries):
            # bm25s cannot score an empty query; such queries simply have no lexical hits.
            rows, scores = top_positive(model.get_scores(toks), k) if toks else ((), ())
            out.append([Hit(ids[r], s) for r, s in zip(rows, scores)])
        return out

    def save(self, root: Path) -> None:
        """Write ``bm25.json`` (ids and texts) into ``root/bm25``."""
        path = root / self.name
        path.mkdir(parents=True, exist_ok=True)
        # Texts are stored (not a pickle of the model); loading re-indexes deterministically.
        write_atomic(path / "bm25.json", json.dumps({"ids": self._ids, "texts": self._texts}, ensure_ascii=False))

    @classmethod
    def load(cls, root: Path, config: BM25Config, *, embedder: Any = None) -> BM25Retriever:
        path = root / cls.name
        file = path / "bm25.json"
        data = read_json(file, "BM25 index file")
        ids = data.get("ids") if isinstance(data, dict) else None
        texts = data.get("texts") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids) or len(set(ids)) != len(ids):
            raise PersistenceError(f"{file}: corrupt BM25 index ('ids' must be a list of distinct API ids)")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise PersistenceError(f"{file}: corrupt BM25 index ('texts' must be a list of strings)")
        if len(ids) != len(texts):
            raise PersistenceError(f"{path}: BM25 index has {len(ids)} ids for {len(texts)} texts")
        self = cls(config)
        self.index(ids, texts)
        return self


_WORD = re.compile(r"\w+")
# Word boundaries inside an identifier: lower->Upper (getWeather), UPPER->Upperlower (HTTPServer), letter<->digit.
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])")


def top_positive(scores: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The rows of the ``k`` highest positive ``scores`` and their scores, best first; equal scores in row
    (catalog) order, so a ranking does not depend on numpy's selection algorithm or its version.

    Only the positive scores are selected from (BM25 gives 0 to a document without a shared word, and most
    of a large catalog shares none), which makes this several times faster than a top-k over every row.

    Example:
        >>> top_positive(np.array([0.0, 2.0, 1.0, 2.0, 0.5]), 3)
        ([1, 3, 2], [2.0, 2.0, 1.0])
    """
    rows = np.flatnonzero(scores > 0)
    values = scores[rows]
    if len(rows) > k:  # every row scoring at least the k-th best (ties at the cut included), then the order
        cut = np.partition(values, len(values) - k)[len(values) - k]
        keep = values >= cut
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))[:k]
    return rows[order].tolist(), values[order].tolist()


def split_identifier(token: str) -> list[str]:
    """The words of an identifier, lower-cased: ``getWeatherForecast`` -> ``[get, weather, forecast]``,
    ``evidence_type`` -> ``[evidence, type]``, ``HTTPServer2`` -> ``[http, server, 2]``.

    Example:
        >>> split_identifier("analyzeEvidence"), split_identifier("get-user_id2")
        (['analyze', 'evidence'], ['get', 'user', 'id', '2'])
    """
    return [w.lower() for part in re.split(r"[_\-]+", token) for w in _CAMEL.split(part) if w]


@lru_cache(maxsize=8)
def _stopword_set(name: str | None) -> frozenset[str]:
    if name is None:
        return frozenset()
    from bm25s.stopwords import STOPWORDS_EN  # bm25s' own list for "en"/"english", the plain tokenizer's too

    if name not in ("en", "english"):
        bm25s = require("bm25s")
        return frozenset(bm25s.tokenization._infer_stopwords(name))
    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=8)
def _stem_function(language: str) -> Callable[[list[str]], list[str]]:
    stemmer = require("Stemmer").Stemmer(language)
    return stemmer.stemWords  # type: ignore[no-any-return]


def tokenize(
    text: str, *, identifiers: bool = True, stopwords: str | None = "en", stemmer: str | None = None
) -> list[str]:
    """BM25 tokens of ``text``: lower-cased words of two or more characters without stopwords; with
    ``identifiers`` each identifier (``analyzeEvidence``, ``evidence_type``, ``get-forecast``) also yields
    its words, so "analyze the evidence" matches ``analyzeEvidence``; ``stemmer`` names a Snowball
    language (PyStemmer).

    Example:
        >>> tokenize("Call analyzeEvidence with evidence_type")
        ['call', 'analyzeevidence', 'analyze', 'evidence', 'evidence_type', 'evidence', 'type']
    """
    out: list[str] = []
    for raw in _RAW.findall(text):
        out.extend(_raw_tokens(raw, identifiers, stopwords, stemmer))
    return out


_RAW = re.compile(r"\w+(?:-\w+)*")


@lru_cache(maxsize=262144)
def _raw_tokens(raw: str, identifiers: bool, stopwords: str | None, stemmer: str | None) -> tuple[str, ...]:
    # Memoised per distinct raw token: catalogs repeat the same words and identifiers over and over.
    words = split_identifier(raw) if identifiers else [w.lower() for w in _WORD.findall(raw)]
    if identifiers and len(words) > 1:
        words.insert(0, raw.lower().strip("_-"))
    stop = _stopword_set(stopwords)
    words = [t for t in words if len(t) > 1 and t not in stop]
    if not stemmer or not words:
        return tuple(words)
    # Each word and, where it differs, its stem: a variant ("forecasts") still matches, and an exact match
    # counts more than a shared stem alone.
    out: list[str] = []
    for word, stem in zip(words, _stem_function(stemmer)(words)):
        out.append(word)
        if stem != word:
            out.append(stem)
    return tuple(out)


def _check_batch(ids: Sequence[str], texts: Sequence[str]) -> None:
    if len(ids) != len(texts):
        raise ValueError(f"ids and texts must have the same length ({len(ids)} ids, {len(texts)} texts)")


BM25_FILES = ("bm25/bm25.json",)

FIRST_STAGE_TYPE = FirstStageType(
    build=lambda config, embedder: BM25Retriever(config.bm25),
    load=lambda root, config, embedder: BM25Retriever.load(root, config.bm25),
    required_files=BM25_FILES,
)
