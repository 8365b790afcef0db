"""Learning from the agent's own usage: a usage log, an opt-in recorder, and a usage memory stage.

What every deployed agent has is its own history: which requests it received and which tools then served
them. This module turns that history into four things (``docs/usage.md``):

1. **seen tools** for ToolRerank's adaptive truncation (the catalog's ``seen`` flags);
2. **a usage memory**: past requests similar to a new one (dense + lexical similarity) vote for the tools
   that served them; the ``usage_memory`` stage fuses the votes with the ranking it receives, as far as such
   votes were right on the log itself (leave-one-out, :class:`Calibration`), so an empty
   or irrelevant memory changes nothing;
3. **co-usage edges**: tools used together for one request, repeatedly, become weighted catalog edges
   (mined with :func:`~toolrerank_plugins.graph.traces.mine_trace_edges`) that TGR's expansion follows;
4. **training data**: :func:`records_to_queries` turns a log into the labelled queries that
   ``toolrerank train`` reads.

The pieces:

- :class:`UsageRecord`: one logged request (frozen). A log is JSONL compatible with ``queries.jsonl``
  (``query``, ``relevant``, ``calls``; plus ``success``, ``failed``, ``ts``), so a benchmark's queries file
  is a usage log and a usage log can be evaluated like a benchmark.
- :func:`read_usage_log` / :func:`write_usage_log`; :class:`UsageRecorder` (append-only, thread- and
  process-safe, :meth:`UsageRecorder.forget` rewrites the file atomically). Nothing records unless you
  create a recorder.
- :class:`UsageMemory`: the past requests (vectors from the engine's embedder, a lexical index), the tools
  that served each, tool use counts, co-usage counts and seen tools; immutable (``added`` returns a new one),
  saved as JSON + NPY.
- :class:`UsageMemoryStage` (stage type ``usage_memory``): the memory as a pipeline stage. ``Engine.learn``
  adds one when the pipeline has none.

Example:
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    >>> report = engine.learn([UsageRecord("mail my landlord about the rent", relevant=("Mail/PostBox/send_email",))])
    >>> report["learned"], report["memory_size"]
    (1, 1)
    >>> engine.search("mail my landlord about the rent", top_k=1)[0].id
    'Mail/PostBox/send_email'
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.errors import ConfigError, PersistenceError, ToolRerankError
from toolrerank_plugins.graph.traces import mine_trace_edges
from toolrerank_plugins.records import (
    Edge,
    LabelledQuery,
    ScoredTool,
    check_text,
    is_finite_number,
    renumber,
    stable_id,
)
from toolrerank_plugins.rerank.intents import split_requests
from toolrerank_plugins.stages import LearnResult, Stage, StageContext, StageType

try:  # POSIX advisory locks (several processes appending to one log); absent on Windows
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not POSIX
    _fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

__all__ = [
    "USAGE_EDGE_ORIGIN",
    "Calibration",
    "UsageLog",
    "UsageLogError",
    "UsageMemory",
    "UsageMemoryConfig",
    "UsageMemoryStage",
    "UsageRecord",
    "UsageRecorder",
    "as_usage_records",
    "read_usage_log",
    "records_to_queries",
    "write_usage_log",
]

#: ``origin`` of the co-usage edges :meth:`Engine.learn` adds to the catalog (TGR reads catalog edges).
USAGE_EDGE_ORIGIN = "usage"
MEMORY_FILE = "usage_memory.json"
VECTORS_FILE = "vectors.npy"
CALIBRATION_FILE = "usage_calibration.json"
MEMORY_FORMAT = 1


class UsageLogError(ToolRerankError, ValueError):
    """A usage log line or record is malformed (names the file and line, or the record)."""


# -- records -----------------------------------------------------------------------------------------
def _ids(value: Any, what: str, where: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise UsageLogError(f"{where}: {what!r} must be a list of tool ids, got {type(value).__name__}")
    for v in value:
        if not isinstance(v, str) or not v:
            raise UsageLogError(f"{where}: {what!r} must hold non-empty tool id strings, got {v!r:.60}")
        _check(v, f"{where}: {what!r}")
    return tuple(value)


def _check(text: str, where: str) -> None:
    try:
        check_text(text, where)
    except ValueError as exc:
        raise UsageLogError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One logged request and the tools that served it.

    Attributes:
        query: the request text (the user's turn).
        relevant: the tools that served the request. Defaults to the distinct ``calls`` that did not fail.
        calls: every tool called for it, in order (failed calls included), or None.
        failed: the tools whose call failed (they never count as serving the request).
        success: whether the request was served; a failed request teaches nothing (kept for the record).
        id: a stable id (default: sha256 of the content), used by :meth:`UsageRecorder.forget`.
        ts: when it happened (seconds since the epoch), or None.
        split: the ``queries.jsonl`` split when the record came from a benchmark file.

    Example:
        >>> r = UsageRecord("weather in Oslo", calls=("geocode", "forecast", "forecast"), failed=("geocode",))
        >>> r.relevant, r.served
        (('forecast',), ('forecast',))
    """

    query: str
    relevant: tuple[str, ...] = ()
    calls: tuple[str, ...] | None = None
    failed: tuple[str, ...] = ()
    success: bool = True
    id: str = ""
    ts: float | None = None
    split: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.query, str):
            raise UsageLogError(f"usage record: 'query' must be a string, got {type(self.query).__name__}")
        where = f"usage record {self.id or self.query[:40]!r}"
        _check(self.query, f"{where}: 'query'")
        object.__setattr__(self, "relevant", _ids(self.relevant, "relevant", where))
        if self.calls is not None:
            object.__setattr__(self, "calls", _ids(self.calls, "calls", where))
        object.__setattr__(self, "failed", _ids(self.failed, "failed", where))
        if not isinstance(self.success, bool):
            raise UsageLogError(f"{where}: 'success' must be true or false, got {self.success!r:.40}")
        if self.ts is not None and not is_finite_number(self.ts):
            raise UsageLogError(f"{where}: 'ts' must be a number (seconds since the epoch) or null")
        if self.split is not None and not isinstance(self.split, str):
            raise UsageLogError(f"{where}: 'split' must be a string or null")
        if not self.relevant and self.calls:
            bad = set(self.failed)
            object.__setattr__(self, "relevant", tuple(dict.fromkeys(c for c in self.calls if c not in bad)))
        if not isinstance(self.id, str):
            raise UsageLogError(f"{where}: 'id' must be a string")
        if not self.id:
            payload = {"query": self.query, "relevant": list(self.relevant), "calls": self.calls, "ts": self.ts}
            object.__setattr__(self, "id", stable_id(payload))
        _check(self.id, f"{where}: 'id'")

    @property
    def served(self) -> tuple[str, ...]:
        """The tools that served this request: ``relevant`` minus failed calls; () when it failed."""
        if not self.success:
            return ()
        bad = set(self.failed)
        return tuple(t for t in dict.fromkeys(self.relevant) if t not in bad)

    @property
    def order(self) -> tuple[str, ...]:
        """The served tools in call order (for co-usage edges): ``calls`` without failures, else ``relevant``."""
        served = set(self.served)
        if self.calls:
            return tuple(c for c in self.calls if c in served)
        return self.served

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record (readable by :func:`~toolrerank_plugins.loaders.load_queries` too)."""
        out: dict[str, Any] = {
            "id": self.id,
            "query": self.query,
            "relevant": list(self.relevant),
            "calls": None if self.calls is None else list(self.calls),
            "success": self.success,
        }
        if self.failed:
            out["failed"] = list(self.failed)
        if self.ts is not None:
            out["ts"] = self.ts
        if self.split is not None:
            out["split"] = self.split
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str = "usage record") -> UsageRecord:
        """A record from one JSON object (a usage log line or a ``queries.jsonl`` line).

        Raises:
            UsageLogError: a field is missing or has the wrong type; the message starts with ``where``.
        """
        if not isinstance(obj, Mapping):
            raise UsageLogError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        query = obj.get("query")
        if not isinstance(query, str):
            raise UsageLogError(f"{where}: record has no 'query' string")
        relevant = obj.get("relevant")
        calls = obj.get("calls")
        if relevant is None and calls is None:
            raise UsageLogError(f"{where}: record needs 'relevant' or 'calls' (the tools that served it)")
        rid = obj.get("id", "")
        if isinstance(rid, int) and not isinstance(rid, bool):
            rid = str(rid)
        success = obj.get("success", True)
        try:
            return cls(
                query=query,
                relevant=_ids(relevant, "relevant", where) if relevant is not None else (),
                calls=_ids(calls, "calls", where) if calls is not None else None,
                failed=_ids(obj.get("failed") or [], "failed", where),
                success=success if success is not None else True,
                id=rid if rid is not None else "",
                ts=obj.get("ts"),
                split=obj.get("split"),
            )
        except UsageLogError as exc:
            msg = str(exc)
            raise UsageLogError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def as_usage_records(items: Iterable[Any]) -> list[UsageRecord]:
    """``items`` as :class:`UsageRecord` s: records, :class:`LabelledQuery` s (benchmark queries) or dicts.

    Raises:
        TypeError: ``items`` is a single string or record, or holds something else.
        UsageLogError: a dict is not a valid record (names its position).
    """
    if isinstance(items, (str, bytes, Mapping, UsageRecord, LabelledQuery)):
        raise TypeError(f"records must be an iterable of usage records, not a single {type(items).__name__}")
    out: list[UsageRecord] = []
    for i, item in enumerate(items):
        if isinstance(item, UsageRecord):
            out.append(item)
        elif isinstance(item, LabelledQuery):
            out.append(UsageRecord(item.query, relevant=item.relevant, calls=item.calls, id=item.id, split=item.split))
        elif isinstance(item, Mapping):
            out.append(UsageRecord.from_dict(item, f"record {i + 1}"))
        else:
            raise TypeError(f"record {i + 1}: expected a UsageRecord, LabelledQuery or dict, got {type(item).__name__}")
    return out


def records_to_queries(records: Iterable[UsageRecord], catalog: Any = None) -> list[LabelledQuery]:
    """The labelled queries a log teaches (training data for ``toolrerank train``): one per served record,
    ``relevant`` = the tools that served it (restricted to ``catalog`` when given), ``calls`` = their order."""
    out = []
    for r in records:
        served = [t for t in r.served if catalog is None or t in catalog]
        if not served or not r.query.strip():
            continue
        order = tuple(t for t in r.order if t in set(served))
        out.append(LabelledQuery(r.id, r.query, tuple(served), r.split, None, order or None))
    return out


# -- the log file ------------------------------------------------------------------------------------
@dataclass
class UsageLog:
    """What :func:`read_usage_log` read: the records, and the lines it skipped (``on_error="skip"``)."""

    records: list[UsageRecord]
    n_lines: int = 0
    n_skipped: int = 0
    problems: list[str] = field(default_factory=list)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        fh = path.open("r", encoding="utf-8", errors="surrogateescape")
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise UsageLogError(f"{str(path)!r}: cannot open the usage log ({exc})") from exc
    with fh:
        yield from enumerate(fh, start=1)


def read_usage_log(
    path: str | Path,
    *,
    split: str | Iterable[str] | None = None,
    on_error: Literal["raise", "skip"] = "raise",
) -> UsageLog:
    """Read a usage log (or a ``queries.jsonl`` / a folder holding one), optionally one ``split``.

    A malformed line raises :class:`UsageLogError` naming ``file:line`` and the problem; with
    ``on_error="skip"`` it is skipped, counted (``n_skipped``) and described in ``problems`` (first 20).
    Unknown tool ids are not checked here (the log does not know the catalog): :meth:`Engine.learn`
    skips and counts them.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "queries.jsonl"
    splits = None if split is None else ({split} if isinstance(split, str) else set(split))
    log = UsageLog([])
    for lineno, line in _lines(path):
        log.n_lines = lineno
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            if "\udc80" <= max(line) and re.search("[\udc80-\udcff]", line):
                raise UsageLogError(f"{where}: not valid UTF-8")
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError) as exc:  # JSONDecodeError; an integer past 4,300 digits
                raise UsageLogError(f"{where}: not a JSON object ({type(exc).__name__}: {exc})") from None
            record = UsageRecord.from_dict(obj, where)
        except UsageLogError as exc:
            if on_error == "raise":
                raise
            log.n_skipped += 1
            if len(log.problems) < 20:
                log.problems.append(str(exc))
            continue
        if splits is not None and record.split not in splits:
            continue
        log.records.append(record)
    return log


