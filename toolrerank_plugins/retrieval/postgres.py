"""First stages over PostgreSQL + pgvector: one catalog shared by many engine processes.

One table holds, per API, its record (the :class:`~toolrerank_plugins.records.ToolSpec` as JSON), the text the
engine rendered for it, its BM25 tokens and its embedding (a pgvector ``vector``); a second table holds the
store's version, the engine config, the catalog's edges and seen tools. Two first stages read it, and hybrid
fuses them like any parts:

- ``pgvector``: dense retrieval in the database (exact: a scan ordered by inner product; or an HNSW index). The
  vectors stay in PostgreSQL: a serving process holds none of them.
- ``pg_bm25``: BM25 over the stored tokens. Each process keeps a bm25s index built from the tokens in the table
  (no text is tokenised again, nothing is encoded), so its rankings are exactly the in-memory ``bm25``'s.

The recommended pipeline on PostgreSQL is ``EngineConfig(hybrid={"parts": ["pgvector", "pg_bm25"]})`` with the
default's stages (:func:`toolrerank_plugins.shared.postgres_config` builds it); ``connect_engine`` opens what a
store holds in a worker that starts later.

Changes are transactions. Rows are versioned (``added`` / ``removed``: the versions that wrote and retired the
row), and every reader searches the rows visible at its engine's version, so a reader sees the catalog before or
after another process's change, never a mix, and follows new versions (:meth:`PgVectorRetriever.poll_changes`)
without reloading the rest. A change is written in one transaction at commit time; it first locks the version
row, so writers take turns, and a writer whose snapshot is older than the store's gets a
:class:`~toolrerank_plugins.errors.StaleStoreError` (the engine follows the store and makes its change again).
Retired row versions are deleted once ``keep_versions`` newer versions exist.

The connection is a live resource, never config: ``Engine.build(catalog, config, resources={"postgres": pool})``
with a ``psycopg_pool.ConnectionPool`` (or a conninfo string: a pool is made for it). A lost connection (the
server restarted) is retried once on a fresh connection; then a :class:`~toolrerank_plugins.errors.StoreError`
names the store and the cause.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import require
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.errors import ConfigError, PersistenceError, StaleStoreError, StoreError
from toolrerank_plugins.loaders.jsonl import spec_from_dict
from toolrerank_plugins.records import Edge, ToolSpec
from toolrerank_plugins.retrieval.base import (
    CatalogChange,
    DocTransform,
    FirstStage,
    FirstStageType,
    Hit,
    StoreChanges,
)
from toolrerank_plugins.retrieval.bm25 import BM25Retriever
from toolrerank_plugins.retrieval.dense import DenseRetriever, text_key

logger = logging.getLogger(__name__)

_TABLE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


class PostgresConfig(ConfigModel):
    """The ``pgvector`` section of the engine config (``pg_bm25`` reads it too): where the store is and how
    the vectors are searched. The connection itself is a resource (``resources={"postgres": pool}``)."""

    table: str = Field("toolrerank", description="prefix of the store's tables: <table>_apis and <table>_meta")
    resource: str = Field("postgres", description="the key of the connection pool in Engine.build/load resources")
    index: Literal["exact", "hnsw"] = Field("exact", description="exact inner-product scan, or an HNSW index")
    hnsw_m: int = Field(16, ge=2, le=100)
    hnsw_ef_construction: int = Field(64, ge=4, le=1000)
    hnsw_ef_search: int = Field(200, ge=1, le=1000)
    timeout: float = Field(
        10.0, gt=0, le=3600, description="seconds to wait for a connection before a StoreError (a server that is down)"
    )
    poll_interval: float = Field(
        1.0, ge=0, le=86400, description="seconds between a process's checks for other processes' commits"
    )
    keep_versions: int = Field(
        1000, ge=1, le=2**31, description="retired row versions are deleted once this many newer versions exist"
    )

    @field_validator("table")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _TABLE.match(value):
            raise ValueError(f"table must be a lower-case SQL identifier of at most 41 characters, got {value!r}")
        return value


# -- the store ------------------------------------------------------------------------------------------------
@dataclass
class _Pending:
    """One engine change, staged by the parts taking part in it and written by the first commit."""

    base: int
    full: bool = False  # index(): the change replaces the whole catalog
    texts: dict[str, str] = field(default_factory=dict)
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: dict[str, list[str]] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    members: int = 0
    committed: int | None = None  # the version the commit wrote
    failed: bool = False


class PostgresStore:
    """The tables of one store (``table``) over one connection pool; shared by every part of an engine, and by
    the engines of one process, that name the same pool and table (:meth:`of`)."""

    _stores: weakref.WeakValueDictionary[tuple[int, str], PostgresStore] = weakref.WeakValueDictionary()
    _pools: dict[str, Any] = {}
    _lock = threading.Lock()

    def __init__(self, pool: Any, table: str, timeout: float = 10.0) -> None:
        self.pool = pool
        self.table = table
        self.timeout = timeout
        self._vector_info: Any = None
        self._local = threading.local()

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def of(cls, resources: Mapping[str, Any] | None, config: PostgresConfig) -> PostgresStore:
        """The store of ``config.table`` over the pool ``resources[config.resource]`` (a
        ``psycopg_pool.ConnectionPool``, or a conninfo string for which one pool per process is made)."""
        pool = (resources or {}).get(config.resource)
        if pool is None:
            raise ConfigError(
                f"the PostgreSQL first stages need a connection: pass resources={{{config.resource!r}: pool}} "
                "(a psycopg_pool.ConnectionPool, or a conninfo string) to Engine.build / Engine.load"
            )
        if isinstance(pool, str):
            with cls._lock:
                if pool not in cls._pools:
                    pool_mod = require("psycopg_pool")
                    cls._pools[pool] = pool_mod.ConnectionPool(
                        pool, min_size=1, max_size=8, open=True, kwargs={"connect_timeout": max(1, int(config.timeout))}
                    )
                pool = cls._pools[pool]
        key = (id(pool), config.table)
        with cls._lock:
            store = cls._stores.get(key)
            if store is None or store.pool is not pool:
                store = cls(pool, config.table, config.timeout)
                cls._stores[key] = store
            store.timeout = config.timeout
            return store

    @property
    def apis(self) -> str:
        return f"{self.table}_apis"

    @property
    def meta_table(self) -> str:
        return f"{self.table}_meta"

    # -- connections -------------------------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection with pgvector's types registered, as one transaction (committed on success,
        rolled back on error). A connection lost before any statement ran (a restarted server) is retried
        once; other database errors become a :class:`StoreError` naming the store."""
        psycopg = require("psycopg")
        pool_errors = require("psycopg_pool")
        try:
            with self.pool.connection(timeout=self.timeout) as conn:
                with conn.transaction():
                    self._register(conn)
                with conn.transaction():
                    yield conn
        except (StaleStoreError, ConfigError):
            raise
        except pool_errors.PoolTimeout as exc:
            raise StoreError(
                f"PostgreSQL store {self.table!r}: no connection within {self.timeout:g} s (is the server up?): {exc}"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store {self.table!r}: {type(exc).__name__}: {exc}".strip()) from exc

    def run(self, work: Any, *, retries: int = 1) -> Any:
        """``work(conn)`` in a transaction; a connection the server dropped (restart, failover) is replaced and
        the work retried ``retries`` times, so a reader survives a server restart."""
        psycopg = require("psycopg")
        for attempt in range(retries + 1):
            try:
                with self.connection() as conn:
                    return work(conn)
            except StoreError as exc:
                lost = isinstance(exc.__cause__, (psycopg.OperationalError, psycopg.InterfaceError))
                lost = lost and not isinstance(exc.__cause__, require("psycopg_pool").PoolTimeout)
                if not lost or attempt == retries:
                    raise
                logger.warning("PostgreSQL store %r: connection lost (%s); retrying", self.table, exc.__cause__)
                self.pool.check()  # drop the pool's dead connections
        raise AssertionError("unreachable")  # pragma: no cover

    def _register(self, conn: Any) -> None:
        register_vector_info = require("pgvector.psycopg.vector").register_vector_info
        if getattr(conn, "_toolrerank_vector", False):
            return
        if self._vector_info is None:
            TypeInfo = require("psycopg.types").TypeInfo
            info = TypeInfo.fetch(conn, "vector")
            if info is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                info = TypeInfo.fetch(conn, "vector")
            self._vector_info = info
        register_vector_info(conn, self._vector_info)
        conn._toolrerank_vector = True

    # -- schema ------------------------------------------------------------------------------------
    def _create(self, conn: Any, dimension: int | None) -> None:
        """Create the tables and their indexes if missing, inside the caller's transaction (see
        docs/postgres.md for the schema); an embedding column made without a dimension gets one when known."""
        sql = require("psycopg.sql")
        apis, meta = sql.Identifier(self.apis), sql.Identifier(self.meta_table)
        dim = sql.SQL("vector({})").format(sql.Literal(int(dimension))) if dimension else sql.SQL("vector")
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))  # one creator at a time
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)").format(meta))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (id text NOT NULL, added bigint NOT NULL, removed bigint, "
                "pos bigint NOT NULL, spec jsonb NOT NULL, text text NOT NULL, tokens text[], embedding {}, "
                "PRIMARY KEY (id, added))"
            ).format(apis, dim)
        )
        for suffix, how in (("live", "(pos) WHERE removed IS NULL"), ("added", "(added)"), ("removed", "(removed)")):
            conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} " + how).format(
                    sql.Identifier(f"{self.apis}_{suffix}"), apis
                )
            )
        conn.execute(
            sql.SQL("INSERT INTO {} (key, value) VALUES ('version', '0') ON CONFLICT (key) DO NOTHING").format(meta)
        )
        if dimension:
            typmod = conn.execute(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
                (self.apis,),
            ).fetchone()
            if typmod is not None and typmod[0] < 0:  # made by a part without vectors: give the column its size
                conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE {}").format(apis, dim))

    def ensure_hnsw(self, config: PostgresConfig) -> None:
        sql = require("psycopg.sql")

        def work(conn: Any) -> None:
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            conn.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_ip_ops) "
                    "WITH (m = {}, ef_construction = {})"
                ).format(
                    sql.Identifier(f"{self.apis}_hnsw"),
                    sql.Identifier(self.apis),
                    sql.Literal(config.hnsw_m),
                    sql.Literal(config.hnsw_ef_construction),
                )
            )

        self.run(work)

    # -- reads ---------------------------------------------------------------------------------------
    def version(self) -> int:
        """The store's latest committed version (0: no store yet under this table prefix)."""
        sql = require("psycopg.sql")
        query = sql.SQL("SELECT value FROM {} WHERE key = 'version'").format(sql.Identifier(self.meta_table))

        def work(conn: Any) -> Any:
            if conn.execute("SELECT to_regclass(%s)", (self.meta_table,)).fetchone()[0] is None:
                return None
            return conn.execute(query).fetchone()

        row = self.run(work)
        return int(row[0]) if row is not None else 0

    def meta(self) -> dict[str, Any]:
        sql = require("psycopg.sql")
        query = sql.SQL("SELECT key, value FROM {}").format(sql.Identifier(self.meta_table))
        return dict(self.run(lambda conn: conn.execute(query).fetchall()))

    def _visible(self) -> Any:
        return require("psycopg.sql").SQL("added <= %(v)s AND (removed IS NULL OR removed > %(v)s)")

    def rows(self, version: int, columns: Sequence[str], ids: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
        """``(id, *columns)`` of the rows visible at ``version`` (all, or those of ``ids``), in catalog order."""
        sql = require("psycopg.sql")
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in ("id", *columns))
        where = self._visible() + (sql.SQL(" AND id = ANY(%(ids)s)") if ids is not None else sql.SQL(""))
        query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY pos").format(cols, sql.Identifier(self.apis), where)
        params = {"v": version, "ids": list(ids) if ids is not None else None}
        return list(self.run(lambda conn: conn.execute(query, params).fetchall()))

    def oldest_readable(self) -> int:
        """The oldest version whose rows are all still kept (older snapshots may miss retired rows)."""
        value = self.meta().get("vacuumed_below", 0)
        return int(value)

    def changes(self, since: int) -> StoreChanges | None:
        """What was committed after version ``since`` (None: nothing). Raises :class:`StaleStoreError` when rows
        of versions after ``since`` were already deleted (the snapshot is too old to follow: connect again)."""
        sql = require("psycopg.sql")
        apis, meta = sql.Identifier(self.apis), sql.Identifier(self.meta_table)

        def work(conn: Any) -> StoreChanges | None:
            values = dict(conn.execute(sql.SQL("SELECT key, value FROM {}").format(meta)).fetchall())
            version = int(values.get("version", 0))
            if version == since:
                return None
            if int(values.get("vacuumed_below", 0)) > since:
                raise StaleStoreError(
                    f"PostgreSQL store {self.table!r} no longer keeps the rows of version {since} (now at {version}); "
                    "open the engine again (connect_engine)"
                )
            params = {"s": since, "v": version}
            upserted = conn.execute(
                sql.SQL(
                    "SELECT spec FROM {} WHERE added > %(s)s AND added <= %(v)s "
                    "AND (removed IS NULL OR removed > %(v)s) ORDER BY pos"
                ).format(apis),
                params,
            ).fetchall()
            gone = conn.execute(
                sql.SQL(
                    "SELECT DISTINCT id FROM {} r WHERE r.removed > %(s)s AND r.removed <= %(v)s AND r.added <= %(s)s "
                    "AND NOT EXISTS (SELECT 1 FROM {} n WHERE n.id = r.id AND n.added <= %(v)s "
                    "AND (n.removed IS NULL OR n.removed > %(v)s))"
                ).format(apis, apis),
                params,
            ).fetchall()
            catalog = values.get("catalog") or {}
            return StoreChanges(
                version,
                tuple(_spec(row[0]) for row in upserted),
                tuple(sorted(r[0] for r in gone)),
                tuple(_edge(e) for e in catalog.get("edges", [])),
                tuple(catalog.get("seen_tools", [])),
            )

        return self.run(work)  # type: ignore[no-any-return]

    # -- changes ---------------------------------------------------------------------------------------
    def begin(self, base: int) -> _Pending:
        """Join (or open) this thread's pending change: the parts of one engine change stage into one object."""
        pending: _Pending | None = getattr(self._local, "pending", None)
        if pending is None or pending.committed is not None or pending.failed:
            pending = _Pending(base)
            self._local.pending = pending
        elif pending.base != base:
            raise StaleStoreError(f"parts of one engine disagree on the store version ({pending.base} vs {base})")
        pending.members += 1
        return pending

    def release(self, pending: _Pending) -> None:
        pending.members -= 1
        if pending.members <= 0 and getattr(self._local, "pending", None) is pending:
            self._local.pending = None

    def commit(
        self, pending: _Pending, change: CatalogChange | None, config: PostgresConfig, engine_config: Any
    ) -> int:
        """Write ``pending`` (and the records of ``change``) in one transaction; the new version. The first part
        to commit writes for all."""
        if pending.committed is not None:
            return pending.committed
        sql = require("psycopg.sql")
        apis, meta = sql.Identifier(self.apis), sql.Identifier(self.meta_table)
        catalog = change.catalog if change is not None else None

        dimension = next((len(v) for v in pending.embeddings.values()), None)

        def work(conn: Any) -> int:
            if pending.full or dimension:
                self._create(conn, dimension)
            row = conn.execute(sql.SQL("SELECT value FROM {} WHERE key = 'version' FOR UPDATE").format(meta)).fetchone()
            current = int(row[0]) if row is not None else 0
            if current != pending.base:
                raise StaleStoreError(
                    f"PostgreSQL store {self.table!r} is at version {current}, this engine's change was made on "
                    f"{pending.base}"
                )
            new = current + 1
            params: dict[str, Any] = {"n": new}
            if pending.full:
                conn.execute(sql.SQL("UPDATE {} SET removed = %(n)s WHERE removed IS NULL").format(apis), params)
            retired = sorted(pending.removed | set(pending.texts)) if not pending.full else []
            positions: dict[str, int] = {}
            if retired:
                for rid, pos in conn.execute(
                    sql.SQL(
                        "UPDATE {} SET removed = %(n)s WHERE id = ANY(%(ids)s) AND removed IS NULL RETURNING id, pos"
                    ).format(apis),
                    {**params, "ids": retired},
                ).fetchall():
                    positions[rid] = int(pos)
            start = conn.execute(sql.SQL("SELECT coalesce(max(pos), -1) + 1 FROM {}").format(apis)).fetchone()[0]
            order = catalog.ids if catalog is not None else list(pending.texts)
            written = [i for i in order if i in pending.texts]
            with conn.cursor().copy(
                sql.SQL("COPY {} (id, added, pos, spec, text, tokens, embedding) FROM STDIN").format(apis)
            ) as copy:
                json_type = require("psycopg.types.json").Jsonb
                for i in written:
                    pos = positions.get(i)
                    if pos is None:
                        pos, start = start, start + 1
                    spec = json_type(catalog[i].to_dict()) if catalog is not None and i in catalog else None
                    emb = pending.embeddings.get(i)
                    copy.write_row((i, new, pos, spec, pending.texts[i], pending.tokens.get(i), emb))
            if catalog is not None:
                state = {"edges": [_edge_dict(e) for e in catalog.edges], "seen_tools": sorted(catalog.seen_tools)}
                _put_meta(conn, meta, "catalog", state)
            if engine_config is not None:
                _put_meta(conn, meta, "engine", engine_config.model_dump(mode="json"))
            _put_meta(conn, meta, "version", new)
            cutoff = new - config.keep_versions
            if cutoff > 0:
                gone = conn.execute(
                    sql.SQL("DELETE FROM {} WHERE removed IS NOT NULL AND removed <= %(c)s").format(apis), {"c": cutoff}
                ).rowcount
                if gone:
                    _put_meta(conn, meta, "vacuumed_below", cutoff)
            conn.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(f"{self.table}_changes")))
            return new

        try:
            pending.committed = self.run(work, retries=0)  # a write is never repeated blindly
        except BaseException:
            pending.failed = True
            raise
        return pending.committed


