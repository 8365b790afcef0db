"""Usage records: one logged request and the tools that served it (frozen), as read from and written to a
usage log, and the labelled queries a log teaches (:func:`records_to_queries`: training data for
``toolrerank train``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.records import (
    LabelledQuery,
    check_text,
    is_finite_number,
    stable_id,
)


class UsageLogError(ToolRerankError, ValueError):
    """A usage log line or record is malformed (names the file and line, or the record)."""


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
