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

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.errors import ConfigError, StaleStoreError
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.retrieval.base import CatalogChange, FirstStage, FirstStageType, Hit, StoreChanges


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
        write_atomic(root / self.name / "index.json", json.dumps({k: sorted(v) for k, v in self._docs.items()}))

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
    """A stand-in for a database table shared by engines: committed rows (id -> text) and records (id -> ToolSpec)
    in insertion order, a version bumped by each commit with what it changed, and a log of the change calls
    (``begin`` / ``commit`` / ``rollback``). ``fail_commit`` makes the next commit raise (a lost connection)."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.specs: dict[str, ToolSpec] = {}
        self.version = 0
        self.changes: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []  # (version, upserted, removed)
        self.log: list[str] = []
        self.fail_commit = False
        self.lock = threading.Lock()


class StoreWordIndex(FirstStage):
    """A word-overlap first stage over a :class:`SharedWordStore`: a reader (``pending is None``) searches the
    committed rows; a writer from :meth:`begin_change` holds its own pending rows until the commit. It follows
    other engines' commits (``poll_interval`` seconds between checks; 0: before every search), and a writer that
    began on an older version than the store's raises :class:`StaleStoreError` (the engine then follows and
    retries). Unlike a database it has no snapshots: a reader sees the latest commit."""

    name = "store_words"

    def __init__(
        self, store: SharedWordStore, pending: dict[str, str] | None = None, *, version: int = 0, poll: float = 0.0
    ) -> None:
        self.store = store
        self._pending = pending
        self.version = version
        self._poll = poll

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
        if self.store.version != self.version:
            self.store.log.append("stale")
            raise StaleStoreError(f"store at version {self.store.version}, this engine at {self.version}")
        return StoreWordIndex(self.store, dict(self.store.rows), version=self.version, poll=self._poll)

    def commit_change(self, changed: FirstStage, change: CatalogChange | None = None) -> FirstStage:
        assert isinstance(changed, StoreWordIndex) and changed._pending is not None
        store = self.store
        with store.lock:
            if store.fail_commit:
                store.fail_commit = False
                raise ConnectionError("the store went away during the commit")
            if store.version != self.version:
                raise StaleStoreError(f"store at version {store.version}, this engine at {self.version}")
            store.rows = dict(changed._pending)
            store.version += 1
            if change is not None:
                upserted = (*change.added, *change.updated)
                store.specs.update({i: change.catalog[i] for i in upserted})
                for i in change.removed:
                    store.specs.pop(i, None)
                store.changes.append((store.version, upserted, change.removed))
            store.log.append("commit")
            return StoreWordIndex(store, version=store.version, poll=self._poll)

    def rollback_change(self, changed: FirstStage) -> None:
        self.store.log.append("rollback")

    @property
    def poll_interval(self) -> float | None:
        return self._poll

    def poll_changes(self) -> StoreChanges | None:
        store = self.store
        with store.lock:
            if store.version == self.version:
                return None
            upserted: dict[str, None] = {}
            removed: set[str] = set()
            for version, ups, rems in store.changes:
                if version > self.version:
                    upserted.update(dict.fromkeys(ups))
                    removed.update(rems)
                    for i in ups:
                        removed.discard(i)
                    for i in rems:
                        upserted.pop(i, None)
            order = {i: n for n, i in enumerate(store.rows)}
            specs = sorted((store.specs[i] for i in upserted if i in store.specs), key=lambda s: order[s.id])
            return StoreChanges(store.version, tuple(specs), tuple(sorted(removed)))

    def follow(self, changes: StoreChanges, texts: Mapping[str, str]) -> FirstStage:
        return StoreWordIndex(self.store, version=changes.version, poll=self._poll)

    def copy(self) -> StoreWordIndex:
        pending = None if self._pending is None else dict(self._pending)
        return StoreWordIndex(self.store, pending, version=self.version, poll=self._poll)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        rows = self._writable()
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
        write_atomic(root / self.name / "store.json", json.dumps({"version": self.version}))

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
    load=lambda root, config, embedder, resources: StoreWordIndex(
        _store(resources), version=json.loads((root / "store_words" / "store.json").read_text())["version"]
    ),
    required_files=("store_words/store.json",),
    resources=True,
)