def _put_meta(conn: Any, meta: Any, key: str, value: Any) -> None:
    sql = require("psycopg.sql")
    Jsonb = require("psycopg.types.json").Jsonb
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        ).format(meta),
        (key, Jsonb(value)),
    )


def _spec(data: Any) -> ToolSpec:
    return spec_from_dict(data if isinstance(data, dict) else json.loads(data), "PostgreSQL store row")


def _edge_dict(e: Edge) -> dict[str, Any]:
    return {"source": e.source, "target": e.target, "type": e.type, "origin": e.origin, "weight": e.weight}


def _edge(d: Mapping[str, Any]) -> Edge:
    return Edge(str(d["source"]), str(d["target"]), str(d.get("type", "data_flow")), str(d.get("origin", "labelled")),
                float(d.get("weight", 1.0)))


# -- the parts ------------------------------------------------------------------------------------------------
class _StorePart:
    """What both PostgreSQL parts share: the store, the version their snapshot is at, and the change contract."""

    name: str
    store: PostgresStore
    pg: PostgresConfig
    version: int
    _pending: _Pending | None
    _engine_config: Any

    def _writable(self) -> _Pending:
        if self._pending is None:
            raise ConfigError(f"{self.name}: a reader of the shared store cannot change it; change a begin_change()")
        return self._pending

    @property
    def poll_interval(self) -> float | None:
        return self.pg.poll_interval

    def poll_changes(self) -> StoreChanges | None:
        return self.store.changes(self.version)


