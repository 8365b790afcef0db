"""The LLM cache writes its entries through the library's atomic write helper: fsync-ed, and a failed write
leaves no temporary file behind and is the library's error naming the entry (it had no fsync and leaked its
``tmp*.tmp`` file on any error before)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins.errors import SaveError
from toolrerank_plugins.llm.cache import CachedLLM
from toolrerank_plugins.testing import ScriptedLLM


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _enospc(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_a_failed_cache_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    cache = CachedLLM(ScriptedLLM(["answer"]), tmp_path)
    monkeypatch.setattr(os, failing, _enospc)
    with pytest.raises(SaveError, match=r"\.json: cannot write the file: No space left on device") as info:
        cache.complete("hi")
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert _files(tmp_path) == []  # no entry, and no temporary file


def test_an_answer_that_cannot_be_encoded_leaves_no_temporary_file(tmp_path: Path) -> None:
    cache = CachedLLM(ScriptedLLM(["half a pair \ud83d"]), tmp_path)
    with pytest.raises(UnicodeEncodeError):
        cache.complete("hi")
    assert _files(tmp_path) == []


@pytest.mark.skipif(os.name != "posix", reason="folders are fsync-ed on POSIX only")
def test_a_cache_entry_and_its_folder_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert CachedLLM(ScriptedLLM(["answer"]), tmp_path).complete("hi") == "answer"
    (entry,) = [p for p in tmp_path.rglob("*.json")]
    assert entry.stat().st_ino in synced and entry.parent.stat().st_ino in synced
    assert CachedLLM(None, tmp_path, mode="replay").complete("hi") == "answer"
