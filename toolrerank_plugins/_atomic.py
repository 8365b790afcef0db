"""The one atomic write helper: every file the library writes goes through :func:`atomic_open` (or
:func:`write_atomic`, built on it), so a file is there complete or not at all, and a failed write is the
library's error naming the file and the operating system's reason.

How (POSIX): the data goes to a temporary file in the same folder (so the rename stays on one file system),
which is flushed and ``fsync``-ed, then ``os.replace``-d over the target (``rename(2)`` is atomic: readers see
the old file or the new one), and the folder is ``fsync``-ed so that the rename itself survives a power loss.
On any error — or an exception in the caller's ``with`` block — the temporary file is removed and an existing
file at the target is left as it was. A file that is replaced keeps its permission bits; a new one gets
``0o666`` less the umask, as ``open`` gives. A target that is a symbolic link is written where it points.

Errors: an ``OSError`` (disk full, a file-size or quota limit, a read-only folder, a parent that is a file) is
raised as ``error`` — :class:`~toolrerank_plugins.errors.SaveError` unless the caller chose another class —
with the target path, the OS's reason and its errno name in the message, and (for an ``OSError`` class) the
original ``errno``. Every byte is written with ``os.write``, never by C code (``faiss.write_index``,
``ndarray.tofile``) whose failed writes carry no errno or pass silently. Anything else (a ``UnicodeEncodeError``,
the caller's own exception) propagates unchanged; text is encoded before the temporary file is made.

Engine saves build on it: ``persistence`` writes each version folder's files and the ``current.json`` pointer
through it and keeps its own directory-level commit (a version folder renamed into place, then the pointer).

Arrays are saved as ``.npy`` bytes (:func:`npy_bytes`) and read back by :func:`load_npy`, JSON files by
:func:`read_json`; their failures are :class:`~toolrerank_plugins.errors.PersistenceError` (or the caller's class)
naming the file.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "a.json", '{"ok": true}').read_text()
    '{"ok": true}'
    >>> with atomic_open(folder / "b.jsonl", "w") as fh:
    ...     _ = fh.write("line 1\\n")
    >>> sorted(p.name for p in folder.iterdir())
    ['a.json', 'b.jsonl']
"""

from __future__ import annotations

import errno as _errno
import io
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from toolrerank_plugins.errors import PersistenceError, SaveError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["atomic_open", "fsync_dir", "npy_bytes", "write_atomic"]

#: Builds the error raised for an OS failure from its message (a class such as ``SaveError``).
ErrorFactory = Callable[[str], Exception]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def fsync_dir(path: str | Path) -> None:
    """``fsync`` a folder, making the renames and new entries in it durable (a no-op where folders cannot be
    opened, i.e. not POSIX; file systems that cannot fsync a folder are skipped: their files are synced)."""
    if os.name != "posix":  # pragma: no cover - directories cannot be opened for fsync elsewhere
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (_errno.EINVAL, _errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def os_reason(exc: OSError) -> str:
    """The OS's reason without the file name it may carry: ``No space left on device (ENOSPC)``."""
    reason = exc.strerror or str(exc)
    name = _errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    return f"{reason} ({name})" if name else reason


def _as_error(error: ErrorFactory, message: str, exc: OSError | None) -> Exception:
    err = error(message)
    if exc is not None and isinstance(err, OSError):
        err.errno = exc.errno  # str(err) stays the message: OSError shows errno only with a strerror
    return err


class _FdWriter(io.RawIOBase):
    """Raw writes to the temporary file, all through ``os.write``; ``fd`` None discards (after an error)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd: int | None = fd

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if self.fd is None:
            raise ValueError("the temporary file was discarded")
        return os.write(self.fd, b)


@contextmanager
def atomic_open(
    path: str | Path,
    mode: Literal["w", "wb"] = "wb",
    *,
    encoding: str = "utf-8",
    error: ErrorFactory = SaveError,
    tmp_prefix: str | None = None,
    sync_folder: bool = True,
) -> Iterator[IO[Any]]:
    """A file object writing ``path`` atomically (module docstring): ``with atomic_open(path, "w") as fh:``.

    The file replaces ``path`` when the ``with`` block ends without an exception; an exception in it (or any
    error) removes the temporary file and leaves ``path`` as it was. ``mode`` is ``"wb"`` (bytes) or ``"w"``
    (text in ``encoding``); the other arguments are :func:`write_atomic`'s.

    Raises:
        SaveError: (or ``error``) the OS refused a write; names ``path`` and the reason, keeps the errno.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    if "\0" in str(path):  # os calls would raise a bare ValueError
        raise _as_error(error, f"{str(path)!r}: cannot write the file: a path cannot hold a NUL byte", None)
    if path.is_symlink():  # write the file it points to (as open() would), not a file in the link's place
        path = Path(os.path.realpath(path))
    prefix = f".{path.name}.tmp-" if tmp_prefix is None else tmp_prefix
    tmp = path.with_name(f"{prefix}{os.getpid()}-{secrets.token_hex(6)}")
    fd: int | None = None
    raw: _FdWriter | None = None
    fh: IO[Any] | None = None
    created = False
    try:
        try:
            keep_mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:  # no file there yet (or not readable: the replace will say so)
            keep_mode = None
        fd = os.open(tmp, _FLAGS, 0o666)
        created = True
        if keep_mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, keep_mode)
        raw = _FdWriter(fd)
        buffered = io.BufferedWriter(raw, buffer_size=1 << 16)
        fh = io.TextIOWrapper(buffered, encoding=encoding) if mode == "w" else buffered
        yield fh
        fh.flush()
        os.fsync(fd)
        fh.close()
        os.close(fd)
        fd = None
        os.replace(tmp, path)
    except BaseException as exc:
        if raw is not None:
            raw.fd = None  # buffered data left behind never reaches a file descriptor again
        if fh is not None:
            try:
                fh.close()
            except (OSError, ValueError):
                pass
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        if created:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            except OSError:  # pragma: no cover - the folder went read-only meanwhile; nothing more to do
                pass
        if isinstance(exc, OSError) and not isinstance(exc, error if isinstance(error, type) else ()):
            raise _as_error(error, f"{path}: cannot write the file: {os_reason(exc)}", exc) from exc
        raise
    if sync_folder:
        try:
            fsync_dir(path.parent)
        except OSError as exc:
            raise _as_error(
                error, f"{path}: written, but flushing its folder to disk failed: {os_reason(exc)}", exc
            ) from exc


