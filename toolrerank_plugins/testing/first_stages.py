"""Toy first-stage backends for tests of the backend seam.

- :class:`WordSetIndex` implements only ``FirstStage``'s abstract methods, so the base class's defaults
  (``copy`` = deepcopy, ``update`` = remove + add, the copy-and-swap change contract) are what it gets; with
  :func:`words_first_stage_type` it is a plug-in with a config section of its own (:class:`WordsConfig`).
- :class:`SharedWordStore` / :class:`StoreWordIndex` stand in for a database table that several engines share:
  the store is a live resource passed to ``Engine.build`` / ``Engine.load`` (``resources={"store": store}``),
  nothing of it is saved but a marker, and changes go through ``begin_change`` / ``commit_change`` /
  ``rollback_change`` (a writer's rows are invisible to readers until the commit).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.retrieval.base import FirstStage, FirstStageType, Hit


class WordsConfig(ConfigModel):
    """The config section of a :class:`WordSetIndex` plug-in."""

    min_length: int = Field(1, ge=1, description="words shorter than this are not indexed or matched")


def _words(text: str, min_length: int) -> set[str]:
    return {w for w in text.lower().split() if len(w) >= min_length}


class WordSetIndex(FirstStage):
    """Score = number of query words in the text (lower-cased, split on spaces). Saved as ``words/index.json``.

    Example:
        >>> idx = WordSetIndex()
        >>> idx.index(["a", "b"], ["send email", "weather"])
        >>> idx.search(["send an email"], 2)
        [[Hit(id='a', score=2.0, scores=mappingproxy({}))]]
    """

    name = "words"

    def __init__(self, config: WordsConfig | None = None) -> None:
        self.config = config or WordsConfig()
        self._docs: dict[str, set[str]] = {}

    @property
    def ids(self) -> list[str]:
        return list(self._docs)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        self._docs = {}
        self.add(ids, texts)

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._docs.update({i: _words(t, self.config.min_length) for i, t in zip(ids, texts)})

    def remove(self, ids: Sequence[str]) -> None:
        for i in ids:
            self._docs.pop(i, None)

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        out = []
        for q in queries:
            words = _words(q, self.config.min_length)
            scored = sorted(((len(words & d), i) for i, d in self._docs.items()), key=lambda x: -x[0])
            out.append([Hit(i, float(s)) for s, i in scored[:depth] if s > 0])
        return out

    def save(self, root: Path) -> None:
        (root / self.name).mkdir()
        (root / self.name / "index.json").write_text(json.dumps({k: sorted(v) for k, v in self._docs.items()}))

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Any = None) -> WordSetIndex:
        self = cls(config if isinstance(config, WordsConfig) else None)
        self._docs = {k: set(v) for k, v in json.loads((root / cls.name / "index.json").read_text()).items()}
        return self


def words_first_stage_type(name: str = "words") -> FirstStageType:
    """:class:`WordSetIndex` as a plug-in registered under ``name``, reading its section ``config.<name>``
    (a :class:`WordsConfig`), e.g. ``EngineConfig(retriever="words", words={"min_length": 3})``.

    Example:
        >>> from toolrerank_plugins.retrieval.base import register_first_stage
        >>> register_first_stage("words", words_first_stage_type(), replace=True)
    """

    def build(config: Any, embedder: Any) -> WordSetIndex:
        index = WordSetIndex(config.section(name))
        index.name = name
        return index

    def load(root: Path, config: Any, embedder: Any) -> WordSetIndex:
        index = WordSetIndex(config.section(name))
        index.name = name
        index._docs = {k: set(v) for k, v in json.loads((root / name / "index.json").read_text()).items()}
        return index

    return FirstStageType(build=build, load=load, required_files=(f"{name}/index.json",), config_model=WordsConfig)


class SharedWordStore:
    """A stand-in for a database table shared by engines: committed rows (id -> text) in insertion order, a
    version bumped by each commit, and a log of the change calls (``begin`` / ``commit`` / ``rollback``).
    ``fail_commit`` makes the next commit raise (a lost connection, say)."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.version = 0
        self.log: list[str] = []
        self.fail_commit = False
        self.lock = threading.Lock()


class StoreWordIndex(FirstStage):
    """A word-overlap first stage over a :class:`SharedWordStore`: a reader (``pending is None``) searches the
    committed rows; a writer from :meth:`begin_change` holds its own pending rows until the commit."""

    name = "store_words"

    def __init__(self, store: SharedWordStore, pending: dict[str, str] | None = None) -> None:
        self.store = store
        self._pending = pending

    def _rows(self) -> dict[str, str]:
        return self._pending if self._pending is not None else self.store.rows

    def _writable(self) -> dict[str, str]:
        if self._pending is None:
            raise ConfigError("a reader of the shared store cannot change it: change a begin_change() view")
        return self._pending

    @property
    def ids(self) -> list[str]:
        return list(self._rows())

    def begin_change(self) -> StoreWordIndex:
        self.store.log.append("begin")
        return StoreWordIndex(self.store, dict(self.store.rows))

    def commit_change(self, changed: FirstStage) -> FirstStage:
        assert isinstance(changed, StoreWordIndex) and changed._pending is not None
        with self.store.lock:
            if self.store.fail_commit:
                self.store.fail_commit = False
                raise ConnectionError("the store went away during the commit")
            self.store.rows = dict(changed._pending)
            self.store.version += 1
            self.store.log.append("commit")
        return StoreWordIndex(self.store)

    def rollback_change(self, changed: FirstStage) -> None:
        self.store.log.append("rollback")

    def copy(self) -> StoreWordIndex:
        return StoreWordIndex(self.store, None if self._pending is None else dict(self._pending))

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        rows = self._writable() if self._pending is not None else self.store.rows
        rows.clear()
        rows.update(zip(ids, texts))

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._writable().update(zip(ids, texts))

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._writable().update(zip(ids, texts))  # a dict keeps each id's position

    def remove(self, ids: Sequence[str]) -> None:
        rows = self._writable()
        for i in ids:
            rows.pop(i, None)

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        rows = self._rows()
        out = []
        for q in queries:
            words = _words(q, 1)
            scored = sorted(((len(words & _words(t, 1)), i) for i, t in rows.items()), key=lambda x: -x[0])
            out.append([Hit(i, float(s)) for s, i in scored[:depth] if s > 0])
        return out

    def save(self, root: Path) -> None:
        # The rows live in the store: the engine folder only records which store version it was saved at.
        (root / self.name).mkdir()
        (root / self.name / "store.json").write_text(json.dumps({"version": self.store.version}))

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Any = None) -> StoreWordIndex:
        raise ConfigError("a StoreWordIndex loads through its FirstStageType, which takes the store as a resource")


def _store(resources: Mapping[str, Any]) -> SharedWordStore:
    store = resources.get("store")
    if not isinstance(store, SharedWordStore):
        raise ConfigError("first stage 'store_words' needs resources={'store': SharedWordStore()}")
    return store


#: :class:`StoreWordIndex` as a plug-in that takes its store as a live resource.
STORE_WORDS_TYPE = FirstStageType(
    build=lambda config, embedder, resources: StoreWordIndex(_store(resources)),
    load=lambda root, config, embedder, resources: StoreWordIndex(_store(resources)),
    required_files=("store_words/store.json",),
    resources=True,
)