def write_usage_log(records: Iterable[UsageRecord], path: str | Path) -> Path:
    """Write ``records`` as a usage log (atomically: a temporary file replaces ``path``)."""
    path = Path(path)
    if "\0" in str(path):  # os calls would raise a bare ValueError
        raise UsageLogError(f"{str(path)!r}: cannot write the usage log there: a path cannot hold a NUL byte")
    _replace_file(path, (json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records))
    return path


def _replace_file(path: Path, lines: Iterable[str]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UsageRecorder:
    """Appends usage records to a JSONL log; opt-in (nothing records unless you create one).

    Safe across threads (a lock) and processes (an advisory ``flock`` on ``<log>.lock``): each record is one
    ``write`` of one line. :meth:`forget` removes records and rewrites the file atomically.

    Example:
        >>> import tempfile, pathlib
        >>> log = pathlib.Path(tempfile.mkdtemp()) / "usage.jsonl"
        >>> rec = UsageRecorder(log)
        >>> r = rec.record("weather in Oslo", calls=["Weather/SkyCast/forecast"], ts=0.0)
        >>> rec.forget(r.id), len(rec.read().records)
        (1, 0)
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _locked(self) -> _FileLock:
        return _FileLock(self.path.with_name(self.path.name + ".lock"), self._lock)

    def record(
        self,
        query: str,
        calls: Sequence[str] = (),
        *,
        failed: Sequence[str] = (),
        relevant: Sequence[str] | None = None,
        success: bool | None = None,
        id: str = "",
        ts: float | None = None,
    ) -> UsageRecord:
        """Log one request: the tools called (in order) and those whose call failed.

        ``success`` defaults to "some call succeeded"; ``ts`` to now.
        """
        bad = set(failed)
        if success is None:
            success = any(c not in bad for c in calls) or bool(relevant)
        record = UsageRecord(
            query,
            relevant=tuple(relevant or ()),
            calls=tuple(calls),
            failed=tuple(dict.fromkeys(failed)),
            success=success,
            id=id,
            ts=time.time() if ts is None else ts,
        )
        self.append(record)
        return record

    def append(self, record: UsageRecord) -> None:
        """Append one record (one line, one write)."""
        line = json.dumps(record.to_dict(), ensure_ascii=False) + "\n"
        with self._locked():
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())

    def read(self, *, on_error: Literal["raise", "skip"] = "raise") -> UsageLog:
        """The records logged so far."""
        if not self.path.exists():
            return UsageLog([])
        with self._locked():
            return read_usage_log(self.path, on_error=on_error)

    def forget(self, target: str | Iterable[str] | Callable[[UsageRecord], bool]) -> int:
        """Remove records by id (one or several) or by predicate; returns how many were removed.

        The log is rewritten atomically (a temporary file replaces it), so a crash leaves the old or the new
        log. Lines that are not valid records are kept as they are.
        """
        if callable(target):
            pred = target
        else:
            ids = {target} if isinstance(target, str) else set(target)
            pred = lambda r: r.id in ids  # noqa: E731
        if not self.path.exists():
            return 0
        with self._locked():
            kept: list[str] = []
            removed = 0
            for lineno, line in _lines(self.path):
                if not line.strip():
                    continue
                try:
                    record = UsageRecord.from_dict(json.loads(line), f"{self.path}:{lineno}")
                except (ValueError, RecursionError):  # UsageLogError, JSONDecodeError, a 4,300-digit integer
                    kept.append(line if line.endswith("\n") else line + "\n")
                    continue
                if pred(record):
                    removed += 1
                else:
                    kept.append(line if line.endswith("\n") else line + "\n")
            if removed:
                _replace_file(self.path, kept)
            return removed


class _FileLock:
    """A thread lock plus an exclusive ``flock`` on a sidecar file (no-op where there is no flock)."""

    def __init__(self, path: Path, lock: threading.Lock) -> None:
        self.path = path
        self.lock = lock
        self.fd: int | None = None

    def __enter__(self) -> _FileLock:
        self.lock.acquire()
        try:
            if _fcntl is not None:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                _fcntl.flock(self.fd, _fcntl.LOCK_EX)
        except BaseException:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.fd is not None:
                os.close(self.fd)  # closing releases the flock
                self.fd = None
        finally:
            self.lock.release()


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
        (folder / MEMORY_FILE).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        np.save(folder / VECTORS_FILE, self.vectors, allow_pickle=False)

    @classmethod
    def load(cls, folder: Path) -> UsageMemory:
        """Read what :meth:`save` wrote; a corrupt file raises :class:`PersistenceError` naming it."""
        mfile, vfile = folder / MEMORY_FILE, folder / VECTORS_FILE
        try:
            meta = json.loads(mfile.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError, JSONDecodeError: ValueErrors
            raise PersistenceError(f"{mfile}: missing or corrupt usage memory ({type(exc).__name__}: {exc})") from exc
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
        try:
            vectors = np.load(vfile, allow_pickle=False)
        except (OSError, ValueError, EOFError, SyntaxError, MemoryError) as exc:
            raise PersistenceError(f"{vfile}: missing or corrupt vectors ({type(exc).__name__}: {exc})") from exc
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


# -- calibration -------------------------------------------------------------------------------------
#: Upper edges of the vote bins of :class:`Calibration` (votes lie in [0, 1]).
VOTE_BINS = tuple(round(0.1 * i, 1) for i in range(1, 11))
#: Rank bins of :class:`Calibration`: (first rank, last rank), 1-based.
RANK_BINS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 50), (51, 10**9))


def _monotone(values: Sequence[float], weights: Sequence[float], *, increasing: bool) -> list[float]:
    """Weighted pool-adjacent-violators: the closest monotone sequence (least squares) to ``values``."""
    vals = list(values) if increasing else [-v for v in values]
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(vals, weights):
        blocks.append([v, max(w, 1e-9), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    out: list[float] = []
    for m, _, c in blocks:
        out.extend([m] * int(c))
    return out if increasing else [-v for v in out]


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


#: How many weights the calibration's logistic model has (:func:`_features`).
N_FEATURES = 6


def _features(rank_p: float, vote: float, part_excess: float) -> list[float]:
    """Intercept, logit of the rank's precision, the vote, "voted", vote x rank logit, and how much of the vote
    only one request of a multi-request message gave (its best vote minus the whole message's)."""
    z = _logit(rank_p)
    return [1.0, z, vote, float(vote > 0), vote * z, part_excess]


def _fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """L2-regularised logistic regression by Newton's method; the first two weights are not penalised."""
    w = np.zeros(x.shape[1])
    pen = np.full(x.shape[1], ridge)
    pen[:2] = 0.0  # the intercept and the rank's weight are not the memory's: only its weights shrink to 0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        grad = x.T @ (p - y) + pen * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(pen + 1e-6)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return w


@dataclass(frozen=True)
class Calibration:
    """How often the memory's votes and the catalog ranking's ranks named a tool that served the request,
    measured on the log itself when it is learned.

    For sampled log records: the record's request is ranked by the catalog (the first stage), and the memory
    without the record (and without any record of the same text) votes, as for a new request.
    ``rank_precision[b]`` is the share of ranked tools at ranks in :data:`RANK_BINS` ``b`` that served the
    request (smoothed towards ``1 / (rank + 1)`` and made non-increasing). A logistic model (``coef``, over
    ``logit(rank precision)``, the vote, "voted" and their product) then gives the probability that a tool
    serves the request from its rank and its vote together: the stage orders candidates by it, so the memory
    moves a tool up only as far as such votes were right, on this log, more often than such ranks. When the
    log gives too little evidence (fewer than ``min_votes`` votes, or no right and no wrong one) ``coef`` is
    empty and a vote counts as far as the leave-one-out votes were right (see :meth:`probability`).
    """

    rank_precision: tuple[float, ...]
    coef: tuple[float, ...] = ()
    n_votes: int = 0
    n_right: int = 0
    records: int = 0

    @property
    def fitted(self) -> bool:
        return len(self.coef) == N_FEATURES

    def rank_p(self, rank: int | None) -> float:
        """Precision of the catalog ranking at ``rank`` (None: not ranked, the deepest bin's)."""
        if rank is not None:
            for (lo, hi), p in zip(RANK_BINS, self.rank_precision):
                if lo <= rank <= hi:
                    return p
        return self.rank_precision[-1]

    def probability(self, rank: int | None, vote: float, part_excess: float = 0.0) -> float:
        """P(the tool serves the request | its rank in the ranking (None: not ranked), its vote, and how much
        of the vote only one request of a multi-request message gave). Without a fitted model (too little
        evidence) ``1 - (1 - rank precision) * (1 - trust * vote)``, ``trust`` the leave-one-out votes' share of
        right ones (Laplace-smoothed), 0 when there was no leave-one-out vote at all: no evidence, no change."""
        if not self.fitted:
            trust = (self.n_right + 1) / (self.n_votes + 2) if self.n_votes else 0.0
            return 1.0 - (1.0 - self.rank_p(rank)) * (1.0 - trust * min(max(vote, 0.0), 1.0))
        z = float(np.dot(self.coef, _features(self.rank_p(rank), vote, part_excess)))
        return 1.0 / (1.0 + math.exp(-min(max(z, -30.0), 30.0)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank_precision": list(self.rank_precision),
            "coef": list(self.coef),
            "n_votes": self.n_votes,
            "n_right": self.n_right,
            "records": self.records,
        }

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> Calibration:
        def numbers(key: str) -> bool:
            v = obj.get(key)
            return isinstance(v, list) and all(is_finite_number(x) for x in v)

        ok = (
            isinstance(obj, dict)
            and numbers("rank_precision")
            and numbers("coef")
            and len(obj["rank_precision"]) == len(RANK_BINS)
            and all(0 <= x <= 1 for x in obj["rank_precision"])
            and len(obj["coef"]) in (0, N_FEATURES)
            and all(isinstance(obj.get(k, 0), int) for k in ("n_votes", "n_right", "records"))
        )
        if not ok:
            raise PersistenceError(f"{where}: corrupt usage memory calibration")
        return cls(
            tuple(float(x) for x in obj["rank_precision"]),
            tuple(float(x) for x in obj["coef"]),
            int(obj.get("n_votes", 0)),
            int(obj.get("n_right", 0)),
            int(obj.get("records", 0)),
        )

    @classmethod
    def fit(
        cls,
        samples: Sequence[tuple[Sequence[str], Mapping[str, tuple[float, float]], set[str]]],
        config: UsageMemoryConfig,
        records: int,
    ) -> Calibration:
        """The calibration from ``samples``: for each sampled log record, the catalog's ranking of its
        request, the memory's leave-one-out votes (tool -> (vote, part excess)) and the tools that served it."""
        longest = max((len(r) for r, _, _ in samples), default=0)
        bins = [next(j for j, (lo, hi) in enumerate(RANK_BINS) if lo <= r <= hi) for r in range(1, 1 + longest)]
        r_hits = [0.0] * len(RANK_BINS)
        r_seen = [0] * len(RANK_BINS)
        for ranking, _, served in samples:
            for rank, tool in enumerate(ranking, start=1):
                r_seen[bins[rank - 1]] += 1
                r_hits[bins[rank - 1]] += tool in served
        a = config.prior
        prior = [1.0 / (lo + 1) for lo, _ in RANK_BINS]
        rank_p = [(h + a * q) / (c + a) for h, c, q in zip(r_hits, r_seen, prior)]
        rank_p = _monotone(rank_p, [c + a for c in r_seen], increasing=False)
        cal = cls(tuple(rank_p), records=records)
        xs: list[list[float]] = []
        ys: list[float] = []
        n_votes = n_right = 0
        for ranking, votes, served in samples:
            ranks = {t: r for r, t in enumerate(ranking, start=1)}
            for tool in set(ranks) | set(votes):
                vote, part = votes.get(tool, (0.0, 0.0))
                xs.append(_features(cal.rank_p(ranks.get(tool)), vote, part))
                ys.append(float(tool in served))
                if vote > 0:
                    n_votes += 1
                    n_right += tool in served
        if n_votes < config.min_votes or n_right in (0, n_votes):
            return cls(tuple(rank_p), (), n_votes, n_right, records)
        coef = _fit_logistic(np.asarray(xs), np.asarray(ys), config.ridge)
        coef[1] = max(coef[1], 1e-3)  # never reverse the ranking's order among tools without votes
        return cls(tuple(rank_p), tuple(float(c) for c in coef), n_votes, n_right, records)


def _stable_sample(ids: Sequence[str], k: int) -> list[int]:
    """Positions of the ``k`` ids with the smallest hash (all when ``k >= len(ids)``): a sample that stays the
    same as a log grows, except for the new ids that enter it."""
    if k >= len(ids):
        return list(range(len(ids)))
    keys = [hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=8).digest() for i in ids]
    return sorted(sorted(range(len(ids)), key=keys.__getitem__)[:k])


def _catalog_key(ctx: StageContext) -> str:
    """Identifies the catalog and depth the kept calibration rankings were made with."""
    h = hashlib.blake2b(digest_size=12)
    h.update(str(ctx.depth).encode())
    for i in ctx.catalog.ids:
        h.update(i.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


# -- the stage ---------------------------------------------------------------------------------------
class UsageMemoryConfig(ConfigModel):
    """Parameters of the ``usage_memory`` stage (fusion knobs chosen on train splits: ``docs/benchmarks/usage.md``).

    Attributes:
        neighbours: how many similar past requests vote.
        min_similarity: a past request below this similarity does not vote (an irrelevant memory changes
            nothing); similarity = ``dense_weight`` * dense cosine + (1 - ``dense_weight``) * TF-IDF cosine.
        dense_weight: weight of the dense similarity (the rest is lexical).
        weight: ``fusion="weighted"``: weight of the memory's votes against the ranking's reciprocal ranks.
        rrf_k: ``fusion="weighted"``: the ranking contributes ``1 / (rrf_k + rank)``.
        sharpness: a vote is ``((sim - min_similarity) / (1 - min_similarity)) ** sharpness``.
        share_exponent: a past request's vote is divided by ``n_tools ** share_exponent``.
        min_support: co-usage edges need this many requests using both tools.
        trace_neighbours: similar past requests listed in the trace.
        split_requests: a message holding several requests (``multi_intent``'s
            :func:`~toolrerank_plugins.rerank.intents.split_requests`) is also looked up request by request,
            a tool keeping its best vote (a past request rarely asked for two things at once).
        part_support: a request of a multi-request message votes only for tools that served at least this
            many of its similar past requests (one wrong record cannot outvote the whole message).
        fusion: ``"calibrated"`` (default): each candidate's score is ``1 - (1 - p_rank) * (1 - p_vote)``,
            the probabilities that its rank in the ranking and its vote name a tool that serves the request,
            both measured on the log itself when it is learned (:class:`Calibration`), so the memory reorders
            only as far as it was more often right than the ranking; ``"weighted"``:
            ``1 / (rrf_k + rank) + weight * vote``.
        calibration_records: log records ranked by the catalog and voted on leave-one-out to fit the
            :class:`Calibration` (each costs one first-stage search when the log is learned).
        min_votes: fewer leave-one-out votes than this (or none right, or none wrong): too little evidence
            to fit the calibration's model; a vote then counts as far as those votes were right, and not at
            all without any (:meth:`Calibration.probability`).
        prior: pseudo-counts smoothing the ranks' precision towards ``1 / (rank + 1)``.
        ridge: L2 penalty on the memory's weights in the calibration's logistic model (the less evidence, the
            closer to "the memory changes nothing").
    """

    model_config = ConfigDict(extra="forbid")

    neighbours: int = Field(10, ge=1)
    min_similarity: float = Field(0.5, ge=0.0, lt=1.0)
    dense_weight: float = Field(0.9, ge=0.0, le=1.0)
    weight: float = Field(2.0, ge=0.0)
    rrf_k: int = Field(5, ge=1)
    sharpness: float = Field(1.0, gt=0.0)
    share_exponent: float = Field(0.5, ge=0.0)
    min_support: int = Field(2, ge=1)
    trace_neighbours: int = Field(3, ge=0)
    split_requests: bool = True
    part_support: int = Field(2, ge=1)
    fusion: Literal["calibrated", "weighted"] = "calibrated"
    calibration_records: int = Field(300, ge=0)
    min_votes: int = Field(20, ge=1)
    prior: float = Field(2.0, gt=0.0)
    ridge: float = Field(1.0, ge=0.0)


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
        mined = mine_trace_edges(self.memory.order, min_support=self.config.min_support, origin=USAGE_EDGE_ORIGIN)
        if not mined:
            return []
        support: Counter[tuple[str, str]] = Counter()
        for seq in self.memory.order:
            first: dict[str, int] = {}
            last: dict[str, int] = {}
            for pos, t in enumerate(seq):
                first.setdefault(t, pos)
                last[t] = pos
            for a, fa in first.items():
                for b, lb in last.items():
                    if a != b and fa < lb:
                        support[(a, b)] += 1
        uses = self.memory.tool_counts
        out = []
        for e in mined:
            if e.source in ctx.catalog and e.target in ctx.catalog:
                w = min(1.0, support[(e.source, e.target)] / max(uses[e.target], 1))
                out.append(Edge(e.source, e.target, type="co_usage", origin=USAGE_EDGE_ORIGIN, weight=round(w, 4)))
        return out

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
            (path / CALIBRATION_FILE).write_text(json.dumps(data), encoding="utf-8")


def _build(config: UsageMemoryConfig, ctx: StageContext, path: Path | None) -> UsageMemoryStage:
    if path is not None and (path / MEMORY_FILE).exists():
        calibration = None
        cfile = path / CALIBRATION_FILE
        if cfile.exists():
            try:
                obj = json.loads(cfile.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError, JSONDecodeError: ValueErrors
                raise PersistenceError(f"{cfile}: corrupt usage memory calibration ({exc})") from exc
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


# -- evaluation with a history -------------------------------------------------------------------------
def memorised_split(per_query: Sequence[Mapping[str, Any]], log_texts: Iterable[str]) -> dict[str, Any]:
    """Mean metrics of the evaluated queries whose text is identical to a logged request (``memorised``:
    the memory has seen the answer) and of the others (``generalised``), from an evaluation's ``per_query``
    rows (``query`` and ``metrics``)."""
    texts = set(log_texts)
    groups: dict[str, list[Mapping[str, float]]] = {"memorised": [], "generalised": []}
    for row in per_query:
        groups["memorised" if row["query"] in texts else "generalised"].append(row["metrics"])
    out: dict[str, Any] = {}
    for name, rows in groups.items():
        means: dict[str, float] = {k: float(np.mean([r[k] for r in rows])) for k in (rows[0] if rows else {})}
        means["n"] = len(rows)
        out[name] = means
    return out