class PgVectorRetriever(_StorePart, DenseRetriever):
    """Dense retrieval in PostgreSQL (see the module docs). Query encoding, pooled multi-request vectors and the
    recent-query cache are :class:`DenseRetriever`'s; the document vectors live in the table only."""

    name = "pgvector"
    searches_jointly = False  # each vector is a query of its own: both threads search theirs

    def __init__(
        self,
        pg: PostgresConfig,
        engine_config: Any,
        store: PostgresStore,
        *,
        embedder: Embedder | None = None,
        version: int = 0,
        ids: Sequence[str] = (),
    ) -> None:
        DenseRetriever.__init__(self, engine_config.dense, embedder=embedder)
        self.pg = pg
        self.store = store
        self.version = version
        self._engine_config = engine_config
        self._ids = list(ids)
        self._pending = None

    def score_scales(self) -> Mapping[str, str]:
        how = "HNSW (approximate)" if self.pg.index == "hnsw" else "exact scan"
        return {"pgvector": f"cosine similarity of request and API text vectors ({how} in PostgreSQL), -1 to 1"}

    # -- the change contract -----------------------------------------------------------------------------
    def _clone(self, *, version: int | None = None, ids: Sequence[str] | None = None) -> PgVectorRetriever:
        new = PgVectorRetriever.__new__(PgVectorRetriever)
        new.__dict__.update(self.__dict__)
        new._pending = None
        if version is not None:
            new.version = version
        if ids is not None:
            new._ids = list(ids)
        return new

    def copy(self) -> PgVectorRetriever:
        new = self._clone()
        new._pending = self._pending
        return new

    def begin_change(self) -> PgVectorRetriever:
        new = self._clone()
        new._pending = self.store.begin(self.version)
        return new

    def commit_change(self, changed: FirstStage, change: CatalogChange | None = None) -> FirstStage:
        assert isinstance(changed, PgVectorRetriever) and changed._pending is not None
        pending = changed._pending
        try:
            version = self.store.commit(pending, change, self.pg, self._engine_config)
            if pending.full and self.pg.index == "hnsw":
                self.store.ensure_hnsw(self.pg)
        finally:
            self.store.release(pending)
        return changed._clone(version=version)

    def rollback_change(self, changed: FirstStage) -> None:
        if isinstance(changed, PgVectorRetriever) and changed._pending is not None:
            changed._pending.failed = True
            self.store.release(changed._pending)

    def follow(self, changes: StoreChanges, texts: Mapping[str, str]) -> FirstStage:
        gone = set(changes.removed)
        ids = [i for i in self._ids if i not in gone]
        known = set(ids)
        ids += [s.id for s in changes.upserted if s.id not in known]
        return self._clone(version=changes.version, ids=ids)

    # -- writes (staged until the commit) ----------------------------------------------------------------
    def _stage(self, ids: Sequence[str], texts: Sequence[str], cache: Mapping[str, np.ndarray] | None = None) -> None:
        """Encode ``texts`` (those whose :func:`text_key` is in ``cache`` are not encoded again) and stage them."""
        pending = self._writable()
        keys = [text_key(t) for t in texts]
        cache = cache or {}
        todo = [n for n, k in enumerate(keys) if k not in cache]
        new = np.asarray(self._encode([texts[n] for n in todo]), dtype=np.float32) if todo else None
        encoded = dict(zip(todo, new)) if new is not None else {}
        for n, (i, t) in enumerate(zip(ids, texts)):
            pending.texts[i] = t
            pending.embeddings[i] = encoded[n] if n in encoded else np.asarray(cache[keys[n]], dtype=np.float32)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, np.ndarray] | None = None) -> None:
        pending = self._writable()
        pending.full = True
        pending.texts.clear()
        pending.embeddings.clear()
        pending.removed.clear()
        self._stage(ids, texts, cache)
        self._ids = list(ids)

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._stage(ids, texts)
        self._ids = [*self._ids, *ids]

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._stage(ids, texts)

    def remove(self, ids: Sequence[str]) -> None:
        self._writable().removed.update(ids)
        gone = set(ids)
        self._ids = [i for i in self._ids if i not in gone]

    # -- reads ---------------------------------------------------------------------------------------
    @property
    def embeddings(self) -> np.ndarray:
        """Every document vector, read from the store (a serving process keeps none)."""
        found = self.embeddings_for(self._ids) if self._ids else None
        return found if found is not None else np.zeros((0, self.embedder.dimension), dtype=np.float32)

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        rows = dict(self.store.rows(self.version, ["embedding"], ids))
        if any(rows.get(i) is None for i in ids):
            return None
        return np.stack([_vector(rows[i]) for i in ids]) if ids else np.zeros((0, self.embedder.dimension), np.float32)

    def embedding_cache(self) -> dict[str, np.ndarray]:
        return {}

    def set_document_transform(self, transform: DocTransform | None) -> None:
        if transform is not None:
            raise ConfigError(
                "pgvector keeps its vectors in PostgreSQL and cannot re-index them through a document transform "
                "(TGR graph propagation): use the tgr stage with propagate: false (the default pipeline's setting)"
            )

    def search_vectors(self, vectors: np.ndarray, depth: int) -> list[list[Hit]]:
        if not len(vectors) or not self._ids:
            return [[] for _ in range(len(vectors))]
        sql = require("psycopg.sql")
        hnsw = self.pg.index == "hnsw"
        # exact: ties in catalog order, as faiss's flat index gives them; hnsw: the index's order alone
        order = sql.SQL("embedding <#> %(q)s") if hnsw else sql.SQL("embedding <#> %(q)s, pos")
        query = sql.SQL("SELECT id, -(embedding <#> %(q)s) FROM {} WHERE {} ORDER BY {} LIMIT %(k)s").format(
            sql.Identifier(self.store.apis), self.store._visible(), order
        )
        k = min(depth, len(self._ids))

        def work(conn: Any) -> list[list[Hit]]:
            if hnsw:
                conn.execute(f"SET LOCAL hnsw.ef_search = {max(int(self.pg.hnsw_ef_search), k)}")
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            else:
                conn.execute("SET LOCAL enable_indexscan = off")  # exact: never the approximate index
            out = []
            with conn.pipeline():
                cursors = []
                for vec in vectors:
                    cur = conn.cursor()
                    cur.execute(query, {"q": np.asarray(vec, dtype=np.float32), "v": self.version, "k": k})
                    cursors.append(cur)
            for cur in cursors:
                rows = cur.fetchall()
                if hnsw:
                    rows.sort(key=lambda r: -r[1])
                out.append([Hit(i, float(s)) for i, s in rows])
            return out

        return self.store.run(work)  # type: ignore[no-any-return]

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, root: Path) -> None:
        folder = root / self.name
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "store.json", json.dumps({"table": self.store.table, "version": self.version}))

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Embedder | None = None) -> PgVectorRetriever:
        raise ConfigError("pgvector loads through its first-stage type, which takes the connection as a resource")

    @classmethod
    def attach(
        cls, engine_config: Any, embedder: Embedder | None, resources: Mapping[str, Any] | None, version: int | None
    ) -> PgVectorRetriever:
        pg = engine_config.section("pgvector")
        store = PostgresStore.of(resources, pg)
        at = store.version() if version is None else version
        _check_readable(store, at)
        ids = [r[0] for r in store.rows(at, [])]
        return cls(pg, engine_config, store, embedder=embedder, version=at, ids=ids)


