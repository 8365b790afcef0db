"""Every file the usage package writes goes through the library's atomic write helper: the log's rewrite
(``forget``, ``write_usage_log``) and the usage memory's files, so a full disk is the library's error with the
OS's errno, nothing is left half-written, and no temporary file stays."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins.errors import SaveError
from toolrerank_plugins.usage import UsageRecord, UsageRecorder, read_usage_log, write_usage_log


def _enospc(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def _recorder(tmp_path: Path) -> tuple[UsageRecorder, UsageRecord]:
    rec = UsageRecorder(tmp_path / "usage.jsonl")
    first = rec.record("weather in Oslo", calls=["Weather/SkyCast/forecast"], ts=1.0)
    rec.record("send an email", calls=["Mail/PostBox/send_email"], ts=2.0)
    return rec, first


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_forget_on_a_full_disk_is_a_save_error_and_keeps_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    rec, first = _recorder(tmp_path)
    before = rec.path.read_bytes()
    monkeypatch.setattr(os, failing, _enospc)
    with pytest.raises(SaveError, match=r"usage.jsonl: cannot write the file: No space left on device") as info:
        rec.forget(first.id)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert rec.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage.jsonl", "usage.jsonl.lock"]
    assert rec.forget(first.id) == 1 and len(rec.read().records) == 1  # and it works once there is room


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits and folder fsync")
def test_forget_fsyncs_the_log_and_its_folder_and_keeps_the_logs_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, first = _recorder(tmp_path)
    rec.path.chmod(0o640)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real_fsync(fd))[1])
    assert rec.forget(first.id) == 1
    assert rec.path.stat().st_ino in synced and tmp_path.stat().st_ino in synced
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o640  # a private log stays private, a shared one shared


def test_write_usage_log_on_a_full_disk_is_a_save_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    records = [UsageRecord("weather in Oslo", calls=("Weather/SkyCast/forecast",), ts=1.0)]
    write_usage_log(records, path)
    monkeypatch.setattr(os, "write", _enospc)
    with pytest.raises(SaveError, match="log.jsonl: cannot write the file") as info:
        write_usage_log(records * 2, path)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and read_usage_log(path).records == records
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]
