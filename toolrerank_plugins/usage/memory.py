"""The usage memory: past requests, their vectors (the engine's encoder) and a TF-IDF index, the tools that
served each, use and co-use counts; similar past requests and their votes for a new request; saved as
``usage_memory.json`` + ``vectors.npy``."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from toolrerank_plugins._atomic import load_npy, npy_bytes, read_json, write_atomic
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.usage.config import UsageMemoryConfig
from toolrerank_plugins.usage.records import UsageRecord

MEMORY_FILE = "usage_memory.json"
VECTORS_FILE = "vectors.npy"
MEMORY_FORMAT = 1


# -- lexical similarity ------------------------------------------------------------------------------
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by can could do does for from get have how i if in is it me my of on or please "
    "some that the this to want was what when where which who will with would you your".split()
)


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP and len(t) > 1]


class _Lexical:
    """TF-IDF cosine over past requests (sublinear tf, smooth idf, l2-normalised): an absolute similarity in
    [0, 1], so a threshold means the same for every memory size. Postings are numpy arrays per term."""

    def __init__(self, texts: Sequence[str]) -> None:
        docs = [Counter(_tokens(t)) for t in texts]
        df: Counter[str] = Counter()
        for d in docs:
            df.update(d.keys())
        n = len(texts)
        self.idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        rows: dict[str, list[int]] = {}
        vals: dict[str, list[float]] = {}
        for i, d in enumerate(docs):
            w = {t: (1.0 + math.log(c)) * self.idf[t] for t, c in d.items()}
            norm = math.sqrt(sum(v * v for v in w.values())) or 1.0
            for t, v in w.items():
                rows.setdefault(t, []).append(i)
                vals.setdefault(t, []).append(v / norm)
        self.postings = {t: (np.asarray(rows[t], dtype=np.int64), np.asarray(vals[t], dtype=np.float32)) for t in rows}
        self.n = n

    def similarities(self, query: str) -> np.ndarray:
        scores = np.zeros(self.n, dtype=np.float32)
        counts = Counter(t for t in _tokens(query) if t in self.idf)
        if not counts:
            return scores
        w = {t: (1.0 + math.log(c)) * self.idf[t] for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in w.values()))
        for t, v in w.items():
            rows, vals = self.postings[t]
            scores[rows] += vals * np.float32(v / norm)
        return scores


# -- the memory --------------------------------------------------------------------------------------
class UsageMemory:
    """Past requests, their vectors and lexical index, the tools that served each, use and co-use counts.

    Immutable: :meth:`added` and :meth:`without` return new memories (searches may be using this one).
    Vectors come from the engine's embedder (``StageContext.query_vectors``, the same function the dense
    first stage encodes queries with), so a memory is tied to its encoder (``encoder``, checked on load).
    """

    def __init__(
        self,
        texts: Sequence[str] = (),
        tools: Sequence[Sequence[str]] = (),
        vectors: np.ndarray | None = None,
        ids: Sequence[str] = (),
        ts: Sequence[float | None] = (),
        *,
        encoder: str | None = None,
        order: Sequence[Sequence[str]] | None = None,
    ) -> None:
        self.texts: tuple[str, ...] = tuple(texts)
        self.tools: tuple[tuple[str, ...], ...] = tuple(tuple(t) for t in tools)
        self.order: tuple[tuple[str, ...], ...] = tuple(tuple(o) for o in order) if order is not None else self.tools
        self.ids: tuple[str, ...] = tuple(ids)
        self.ts: tuple[float | None, ...] = tuple(ts) if ts else (None,) * len(self.texts)
        self.vectors = (
            np.zeros((0, 0), dtype=np.float32) if vectors is None else np.ascontiguousarray(vectors, np.float32)
        )
        self.encoder = encoder
        n = len(self.texts)
        if not (len(self.tools) == len(self.ids) == len(self.ts) == len(self.order) == n) or len(self.vectors) != n:
            raise ValueError("UsageMemory: texts, tools, ids, ts and vectors must have one entry per request")
        self._id_set = frozenset(self.ids)
        self.rows_by_text: dict[str, list[int]] = {}
        for i, t in enumerate(self.texts):
            self.rows_by_text.setdefault(t, []).append(i)
        self.lexical = _Lexical(self.texts)
        self.tool_counts: Counter[str] = Counter(t for ts_ in self.tools for t in ts_)
        self.co_usage: Counter[tuple[str, str]] = Counter()
        for tools_ in self.tools:
            uniq = sorted(set(tools_))
            for i, a in enumerate(uniq):
                for b in uniq[i + 1 :]:
                    self.co_usage[(a, b)] += 1

    def __len__(self) -> int:
        return len(self.texts)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._id_set

    @property
    def tool_ids(self) -> frozenset[str]:
        """Every tool some past request used."""
        return frozenset(self.tool_counts)

    def used_with(self, tool_id: str, n: int = 3) -> list[tuple[str, int]]:
        """The tools most often used together with ``tool_id`` for one request, with counts."""
        pairs = [((b if a == tool_id else a), c) for (a, b), c in self.co_usage.items() if tool_id in (a, b)]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))[:n]

    def added(
        self,
        records: Sequence[UsageRecord],
        tools: Sequence[Sequence[str]],
        vectors: np.ndarray,
        *,
        encoder: str | None,
        order: Sequence[Sequence[str]] | None = None,
    ) -> UsageMemory:
        """A new memory holding this one's requests plus ``records`` (served by ``tools``, encoded as ``vectors``)."""
        if self.encoder is not None and encoder is not None and encoder != self.encoder and len(self):
            raise ConfigError(
                f"the usage memory was encoded with {self.encoder!r} but the engine now encodes with {encoder!r}; "
                "relearn the log into an engine without a usage memory (toolrerank learn --rebuild)"
            )
        vecs = vectors if not len(self) else np.concatenate([self.vectors, vectors]).astype(np.float32)
        return UsageMemory(
            self.texts + tuple(r.query for r in records),
            self.tools + tuple(tuple(t) for t in tools),
            vecs,
            self.ids + tuple(r.id for r in records),
            self.ts + tuple(r.ts for r in records),
            encoder=encoder or self.encoder,
            order=self.order + tuple(tuple(o) for o in (order if order is not None else tools)),
        )

    def without(self, record_ids: Iterable[str]) -> UsageMemory:
        """A new memory without these records (forgotten)."""
        gone = set(record_ids)
        keep = [i for i, rid in enumerate(self.ids) if rid not in gone]
        return self.subset(keep)

    def subset(self, rows: Sequence[int]) -> UsageMemory:
        """A new memory of these rows only (e.g. a prefix of the log: a learning curve)."""
        rows = list(rows)
        return UsageMemory(
            [self.texts[i] for i in rows],
            [self.tools[i] for i in rows],
            self.vectors[rows] if len(self) else None,
            [self.ids[i] for i in rows],
            [self.ts[i] for i in rows],
            encoder=self.encoder,
            order=[self.order[i] for i in rows],
        )

    def neighbours(
        self,
        query: str,
        vector: np.ndarray | None,
        config: UsageMemoryConfig,
        *,
        exclude: Sequence[int] = (),
    ) -> list[tuple[int, float, float, float]]:
        """The past requests similar to ``query``: ``(row, similarity, dense, lexical)``, most similar first,
        at most ``config.neighbours`` and only those at or above ``config.min_similarity``; rows in
        ``exclude`` never (leave-one-out estimates)."""
        if not len(self):
            return []
        lex = self.lexical.similarities(query)
        if vector is not None and self.vectors.shape[1] == len(vector):
            dense = self.vectors @ np.asarray(vector, dtype=np.float32)
        else:
            dense = np.zeros(len(self), dtype=np.float32)
        a = config.dense_weight if vector is not None else 0.0
        sim = a * dense + (1.0 - a) * lex
        if len(exclude):
            sim[np.asarray(exclude, dtype=np.int64)] = -np.inf
        k = min(config.neighbours, len(sim))
        top = np.argpartition(-sim, k - 1)[:k] if k < len(sim) else np.arange(len(sim))
        top = top[np.lexsort((top, -sim[top]))]
        return [(int(i), float(sim[i]), float(dense[i]), float(lex[i])) for i in top if sim[i] >= config.min_similarity]

    def request_votes(
        self,
        requests: Sequence[str],
        vectors: Sequence[np.ndarray | None],
        config: UsageMemoryConfig,
        *,
        exclude: Sequence[int] = (),
    ) -> tuple[dict[str, tuple[float, float]], list[tuple[int, float, float, float]]]:
        """Votes for a message: ``requests[0]`` is the whole message, the others its requests (when it holds
        several). Each looks up its own neighbours; a tool keeps its best vote, and how much that exceeds the
        whole message's vote for it. Returns ``(tool -> (vote, part excess), neighbours)``."""
        whole: dict[str, float] = {}
        best: dict[str, float] = {}
        near: dict[int, tuple[int, float, float, float]] = {}
        for k, (text, vector) in enumerate(zip(requests, vectors)):
            found = self.neighbours(text, vector, config, exclude=exclude)
            for n in found:
                if n[0] not in near or n[1] > near[n[0]][1]:
                    near[n[0]] = n
            # a request of a multi-request message votes only for tools two past requests agree on: one
            # record (perhaps a wrong one) must not outvote the whole message through a fragment of it
            for t, v in self.votes(found, config, 1 if k == 0 else config.part_support).items():
                if k == 0:
                    whole[t] = v
                best[t] = max(best.get(t, 0.0), v)
        votes = {t: (v, v - whole.get(t, 0.0)) for t, v in best.items()}
        return votes, sorted(near.values(), key=lambda n: (-n[1], n[0]))

    def votes(
        self, neighbours: Sequence[tuple[int, float, float, float]], config: UsageMemoryConfig, min_support: int = 1
    ) -> dict[str, float]:
        """Each tool's vote from ``neighbours``, in [0, 1]: a past request weighs
        ``w = ((sim - min_similarity) / (1 - min_similarity)) ** sharpness`` and shares it among the tools
        that served it (``/ n_tools ** share_exponent``); a tool's vote is its share of the total weight
        times the largest ``w`` (how close the closest past request is). Tools served by fewer than
        ``min_support`` of the neighbours get no vote."""
        lo = config.min_similarity
        out: dict[str, float] = {}
        support: Counter[str] = Counter()
        total = top = 0.0
        for row, sim, _, _ in neighbours:
            tools = self.tools[row]
            if not tools:
                continue
            w = (max(sim - lo, 0.0) / max(1.0 - lo, 1e-6)) ** config.sharpness
            total += w
            top = max(top, w)
            share = w / len(tools) ** config.share_exponent
            support.update(set(tools))
            for t in tools:
                out[t] = out.get(t, 0.0) + share
        if total <= 0:
            return {}
        return {t: min(1.0, v / total) * top for t, v in out.items() if support[t] >= min_support}

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """``usage_memory.json`` (texts, tools, ids, ts, encoder) + ``vectors.npy`` (``allow_pickle=False``)."""
        meta = {
            "format": MEMORY_FORMAT,
            "encoder": self.encoder,
            "n": len(self),
            "dim": int(self.vectors.shape[1]) if len(self) else 0,
            "requests": [
                {"id": i, "query": q, "tools": list(t), "order": list(o), "ts": ts}
                for i, q, t, o, ts in zip(self.ids, self.texts, self.tools, self.order, self.ts)
            ],
        }
        write_atomic(folder / MEMORY_FILE, json.dumps(meta, ensure_ascii=False))
        write_atomic(folder / VECTORS_FILE, npy_bytes(self.vectors))

    @classmethod
    def load(cls, folder: Path) -> UsageMemory:
        """Read what :meth:`save` wrote; a corrupt file raises :class:`PersistenceError` naming it."""
        mfile, vfile = folder / MEMORY_FILE, folder / VECTORS_FILE
        meta = read_json(mfile, "usage memory")
        if not isinstance(meta, dict) or meta.get("format") != MEMORY_FORMAT:
            raise PersistenceError(f"{mfile}: not a usage memory of format {MEMORY_FORMAT}")
        reqs = meta.get("requests")
        encoder = meta.get("encoder")
        if not isinstance(reqs, list) or (encoder is not None and not isinstance(encoder, str)):
            raise PersistenceError(f"{mfile}: corrupt usage memory ('requests' must be a list)")
        texts, tools, order, ids, tss = [], [], [], [], []
        for i, r in enumerate(reqs):
            ok = (
                isinstance(r, dict)
                and isinstance(r.get("id"), str)
                and isinstance(r.get("query"), str)
                and all(
                    isinstance(x, list) and all(isinstance(t, str) for t in x) for x in (r.get("tools"), r.get("order"))
                )
                and (r.get("ts") is None or (isinstance(r["ts"], (int, float)) and not isinstance(r["ts"], bool)))
            )
            if not ok:
                raise PersistenceError(f"{mfile}: corrupt usage memory (request {i + 1} is malformed)")
            texts.append(r["query"])
            tools.append(r["tools"])
            order.append(r["order"])
            ids.append(r["id"])
            tss.append(r["ts"])
        vectors = load_npy(vfile, "missing or corrupt vectors")
        if (
            not isinstance(vectors, np.ndarray)
            or vectors.ndim != 2
            or vectors.dtype.kind != "f"
            or len(vectors) != len(texts)
            or (len(texts) and vectors.shape[1] != meta.get("dim"))
            or not np.isfinite(vectors).all()
        ):
            raise PersistenceError(f"{vfile}: corrupt vectors (expected {len(texts)} finite rows of {meta.get('dim')})")
        if len(set(ids)) != len(ids):
            raise PersistenceError(f"{mfile}: corrupt usage memory (a request id repeats)")
        return cls(texts, tools, vectors if len(texts) else None, ids, tss, encoder=encoder, order=order)