class PgBM25Retriever(_StorePart, BM25Retriever):
    """BM25 over the tokens stored in PostgreSQL (see the module docs): a local bm25s index per process, built
    from the table's tokens, so no text is tokenised again when a process starts or follows a change."""

    name = "pg_bm25"

    def __init__(self, pg: PostgresConfig, engine_config: Any, store: PostgresStore, *, version: int = 0) -> None:
        BM25Retriever.__init__(self, engine_config.bm25)
        self.pg = pg
        self.store = store
        self.version = version
        self._engine_config = engine_config
        self._pending = None

    def score_scales(self) -> Mapping[str, str]:
        return {"pg_bm25": "BM25 of the request's words in the API text (tokens kept in PostgreSQL): 0 up, unbounded"}

    def _clone(self, *, version: int | None = None) -> PgBM25Retriever:
        new = PgBM25Retriever.__new__(PgBM25Retriever)
        new.__dict__.update(self.__dict__)
        new._pending = None
        if version is not None:
            new.version = version
        return new

    def copy(self) -> PgBM25Retriever:
        new = self._clone()
        new._pending = self._pending
        return new

    def begin_change(self) -> PgBM25Retriever:
        new = self._clone()
        new._pending = self.store.begin(self.version)
        return new

    def commit_change(self, changed: FirstStage, change: CatalogChange | None = None) -> FirstStage:
        assert isinstance(changed, PgBM25Retriever) and changed._pending is not None
        pending = changed._pending
        try:
            version = self.store.commit(pending, change, self.pg, self._engine_config)
        finally:
            self.store.release(pending)
        return changed._clone(version=version)

    def rollback_change(self, changed: FirstStage) -> None:
        if isinstance(changed, PgBM25Retriever) and changed._pending is not None:
            changed._pending.failed = True
            self.store.release(changed._pending)

    def _stage_tokens(self, ids: Sequence[str]) -> None:
        pending = self._writable()
        pos = {t: n for n, t in enumerate(self._ids)}
        for i in ids:
            n = pos[i]
            pending.texts[i] = self._texts[n]
            pending.tokens[i] = self._tokens[n]

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        pending = self._writable()
        BM25Retriever.index(self, ids, texts)
        pending.full = True
        pending.removed.clear()
        self._stage_tokens(ids)

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._writable()
        BM25Retriever.add(self, ids, texts)
        self._stage_tokens(ids)

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self._writable()
        BM25Retriever.update(self, ids, texts)
        self._stage_tokens(ids)

    def remove(self, ids: Sequence[str]) -> None:
        self._writable().removed.update(ids)
        BM25Retriever.remove(self, ids)

    def follow(self, changes: StoreChanges, texts: Mapping[str, str]) -> FirstStage:
        new = self._clone(version=changes.version)
        rows = {r[0]: r for r in self.store.rows(changes.version, ["text", "tokens"], [s.id for s in changes.upserted])}
        gone = set(changes.removed)
        ids, all_texts, tokens = [], [], []
        for i, t, toks in zip(self._ids, self._texts, self._tokens):
            if i in gone:
                continue
            if i in rows:
                t, toks = rows[i][1], list(rows[i][2] or [])
            ids.append(i)
            all_texts.append(t)
            tokens.append(toks)
        known = set(ids)
        for s in changes.upserted:
            if s.id not in known and s.id in rows:
                ids.append(s.id)
                all_texts.append(rows[s.id][1])
                tokens.append(list(rows[s.id][2] or []))
        new._set(ids, all_texts, tokens)
        return new

    def save(self, root: Path) -> None:
        folder = root / self.name
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "store.json", json.dumps({"table": self.store.table, "version": self.version}))

    @classmethod
    def load(cls, root: Path, config: Any, *, embedder: Any = None) -> PgBM25Retriever:
        raise ConfigError("pg_bm25 loads through its first-stage type, which takes the connection as a resource")

    @classmethod
    def attach(
        cls, engine_config: Any, embedder: Embedder | None, resources: Mapping[str, Any] | None, version: int | None
    ) -> PgBM25Retriever:
        pg = engine_config.section("pgvector")
        store = PostgresStore.of(resources, pg)
        at = store.version() if version is None else version
        _check_readable(store, at)
        new = cls(pg, engine_config, store, version=at)
        rows = store.rows(at, ["text", "tokens"])
        if any(r[2] is None for r in rows):
            raise StoreError(
                f"PostgreSQL store {store.table!r} keeps no BM25 tokens (it was built without pg_bm25): build it with "
                "pg_bm25 among the first stage's parts"
            )
        new._set([r[0] for r in rows], [r[1] for r in rows], [list(r[2]) for r in rows])
        return new


