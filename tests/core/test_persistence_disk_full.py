"""A save on a full disk is a ``SaveError`` and keeps the previous save, on real file systems (probe of 2026-11-26).

``faiss.write_index`` reported a failed write as its own ``RuntimeError`` (``write error in .../faiss.index:
49107 != 128000 (No space left on device)``), which escaped ``Engine.save`` instead of a ``SaveError``; and an
index small enough for stdio's buffer failed only when faiss closed the file, which faiss ignores (it left an
empty ``faiss.index``). The dense first stage now serialises the index and writes it through Python's file
API. These tests fill real file systems instead of patching a function:

- a tiny tmpfs (needs root and ``mount``; skipped otherwise), filled to leave 0, 1, 2, ... pages free, so that
  every file of a save, the faiss index included, is in turn the one that meets the full disk;
- ``RLIMIT_FSIZE`` in a child process (any user): every file of the save fits except ``faiss.index``
  (``EFBIG``).

Each time the save raises ``SaveError`` with the OS errno (or succeeds when there is room), the previous save
loads unchanged, and no temporary is left inside or beside the engine folder.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import SaveError
from toolrerank_plugins.persistence import LOCK_FILE, POINTER_FILE
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file systems and resource limits")

PAGE = 4096
QUERIES = ["weather forecast", "send email to bob", "change my email address"]


def _config(index: str = "flat", depth: int = 5) -> EngineConfig:
    return EngineConfig(retriever="dense", depth=depth, dense={"index": index}, stages=[])


def _signature(engine: Engine) -> Any:
    return (
        [s.id for s in engine.catalog],
        engine.config.depth,
        [[(r.id, round(r.score, 5)) for r in engine.search(q, 5)] for q in QUERIES],
    )


def _leftovers(path: Path) -> list[str]:
    """Temporaries inside ``path`` or beside it (anything but the committed version, pointer and lock)."""
    inside = sorted(p.name for p in path.iterdir() if p.name not in (LOCK_FILE, POINTER_FILE, "v-000001"))
    beside = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))
    return inside + beside


# -- a real full file system: tmpfs ------------------------------------------------------------------
@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test (root only)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tiny tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(fs: Path, leave_free: int) -> Path:
    """Fill ``fs`` completely, then give back ``leave_free`` bytes (tmpfs frees whole pages)."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    written = 0
    try:
        block = b"\0" * (64 * 1024)
        while True:
            try:
                written += os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                if len(block) == PAGE:
                    break
                block = block[: len(block) // 2]  # fill the last pages too
        os.ftruncate(fd, max(0, written - leave_free))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize(("dim", "index"), [(32, "flat"), (384, "flat"), (384, "flat-fp16"), (256, "hnsw")])
def test_a_full_tmpfs_is_a_save_error_whichever_file_meets_it(tiny_fs: Path, dim: int, index: str) -> None:
    # dim 32: faiss.index (1.3 KB) fits in stdio's buffer (the write failed only on close, silently);
    # dims 256 and 384: it does not (faiss raised RuntimeError mid-write)
    emb = FakeEmbedder(dim)
    old = Engine.build(tiny_catalog(), _config(index), embedder=emb)
    new = Engine.build(tiny_catalog(), _config(index, depth=7), embedder=emb)
    path = tiny_fs / "eng"
    outcomes: dict[str, int] = {}
    for free_pages in range(0, 24):
        shutil.rmtree(path, ignore_errors=True)
        (tiny_fs / "filler").unlink(missing_ok=True)
        old.save(path)
        before = _signature(Engine.load(path, embedder=emb))
        filler = _fill(tiny_fs, free_pages * PAGE)
        try:
            new.save(path, overwrite=True)
        except SaveError as exc:
            assert exc.errno == errno.ENOSPC and "No space left on device" in str(exc), exc
            assert "cannot save the engine" in str(exc) and "previous save" in str(exc)
            filler.unlink()  # room to load (and to see what the failed save left)
            assert _signature(Engine.load(path, embedder=emb)) == before
            assert _leftovers(path) == [], f"{free_pages} pages free: {_leftovers(path)}"
            outcomes["save_error"] = outcomes.get("save_error", 0) + 1
        else:
            filler.unlink()
            assert _signature(Engine.load(path, embedder=emb)) == _signature(new)
            outcomes["saved"] = outcomes.get("saved", 0) + 1
    assert outcomes.get("save_error", 0) >= 3 and outcomes.get("saved", 0) >= 1, outcomes


def test_a_first_save_on_a_full_tmpfs_leaves_nothing(tiny_fs: Path) -> None:
    emb = FakeEmbedder(384)
    engine = Engine.build(tiny_catalog(), _config(), embedder=emb)
    for free_pages in range(0, 12):
        filler = _fill(tiny_fs, free_pages * PAGE)
        try:
            engine.save(tiny_fs / "fresh")
        except SaveError as exc:
            assert exc.errno == errno.ENOSPC, exc
            assert sorted(p.name for p in tiny_fs.iterdir()) == ["filler"]  # no half-written folder, no temporary
        else:
            filler.unlink()
            assert _signature(Engine.load(tiny_fs / "fresh", embedder=emb)) == _signature(engine)
            shutil.rmtree(tiny_fs / "fresh")
        filler.unlink(missing_ok=True)


# -- a file-size limit: RLIMIT_FSIZE in a child process (no root needed) ----------------------------------
CHILD = r"""
import resource, signal, sys
from pathlib import Path
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import SaveError
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

path, limit = Path(sys.argv[1]), int(sys.argv[2])
cfg = EngineConfig(retriever="dense", depth=7, dense={"index": "hnsw"}, stages=[])
engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(256))
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


def test_a_faiss_index_past_the_file_size_limit_is_a_save_error(tmp_path: Path) -> None:
    emb = FakeEmbedder(256)
    probe = tmp_path / "probe"
    Engine.build(tiny_catalog(), _config("hnsw", depth=7), embedder=emb).save(probe)
    sizes = {p.name: p.stat().st_size for p in probe.rglob("*") if p.is_file()}
    limit = max(v for k, v in sizes.items() if k != "faiss.index") + 256
    assert sizes["faiss.index"] > limit + 1024, sizes  # only the faiss index meets the limit
    path = tmp_path / "eng"
    Engine.build(tiny_catalog(), _config("hnsw"), embedder=emb).save(path)
    before = _signature(Engine.load(path, embedder=emb))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.strip()
    assert out.startswith(f"SaveError {errno.EFBIG} "), out
    assert "faiss.index" in out or "File too large" in out, out
    assert _signature(Engine.load(path, embedder=emb)) == before
    assert _leftovers(path) == []