def write_atomic(
    path: str | Path,
    data: bytes | bytearray | memoryview | str,
    *,
    encoding: str = "utf-8",
    error: ErrorFactory = SaveError,
    tmp_prefix: str | None = None,
    sync_folder: bool = True,
) -> Path:
    """Write ``data`` (bytes, or text encoded with ``encoding``) to ``path`` atomically (module docstring).

    Args:
        path: the file to create or replace; its folder must exist.
        data: the whole content. Text is encoded first: an encoding error raises before anything is written.
        error: the error class raised for an OS failure (default :class:`~toolrerank_plugins.errors.SaveError`).
        tmp_prefix: the temporary file's name is ``tmp_prefix + "<pid>-<hex>"`` (default ``.<name>.tmp-``),
            for callers that clean up what killed writers left.
        sync_folder: ``fsync`` the folder after the rename (off when the caller does it, e.g. as a commit).

    Returns:
        ``path``.

    Raises:
        SaveError: (or ``error``) the OS refused a write; names ``path`` and the reason, keeps the errno.
    """
    payload = data.encode(encoding) if isinstance(data, str) else data
    with atomic_open(path, "wb", error=error, tmp_prefix=tmp_prefix, sync_folder=sync_folder) as fh:
        fh.write(payload)
    return Path(path)


def npy_bytes(array: np.ndarray) -> memoryview:
    """``array`` as the bytes of a ``.npy`` file (``allow_pickle=False``), for :func:`write_atomic`:
    ``np.save`` to a path writes with ``ndarray.tofile``, whose failed write has neither errno nor reason."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getbuffer()


def read_json(file: Path, what: str, *, error: type[Exception] = PersistenceError, advice: str = "") -> Any:
    """The JSON value of a UTF-8 file (one the library wrote: ``write_atomic(file, json.dumps(...))``). A file that
    cannot be read, is not UTF-8 or not JSON (which includes nesting past Python's recursion limit and an integer
    past its 4,300 digits) raises ``error`` naming ``file``, ``what`` it should hold and the problem, then
    ``advice`` (e.g. ``"; re-save the engine"``). What the value must look like is the caller's to check.

    Example:
        >>> import pathlib, tempfile
        >>> bad = pathlib.Path(tempfile.mkdtemp()) / "x.json"
        >>> _ = bad.write_text("[1,")
        >>> read_json(bad, "index file")
        Traceback (most recent call last):
        ...
        toolrerank_plugins.errors.PersistenceError: ...x.json: corrupt index file (not valid JSON: ...)
    """
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(f"{file}: cannot read {what} ({exc}){advice}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{file}: corrupt {what} (not UTF-8: {exc}){advice}") from exc
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; int() of too many digits; deep nesting
        raise error(f"{file}: corrupt {what} (not valid JSON: {exc}){advice}") from exc


def load_npy(file: Path, problem: str) -> Any:
    """``np.load`` of a ``.npy`` file :func:`npy_bytes` wrote (no pickles): the reading end of the same format. A
    file numpy cannot read raises :class:`~toolrerank_plugins.errors.PersistenceError` naming ``file`` and
    ``problem``; numpy parses the header with tokenize and ast (``TokenError``, ``SyntaxError``), and a corrupt
    shape can ask for any amount of memory."""
    import tokenize

    import numpy as np

    try:
        return np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError, MemoryError) as exc:
        raise PersistenceError(f"{file}: {problem} ({type(exc).__name__}: {exc})") from exc