def _vector(value: Any) -> np.ndarray:
    """A pgvector value as float32 numpy (the pgvector package's ``Vector``, or an array)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


def _check_readable(store: PostgresStore, version: int) -> None:
    if version < store.oldest_readable():
        raise PersistenceError(
            f"PostgreSQL store {store.table!r} no longer keeps the rows of version {version}; connect to its current "
            "catalog instead (toolrerank_plugins.shared.connect_engine)"
        )


def _saved_version(root: Path, name: str) -> int:
    file = root / name / "store.json"
    data = read_json(file, "store record")
    try:
        return int(data["version"])
    except (ValueError, KeyError, TypeError) as exc:  # not an object, no version, not a number
        raise PersistenceError(f"{file}: corrupt store record (no version: {exc})") from exc


# A build replaces whatever catalog the store holds (in one transaction): it starts from the store's version.
def _make_vector(config: Any, embedder: Embedder | None, *, resources: Mapping[str, Any]) -> PgVectorRetriever:
    pg = config.section("pgvector")
    store = PostgresStore.of(resources, pg)
    return PgVectorRetriever(pg, config, store, embedder=embedder, version=store.version())


def _make_bm25(config: Any, embedder: Embedder | None, *, resources: Mapping[str, Any]) -> PgBM25Retriever:
    pg = config.section("pgvector")
    store = PostgresStore.of(resources, pg)
    return PgBM25Retriever(pg, config, store, version=store.version())


PGVECTOR_TYPE = FirstStageType(
    build=_make_vector,
    load=lambda root, config, embedder, resources: PgVectorRetriever.attach(
        config, embedder, resources, _saved_version(root, "pgvector")
    ),
    required_files=("pgvector/store.json",),
    config_model=PostgresConfig,
    resources=True,
    attach=PgVectorRetriever.attach,
)

PG_BM25_TYPE = FirstStageType(
    build=_make_bm25,
    load=lambda root, config, embedder, resources: PgBM25Retriever.attach(
        config, embedder, resources, _saved_version(root, "pg_bm25")
    ),
    required_files=("pg_bm25/store.json",),
    resources=True,
    attach=PgBM25Retriever.attach,
)
