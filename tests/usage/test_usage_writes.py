"""Every file the usage package writes goes through the library's atomic write helper: the log's rewrite
(``forget``, ``write_usage_log``) and the usage memory's files, so a full disk is the library's error with the
OS's errno, nothing is left half-written, and no temporary file stays."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import SaveError
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
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


# -- the usage memory's files ----------------------------------------------------------------------------------
def _learned_engine(dim: int = 16, n: int = 6) -> Engine:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder(dim))
    tools = ["Weather/SkyCast/forecast", "Mail/PostBox/send_email"]
    records = [UsageRecord(f"request {i} for the {tools[i % 2]} tool", calls=(tools[i % 2],), ts=1.0) for i in range(n)]
    engine.learn(records)
    return engine


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_usage_memory_on_a_full_disk_is_a_save_error_naming_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    (stage,) = [s for s in _learned_engine().stages if s.name == "usage_memory"]
    monkeypatch.setattr(os, failing, _enospc)
    with pytest.raises(SaveError, match=r"usage_memory.json: cannot write the file: No space left") as info:
        stage.save(tmp_path)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []


CHILD = r"""
import resource, signal, sys
from pathlib import Path
from tests.usage.test_usage_writes import _learned_engine
from toolrerank_plugins.errors import SaveError

path, limit = Path(sys.argv[1]), int(sys.argv[2])
engine = _learned_engine(dim=2048, n=120)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    engine.save(path, overwrite=True)
except SaveError as exc:
    print("SaveError", exc.errno, exc)
except BaseException as exc:
    print("OTHER", type(exc).__name__, exc)
else:
    print("SAVED")
"""


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="RLIMIT_FSIZE on Linux")
def test_usage_vectors_past_the_file_size_limit_are_a_save_error_with_efbig(tmp_path: Path) -> None:
    # np.save to a path wrote with ndarray.tofile: its failed write was an OSError without errno
    engine = _learned_engine(dim=2048, n=120)
    probe = tmp_path / "probe"
    engine.save(probe)
    sizes = {p.name: p.stat().st_size for p in probe.rglob("*") if p.is_file()}
    limit = max(v for k, v in sizes.items() if k != "vectors.npy") + 256
    assert sizes["vectors.npy"] > limit + 4096, sizes  # only the usage memory's vectors meet the limit
    path = tmp_path / "eng"
    _learned_engine().save(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.strip()
    assert out.startswith(f"SaveError {errno.EFBIG} "), out
    assert "vectors.npy: cannot write the file: File too large (EFBIG)" in out, out
    assert len(Engine.load(path, embedder=FakeEmbedder(16)).stages[-1].memory) == 6  # the previous save
