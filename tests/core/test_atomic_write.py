"""The one atomic write helper (``toolrerank_plugins._atomic``): temporary file in the same folder, fsync,
``os.replace``, fsync of the folder, the temporary removed on any error, and an OS failure raised as the
library's error naming the file with the OS's reason and errno."""

from __future__ import annotations

import ast
import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins._atomic import atomic_open, write_atomic
from toolrerank_plugins.errors import PersistenceError, SaveError


def _enospc(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_writes_bytes_and_text_and_replaces_an_existing_file(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    assert write_atomic(f, b"\x00\x01binary") == f
    assert f.read_bytes() == b"\x00\x01binary"
    write_atomic(f, "text é\n")
    assert f.read_text(encoding="utf-8") == "text é\n"
    with atomic_open(f, "w") as fh:
        for line in ("one\n", "two\n"):
            fh.write(line)
    assert f.read_text(encoding="utf-8") == "one\ntwo\n"
    with atomic_open(tmp_path / "b.bin", "wb") as fh:
        fh.write(memoryview(b"x" * 300_000))  # larger than the buffer: written straight through
    assert (tmp_path / "b.bin").read_bytes() == b"x" * 300_000
    assert _entries(tmp_path) == ["a.json", "b.bin"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_replaced_file_keeps_its_permission_bits_a_new_one_gets_the_umask(tmp_path: Path) -> None:
    f = tmp_path / "private.jsonl"
    f.write_text("old\n")
    f.chmod(0o640)
    write_atomic(f, "new\n")
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    os.umask(umask)
    write_atomic(tmp_path / "fresh", "x")
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o666 & ~umask


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_a_symbolic_link_is_written_where_it_points(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "usage.jsonl"
    real.write_text("old\n")
    link = tmp_path / "usage.jsonl"
    link.symlink_to(real)
    write_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert _entries(tmp_path) == ["data", "usage.jsonl"] and _entries(tmp_path / "data") == ["usage.jsonl"]


def _record_sync_and_replace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record ("fsync", inode) and ("replace", inode of the file renamed) in order."""
    events: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        events.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.mark.skipif(os.name != "posix", reason="folders are fsync-ed on POSIX only")
def test_the_file_is_fsynced_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record_sync_and_replace(monkeypatch)
    f = tmp_path / "data.json"
    write_atomic(f, "{}")
    file_ino, dir_ino = f.stat().st_ino, tmp_path.stat().st_ino
    assert events == [("fsync", file_ino), ("replace", file_ino), ("fsync", dir_ino)]
    events.clear()
    write_atomic(tmp_path / "pointer.json", "{}", sync_folder=False)  # the caller syncs the folder itself
    assert [e for e, _ in events] == ["fsync", "replace"]


@pytest.mark.parametrize("failing", ["write", "fsync", "replace", "open"])
@pytest.mark.parametrize("how", ["bytes", "text", "stream"])
def test_a_full_disk_is_a_save_error_naming_the_file_and_the_old_file_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, how: str
) -> None:
    f = tmp_path / "engine.json"
    f.write_text("old")
    monkeypatch.setattr(os, failing, _enospc)
    with pytest.raises(SaveError) as info:
        if how == "bytes":
            write_atomic(f, b"new" * 50_000)
        elif how == "text":
            write_atomic(f, "new")
        else:
            with atomic_open(f, "w") as fh:
                fh.write("new")
    monkeypatch.undo()
    err = info.value
    assert err.errno == errno.ENOSPC and isinstance(err, OSError) and isinstance(err, PersistenceError)
    assert str(err).startswith(f"{f}: cannot write the file: No space left on device (ENOSPC)"), str(err)
    assert isinstance(err.__cause__, OSError)
    assert f.read_text() == "old" and _entries(tmp_path) == ["engine.json"]  # no temporary left


def test_the_caller_chooses_the_error_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class CacheWriteError(OSError):
        pass

    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(CacheWriteError, match="x.json: cannot write the file: No space left") as info:
        write_atomic(tmp_path / "x.json", "{}", error=CacheWriteError)
    assert info.value.errno == errno.ENOSPC and _entries(tmp_path) == []


def test_an_exception_in_the_with_block_removes_the_temporary_and_keeps_the_old_file(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    f.write_text("old\n")
    with pytest.raises(RuntimeError, match="caller"):
        with atomic_open(f, "w") as fh:
            fh.write("half of the new content\n" * 10_000)
            raise RuntimeError("caller gave up")
    assert f.read_text() == "old\n" and _entries(tmp_path) == ["log.jsonl"]
    with pytest.raises(UnicodeEncodeError):  # not an OS error: raised as it is
        with atomic_open(f, "w") as fh:
            fh.write("fine\n")
            fh.write("bad \ud800\n")
    assert f.read_text() == "old\n" and _entries(tmp_path) == ["log.jsonl"]


def test_text_that_cannot_be_encoded_touches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    with pytest.raises(UnicodeEncodeError):
        write_atomic(tmp_path / "x.json", "lone \udc80 surrogate")
    assert opened == [] and _entries(tmp_path) == []


def test_a_path_with_a_nul_byte_or_a_missing_folder_is_a_save_error(tmp_path: Path) -> None:
    with pytest.raises(SaveError, match="cannot hold a NUL byte"):
        write_atomic(tmp_path / "a\0b", "x")
    with pytest.raises(SaveError, match=r"missing/x.json: cannot write the file: No such file .*\(ENOENT\)") as info:
        write_atomic(tmp_path / "missing" / "x.json", "x")
    assert info.value.errno == errno.ENOENT


@pytest.mark.skipif(os.name != "posix", reason="folders are fsync-ed on POSIX only")
def test_a_folder_that_cannot_be_flushed_after_the_rename_says_the_file_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SaveError, match=r"x.json: written, but flushing its folder to disk failed: .*EIO") as info:
        write_atomic(tmp_path / "x.json", "new")
    assert info.value.errno == errno.EIO and (tmp_path / "x.json").read_text() == "new"


# -- a real failing write: RLIMIT_FSIZE in a child process (no root needed) ------------------------------
CHILD = r"""
import resource, signal, sys
from pathlib import Path
from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins.errors import SaveError

path, limit = Path(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_atomic(path, b"n" * (4 * limit))
except SaveError as exc:
    print("SaveError", exc.errno, exc)
except BaseException as exc:
    print("OTHER", type(exc).__name__, exc)
else:
    print("WRITTEN")
"""


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="RLIMIT_FSIZE on Linux")
def test_a_file_past_the_size_limit_is_a_save_error_with_efbig_and_no_temporary(tmp_path: Path) -> None:
    f = tmp_path / "big.bin"
    f.write_bytes(b"old")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(f), "100000"], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.strip()
    assert out.startswith(f"SaveError {errno.EFBIG} {f}: cannot write the file: File too large (EFBIG)"), out
    assert f.read_bytes() == b"old" and _entries(tmp_path) == ["big.bin"]


# -- every file the library writes goes through the helper ---------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolrerank_plugins"
#: Writes that are not a whole file replaced: the usage log is append-only (one ``write`` of one line per
#: record, several processes appending under a lock), so its appends cannot be a temp file + rename.
APPENDS = {("toolrerank_plugins/usage/log.py", "append")}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


class _Writes(ast.NodeVisitor):
    """Calls that write or replace a file: ``os.replace``, ``tempfile``, ``write_text`` / ``write_bytes``,
    ``np.save`` / ``tofile`` / ``faiss.write_index`` and ``open`` (builtin, ``Path.open``, ``io.open``,
    ``os.fdopen``) with a writing mode."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.functions: list[str] = []
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        what = None
        if name in ("os.replace", "os.fdopen") or name.startswith("tempfile."):
            what = name
        elif last in ("write_text", "write_bytes", "tofile", "write_index", "savez", "savez_compressed") or (
            last == "save" and name.split(".")[0] in ("np", "numpy")
        ):
            what = name
        elif last == "open" and name != "os.open":
            method = isinstance(node.func, ast.Attribute) and name not in ("io.open",)
            args = node.args[0:1] if method else node.args[1:2]
            modes = [a.value for a in args if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(isinstance(m, str) and set(m) & set("wax+") for m in modes):
                what = f"{name}({modes[0]!r})"
        if what and (self.rel, self.functions[-1] if self.functions else "") not in APPENDS:
            self.found.append(f"{self.rel}:{node.lineno}: {what}")
        self.generic_visit(node)


def test_no_module_but_the_helper_writes_or_replaces_files_itself() -> None:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        visitor = _Writes(rel)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        found += visitor.found
    helper = [f for f in found if f.startswith("toolrerank_plugins/_atomic.py:")]
    assert [f for f in found if f not in helper] == [], "write files through toolrerank_plugins._atomic"
    # the helper itself replaces files and serialises arrays to a buffer, and does nothing else of the kind
    assert sorted(f.split(": ", 1)[1] for f in helper) == ["np.save", "os.replace"], helper


def test_the_source_check_sees_what_it_must_refuse(tmp_path: Path) -> None:
    code = (
        "import os, tempfile, numpy as np\n"
        "def f(p):\n"
        "    os.replace('a', 'b')\n"
        "    fd, t = tempfile.mkstemp()\n"
        "    p.write_text('x')\n"
        "    np.save(p, [1])\n"
        "    with open(p, 'w') as fh: pass\n"
        "    with p.open('ab') as fh: pass\n"
        "    with open(p) as fh: pass\n"  # reading: fine
        "    with p.open(mode='r+') as fh: pass\n"
        "    os.open(p, os.O_RDONLY)\n"  # flags, not a mode: lock files and folder fsyncs
    )
    visitor = _Writes("x.py")
    visitor.visit(ast.parse(code))
    assert [f.split(": ", 1)[1] for f in visitor.found] == [
        "os.replace",
        "tempfile.mkstemp",
        "p.write_text",
        "np.save",
        "open('w')",
        "p.open('ab')",
        "p.open('r+')",
    ]
