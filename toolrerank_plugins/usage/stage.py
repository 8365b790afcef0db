"""The ``usage_memory`` stage: the usage memory as a pipeline stage. Learns records into its memory
(:meth:`UsageMemoryStage.learn`, called by ``Engine.learn``), calibrates the memory's votes on the log,
fuses the votes with the ranking it receives, and saves and loads its files (the memory's,
``usage_calibration.json``)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins.errors import PersistenceError
from toolrerank_plugins.records import Edge, ScoredTool, renumber
from toolrerank_plugins.rerank.intents import split_requests
from toolrerank_plugins.stages import LearnResult, Stage, StageContext, StageType
from toolrerank_plugins.usage.calibration import Calibration, _stable_sample
from toolrerank_plugins.usage.config import UsageMemoryConfig
from toolrerank_plugins.usage.edges import USAGE_EDGE_ORIGIN, mine_co_usage_edges
from toolrerank_plugins.usage.memory import MEMORY_FILE, UsageMemory
from toolrerank_plugins.usage.records import UsageRecord, as_usage_records

logger = logging.getLogger(__name__)


CALIBRATION_FILE = "usage_calibration.json"


def _catalog_key(ctx: StageContext) -> str:
    """Identifies the catalog and depth the kept calibration rankings were made with."""
    h = hashlib.blake2b(digest_size=12)
    h.update(str(ctx.depth).encode())
    for i in ctx.catalog.ids:
        h.update(i.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


class UsageMemoryStage(Stage):
    """Past requests similar to the query (and to each request of a multi-request message) vote for the tools
    that served them; the candidates are ordered by the probability, measured on the log itself
    (:class:`Calibration`), that a tool with that rank and that vote served the request (``fusion="weighted"``:
    ``1/(rrf_k + rank) + weight * vote``). No similar past request: the candidates come back unchanged (the
    same objects)."""

    score_scale = (
        "the probability, calibrated on the usage log, that an API with this rank and this vote of similar past "
        "requests served the request, 0 to 1 (fusion='weighted': a reciprocal-rank fusion score)"
    )

    def __init__(
        self,
        config: UsageMemoryConfig,
        memory: UsageMemory | None = None,
        calibration: Calibration | None = None,
        *,
        rankings: Mapping[str, Sequence[str]] | None = None,
        rankings_key: str | None = None,
    ) -> None:
        self.name = "usage_memory"
        self.config = config
        self.memory = memory or UsageMemory()
        self.calibration = calibration
        # the requests' vectors of the calibration's sampled multi-request records, by record id
        self._part_vectors: dict[str, np.ndarray] = {}
        # catalog rankings of the calibration's sampled records, by record id (see calibrate)
        self._rankings: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in (rankings or {}).items()}
        self._rankings_key = rankings_key

    def calibrate(self, ctx: StageContext) -> Calibration | None:
        """Measure (and keep) the memory's :class:`Calibration` on its own records; None for an empty memory.

        The sampled records' catalog rankings are kept by record id (saved with the calibration), so a
        later ``learn`` searches only the newly sampled ones; all again when the catalog changed."""
        memory, cfg = self.memory, self.config
        if not len(memory):
            self.calibration = None
            return None
        rows = _stable_sample(memory.ids, cfg.calibration_records)
        key = _catalog_key(ctx)
        if self._rankings_key != key:
            self._rankings, self._rankings_key = {}, key
        todo = [i for i in rows if memory.ids[i] not in self._rankings]
        for start in range(0, len(todo), 64):
            chunk = todo[start : start + 64]
            found = ctx.retrieve([memory.texts[i] for i in chunk], ctx.depth)
            for i, ranking in zip(chunk, found):
                self._rankings[memory.ids[i]] = tuple(c.id for c in ranking)
        sampled = {memory.ids[i] for i in rows}
        self._rankings = {k: v for k, v in self._rankings.items() if k in sampled}
        parts = {i: self._parts(memory.texts[i]) for i in rows}
        if cfg.dense_weight > 0:
            self._part_vectors = {k: v for k, v in self._part_vectors.items() if k in sampled}
            todo = [i for i in rows if len(parts[i]) > 1 and memory.ids[i] not in self._part_vectors]
            flat = [p for i in todo for p in parts[i][1:]]
            encoded = np.asarray(ctx.query_vectors(flat), dtype=np.float32) if flat else None
            start = 0
            for i in todo:
                n = len(parts[i]) - 1
                assert encoded is not None
                self._part_vectors[memory.ids[i]] = encoded[start : start + n]
                start += n
        by_text = memory.rows_by_text
        samples = []
        for i in rows:
            vectors: list[np.ndarray | None] = [None] * len(parts[i])
            if cfg.dense_weight > 0:
                vectors = [memory.vectors[i], *self._part_vectors.get(memory.ids[i], [])]
            votes, _ = memory.request_votes(parts[i], vectors, cfg, exclude=by_text[memory.texts[i]])
            samples.append((self._rankings[memory.ids[i]], votes, set(memory.tools[i])))
        self.calibration = Calibration.fit(samples, cfg, len(memory))
        return self.calibration

    def _parts(self, query: str) -> list[str]:
        """The message, then its requests when it holds several (``split_requests``)."""
        if self.config.split_requests:
            parts = split_requests(query)
            if len(parts) > 1:
                return [query, *parts]
        return [query]

    def _encode(self, records: Sequence[UsageRecord], ctx: StageContext, sampled: set[str]) -> np.ndarray:
        """The records' vectors. A record the calibration will sample is searched first (its catalog ranking
        is kept) and its vector is then the one that search computed (``ctx.query_vectors`` reuses the
        latest searches' vectors), so no request is encoded twice."""
        key = _catalog_key(ctx)
        if self._rankings_key != key:
            self._rankings, self._rankings_key = {}, key
        picked = [r for r in records if r.id in sampled]
        for start in range(0, len(picked), 64):
            chunk = picked[start : start + 64]
            texts = [r.query for r in chunk]
            for r, ranking in zip(chunk, ctx.retrieve(texts, ctx.depth)):
                self._rankings[r.id] = tuple(c.id for c in ranking)
        vectors: dict[str, np.ndarray] = {}
        for start in range(0, len(picked), 64):
            chunk = picked[start : start + 64]
            for r, v in zip(chunk, ctx.query_vectors([r.query for r in chunk])):
                vectors[r.id] = v
        rest = [r for r in records if r.id not in vectors]
        if rest:
            for r, v in zip(rest, ctx.query_vectors([r.query for r in rest])):
                vectors[r.id] = v
        return np.asarray([vectors[r.id] for r in records], dtype=np.float32)

    # -- learning --------------------------------------------------------------------------------------
    def learn(self, records: Sequence[Any], ctx: StageContext, *, forget: Iterable[str] = ()) -> LearnResult:
        """Add ``records`` to the memory (a new memory: copy-on-write) and say what the catalog learns:
        the seen tools of the served records and the co-usage edges of the whole memory."""
        t0 = time.perf_counter()
        recs = as_usage_records(records)
        # the engine learns on a copy of this stage: never share the dicts
        self._rankings, self._part_vectors = dict(self._rankings), dict(self._part_vectors)
        memory = self.memory.without(forget) if forget else self.memory
        n_forgotten = len(self.memory) - len(memory)
        catalog, cfg = ctx.catalog, self.config
        unknown: Counter[str] = Counter()
        fresh: list[UsageRecord] = []
        tools: list[tuple[str, ...]] = []
        order: list[tuple[str, ...]] = []
        n_dup = n_failed = n_blank = n_no_tools = 0
        batch_ids: set[str] = set()
        for r in recs:
            if r.id in memory or r.id in batch_ids:
                n_dup += 1
                continue
            batch_ids.add(r.id)
            if not r.query.strip():
                n_blank += 1
                continue
            if not r.success:
                n_failed += 1
                continue
            served = [t for t in r.served if t in catalog]
            unknown.update(t for t in r.served if t not in catalog)
            if not served:
                n_no_tools += 1
                continue
            fresh.append(r)
            tools.append(tuple(served))
            order.append(tuple(t for t in r.order if t in catalog))
        t_enc = time.perf_counter()
        if fresh:
            sampled: set[str] = set()
            if cfg.fusion == "calibrated":
                all_ids = memory.ids + tuple(r.id for r in fresh)
                sampled = {all_ids[i] for i in _stable_sample(all_ids, cfg.calibration_records)}
            vectors = self._encode(fresh, ctx, sampled)
            memory = memory.added(fresh, tools, vectors, encoder=ctx.embedder.model_id, order=order)
        enc_s = time.perf_counter() - t_enc
        self.memory = memory
        t_cal = time.perf_counter()
        if cfg.fusion == "calibrated" and (fresh or n_forgotten or self.calibration is None):
            self.calibrate(ctx)
        cal_s = time.perf_counter() - t_cal
        seen = frozenset(catalog[t].tool_key for ts_ in tools for t in ts_)
        edges = self.co_usage_edges(ctx)
        report = {
            "records": len(recs),
            "learned": len(fresh),
            "skipped_duplicate": n_dup,
            "skipped_failed": n_failed,
            "skipped_blank": n_blank,
            "skipped_no_known_tool": n_no_tools,
            "unknown_tool_ids": sum(unknown.values()),
            "unknown_tools": sorted(unknown)[:10],
            "forgotten": n_forgotten,
            "memory_size": len(memory),
            "encode_seconds": round(enc_s, 3),
            "calibrate_seconds": round(cal_s, 3),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        if unknown:
            logger.warning(
                "learn: skipped %d call(s) of %d tool id(s) not in the catalog (e.g. %s)",
                sum(unknown.values()),
                len(unknown),
                ", ".join(sorted(unknown)[:3]),
            )
        return LearnResult(seen_tools=seen, edges=tuple(edges), edge_origin=USAGE_EDGE_ORIGIN, report=report)

    def co_usage_edges(self, ctx: StageContext) -> list[Edge]:
        """Tools called in order for one request by at least ``min_support`` requests, as catalog edges
        ``a -> b`` (b uses a first) weighted by ``support / uses of b`` (how often b's uses followed a)."""
        return mine_co_usage_edges(self.memory, ctx.catalog, self.config.min_support)

    # -- query time --------------------------------------------------------------------------------
    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        memory, cfg = self.memory, self.config
        if not len(memory) or cfg.weight == 0:
            return candidates
        requests = self._parts(query)
        if len(requests) > 1:
            trace["requests"] = requests[1:]
        vectors: list[np.ndarray | None] = [None] * len(requests)
        if cfg.dense_weight > 0:
            # the requests are the multi_intent stage's: their vectors come from its latest searches
            vectors = list(np.asarray(ctx.query_vectors(requests), dtype=np.float32))
        found, near = memory.request_votes(requests, vectors, cfg)
        if not near:
            trace["similar"] = []
            return candidates
        votes = {t: v for t, (v, _) in found.items() if t in ctx.catalog}
        if not votes:
            trace["similar"] = []
            return candidates
        trace["similar"] = [
            {
                "request": memory.texts[row][:200],
                "similarity": round(sim, 4),
                "dense": round(dense, 4),
                "lexical": round(lex, 4),
                "tools": list(memory.tools[row]),
            }
            for row, sim, dense, lex in near[: cfg.trace_neighbours]
        ]
        base = {c.id: c for c in candidates}
        fused: dict[str, float] = {}
        cal = self.calibration if cfg.fusion == "calibrated" else None
        if cal is None and cfg.fusion == "calibrated":
            cal = self.calibrate(ctx)
        for rank, c in enumerate(candidates, start=1):
            if cal is not None:
                fused[c.id] = cal.probability(rank, *found.get(c.id, (0.0, 0.0)))
            else:
                fused[c.id] = 1.0 / (cfg.rrf_k + rank) + cfg.weight * votes.get(c.id, 0.0)
        inserted = []
        for t, v in votes.items():
            if t not in fused:
                fused[t] = cal.probability(None, *found[t]) if cal is not None else cfg.weight * v
                inserted.append(t)
        if cal is not None:
            # a request seen before word for word: the tools that served it go first (the calibration measures
            # how votes generalise to new requests; this one is not new)
            for row in memory.rows_by_text.get(query, ()):
                for t in memory.tools[row]:
                    if t in fused:
                        fused[t] = 1.0 + fused[t]
            if memory.rows_by_text.get(query):
                trace["repeat"] = True
        order = {c.id: i for i, c in enumerate(candidates)}
        ranked = sorted(fused, key=lambda t: (-fused[t], order.get(t, len(order)), t))
        out = []
        for t in ranked:
            given = base.get(t)
            if given is None:
                out.append(ScoredTool(ctx.catalog[t], fused[t], 0, {self.name: fused[t]}))
            else:
                out.append(given.with_stage(self.name, fused[t]))
        top = sorted(votes.items(), key=lambda kv: -kv[1])[:5]
        trace["votes"] = {t: round(v, 4) for t, v in top}
        trace["inserted"] = inserted[:10]
        trace["used_with"] = {t: [u for u, _ in memory.used_with(t)] for t, _ in top[:3] if memory.used_with(t)}
        return renumber(out)

    def save(self, path: Path) -> None:
        self.memory.save(path)
        if self.calibration is not None:
            data = {**self.calibration.to_dict(), "rankings_key": self._rankings_key, "rankings": self._rankings}
            write_atomic(path / CALIBRATION_FILE, json.dumps(data))


def _build(config: UsageMemoryConfig, ctx: StageContext, path: Path | None) -> UsageMemoryStage:
    if path is not None and (path / MEMORY_FILE).exists():
        calibration = None
        cfile = path / CALIBRATION_FILE
        if cfile.exists():
            obj = read_json(cfile, "usage memory calibration")
            calibration = Calibration.from_dict(obj, str(cfile))
            rankings, key = obj.get("rankings") or {}, obj.get("rankings_key")
            if not (
                isinstance(rankings, dict)
                and all(isinstance(v, list) and all(isinstance(t, str) for t in v) for v in rankings.values())
                and (key is None or isinstance(key, str))
            ):
                raise PersistenceError(f"{cfile}: corrupt usage memory calibration (rankings)")
            return UsageMemoryStage(config, UsageMemory.load(path), calibration, rankings=rankings, rankings_key=key)
        return UsageMemoryStage(config, UsageMemory.load(path), calibration)
    if path is not None:
        raise PersistenceError(f"{path}: saved usage_memory stage has no {MEMORY_FILE}; the engine is incomplete")
    return UsageMemoryStage(config)


STAGE_TYPE = StageType(config_model=UsageMemoryConfig, factory=_build)
