"""The usage log file: JSONL compatible with ``queries.jsonl`` (:func:`read_usage_log`,
:func:`write_usage_log`), and the opt-in :class:`UsageRecorder` (append-only, thread- and process-safe;
:meth:`UsageRecorder.forget` rewrites the file atomically)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from toolrerank_plugins._atomic import atomic_open
from toolrerank_plugins.usage.records import UsageLogError, UsageRecord

try:  # POSIX advisory locks (several processes appending to one log); absent on Windows
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not POSIX
    _fcntl = None  # type: ignore[assignment]


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
    """Write ``records`` as a usage log (atomically: a temporary file replaces ``path``).

    Raises:
        UsageLogError: ``path`` holds a NUL byte.
        SaveError: the OS refused the write (disk full, read-only folder); names the file, keeps the errno.
    """
    path = Path(path)
    if "\0" in str(path):  # os calls would raise a bare ValueError
        raise UsageLogError(f"{str(path)!r}: cannot write the usage log there: a path cannot hold a NUL byte")
    _replace_file(path, (json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records))
    return path


def _replace_file(path: Path, lines: Iterable[str]) -> None:
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)


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

        The log is rewritten atomically (the library's atomic write helper: a temporary file, fsync-ed,
        replaces it), so a crash leaves the old or the new log; an OS failure (a full disk) is a ``SaveError``
        naming the log, which is left as it was. Lines that are not valid records are kept as they are.
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
