"""Saving and loading engines as a directory of non-pickle files, switched atomically and crash-safely.

This module reads and writes an engine's *parts* (:class:`EngineParts`); it does not know the
:class:`~toolrerank_plugins.engine.Engine` class, which saves itself through :func:`write_engine` and
assembles itself from :func:`read_engine` (``Engine.from_parts``).

Layout: ``path`` is a stable directory holding *versions*; a small pointer file names the committed one::

    engine_dir/
      current.json      {"library": "toolrerank-plugins", "current": "v-000002"}: the committed version
      v-000002/         the engine's files (one version, below)
      .lock             writers hold it (``flock``) for the whole save; empty
      .tmp-<pid>-<hex>  a save in progress (or left by a killed one: removed by the next save)

    v-000002/
      .pin            readers hold it (shared ``flock``) while they read this version; empty
      config.json     library name + version, format version, EngineConfig, seen tools, number of APIs
      manifest.json   sha256 and size of every other file (verified on load)
      tools.jsonl     the catalog          edges.jsonl   its dependencies
      dense/          faiss.index, embeddings.npy (the embeddings cache), ids.json, dense.json
      bm25/           bm25.json (ids + texts; re-indexed on load)
      stages/NN-name/ each stage's own files (models as save_pretrained folders, graphs as JSON)

:func:`version_dir` gives the folder of the committed version. A directory with ``config.json`` at its root
(the single-folder layout written before) still loads, and ``save(path, overwrite=True)`` over it switches it
to the versioned layout.

Why this is crash-safe (POSIX): a version is written completely into ``.tmp-*``, every file and folder is
``fsync``-ed, the folder is renamed to ``v-NNNNNN``, and only then ``current.json`` is replaced: written to a
temporary file, ``fsync``-ed, ``os.replace``-d over the old pointer (``rename(2)`` is atomic) and the folder
``fsync``-ed. Every file, the pointer included, is written by the library's one atomic write helper
(:mod:`toolrerank_plugins._atomic`); this module adds the directory-level commit. A reader resolves the pointer
once and reads that version, so a process killed at any instant, or a power loss, leaves ``path`` pointing at
either the old or the new complete version. Old versions are deleted only after the new pointer is durable, and
not while a reader holds their pin (a shared ``flock`` on ``v-*/.pin``, taken right after the pointer is read and
held until the engine is assembled; opening it needs no write permission): a later save removes them. A loader
that loses the race before it holds the pin (the version went first), or reads a version an older release saved
without one, re-reads the pointer and retries.
A first save into a missing ``path`` builds the whole directory as a hidden sibling (``.<name>.tmp-<pid>-<hex>``)
and renames it into place, so ``path`` never exists half-written.

Stale temporaries: writers take an exclusive ``flock`` on ``path/.lock`` (first saves: on ``.lock`` inside
their sibling temporary), which the kernel releases when a process dies, even on ``SIGKILL``. A save therefore
removes everything in ``path`` that is not the committed version (all other writers are dead or waiting), and a
sibling temporary of ``path`` only when its lock is free and the pid in its name no longer runs; a concurrent
live writer's temporary is left alone. Saves to one ``path`` are serialised (the last one wins). Leftovers of
older releases (``.<name>.old-<pid>``, ``.<name>.tmp-<random>``) are removed once ``path`` holds a committed
engine. Without ``flock`` (not POSIX) nothing is locked and sibling temporaries are left in place.

``save(path, overwrite=True)`` only replaces a directory that is a saved engine (or is empty); anything else
(a regular file, a folder of other files) raises :class:`PersistenceError` naming it. Operating-system errors
while saving (read-only folder, disk full, a parent that is a file) raise :class:`SaveError`, a
:class:`PersistenceError` that is also an :class:`OSError` (with its ``errno``), and leave the previous save as
it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from toolrerank_plugins._atomic import fsync_dir, read_json, write_atomic
from toolrerank_plugins._compat import check_config_value
from toolrerank_plugins._version import FORMAT_VERSION, __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig, saved_config
from toolrerank_plugins.errors import CatalogError, PersistenceError, SaveError
from toolrerank_plugins.loaders.jsonl import load_edges, load_tools_jsonl, write_edges, write_tools_jsonl
from toolrerank_plugins.retrieval.base import FirstStage, get_first_stage_type
from toolrerank_plugins.stages import Stage, get_stage_type

try:  # POSIX advisory locks; absent on Windows
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not POSIX
    _fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from toolrerank_plugins.encoders import Embedder

logger = logging.getLogger(__name__)

LIBRARY = "toolrerank-plugins"
POINTER_FILE = "current.json"
LOCK_FILE = ".lock"
#: In each version: readers hold a shared ``flock`` on it while they read the version, and a save leaves a
#: version whose pin is held in place (a later save removes it). Empty; hidden, so not an engine file.
PIN_FILE = ".pin"
_TMP = ".tmp-"
_VERSION_RE = re.compile(r"v-(\d{6,})")
_NEW_TMP_RE = re.compile(r"(\d+)-[0-9a-f]+")  # "<pid>-<hex>" after the ".tmp-" prefix
_SHA_RE = re.compile(r"[0-9a-f]{64}")
#: Top-level entries of the single-folder layout (removed after it is switched to versions).
_LEGACY_ENTRIES = ("config.json", "manifest.json", "tools.jsonl", "edges.jsonl", "dense", "bm25", "stages", ".pin")


def _save_error(path: Path, what: str, exc: OSError) -> SaveError:
    err = SaveError(f"{path}: cannot save the engine: {what} ({exc}); the previous save, if any, is unchanged")
    err.errno = exc.errno
    return err


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stage_dir(root: Path, i: int, name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    return root / "stages" / f"{i:02d}-{safe}"


@dataclass
class EngineParts:
    """What an engine directory holds, read back by :func:`read_engine`; ``Engine.from_parts`` assembles them.

    ``stage_dirs[i]`` is stage ``i``'s folder when it saved files, else None; ``root`` is the version folder
    they were read from (see :func:`version_dir`); ``pin`` holds that version's pin (:func:`pin_version`: no save
    removes the folder meanwhile) until :meth:`release`, which whoever reads the stage folders calls after.
    """

    catalog: Catalog
    config: EngineConfig
    first_stage: FirstStage
    stage_dirs: list[Path | None]
    root: Path | None = None
    pin: int | None = None

    def release(self) -> None:
        """Let saves remove the version read (once; later calls do nothing)."""
        pin, self.pin = self.pin, None
        if pin is not None:
            os.close(pin)


# -- durability helpers (files are written by the one atomic write helper, _atomic.py) ---------------
def _hash_and_sync(path: Path) -> str:
    """sha256 of a file, after flushing it to disk (savers we do not control wrote it)."""
    with path.open("rb") as fh:
        os.fsync(fh.fileno())
        h = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sync_tree_dirs(root: Path) -> None:
    """fsync every folder under ``root``, deepest first, then ``root``."""
    dirs = sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts))
    for d in [*dirs, root]:
        fsync_dir(d)


# -- locks and stale temporaries -------------------------------------------------------------------
def _try_lock(
    lock_file: Path, *, create: bool, blocking: bool, readonly: bool = False, shared: bool = False
) -> int | None:
    """An fd holding an exclusive (``shared``: a shared) flock on ``lock_file``, or None when another process
    holds a conflicting one (or, with ``create=False``, when the file does not exist). ``readonly`` opens it
    read-only (``flock`` needs no more)."""
    flags = (os.O_RDONLY if readonly else os.O_RDWR) | (os.O_CREAT if create else 0)
    try:
        fd = os.open(lock_file, flags, 0o666)
    except FileNotFoundError:
        if create:
            raise
        return None
    if _fcntl is None:  # pragma: no cover - not POSIX: no locking
        return fd
    try:
        _fcntl.flock(fd, (_fcntl.LOCK_SH if shared else _fcntl.LOCK_EX) | (0 if blocking else _fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pid_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":  # pragma: no cover - os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True


def _remove(p: Path) -> None:
    """Remove a stale entry; failures are logged (the next save tries again), never fatal."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not remove stale %s (%s); the next save will try again", p, exc)


def _clean_siblings(path: Path, *, committed: bool) -> None:
    """Remove temporaries that dead writers left next to ``path`` (see the module docstring)."""
    try:
        entries = [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    except OSError:
        return
    commit_mtime = None
    if committed:  # when the engine at path was last committed
        for marker in (path / POINTER_FILE, path / "config.json"):
            if marker.exists():
                commit_mtime = marker.stat().st_mtime
                break
    for p in entries:
        try:
            _clean_sibling(p, path.name, commit_mtime)
        except OSError as exc:  # best effort: the next save tries again
            logger.warning("could not check stale %s (%s); the next save will try again", p, exc)


def _clean_sibling(p: Path, name: str, commit_mtime: float | None) -> None:
    tmp_prefix, old_prefix = f".{name}{_TMP}", f".{name}.old-"
    if p.name.startswith(tmp_prefix):
        m = _NEW_TMP_RE.fullmatch(p.name[len(tmp_prefix) :])
        if m is None:  # an older release's temporary (no pid): stale once a newer engine is committed
            if commit_mtime is not None and p.stat().st_mtime < commit_mtime:
                _remove(p)
            return
        fd = _try_lock(p / LOCK_FILE, create=False, blocking=False)
        if fd is None and (p / LOCK_FILE).exists():
            return  # a live writer holds its lock
        try:
            if not _pid_running(int(m.group(1))):
                _remove(p)
        finally:
            if fd is not None:
                os.close(fd)
    elif p.name.startswith(old_prefix) and commit_mtime is not None:
        pid = p.name[len(old_prefix) :]
        if pid.isdigit() and not _pid_running(int(pid)):
            _remove(p)  # an older release's backup, superseded by the committed engine


def _clean_inside(path: Path, keep: str | None) -> None:
    """Under the writer lock: remove every temporary and version of ``path`` other than ``keep``, except a
    version a reader holds pinned (:func:`pin_version`), which a later save removes."""
    for p in path.iterdir():
        n = p.name
        if n.startswith(_TMP):
            _remove(p)
        elif _VERSION_RE.fullmatch(n) and n != keep:
            _remove_unpinned(p)
        elif keep is not None and n in _LEGACY_ENTRIES:
            _remove(p)  # the single-folder layout, left by a switch to versions that was interrupted


def _remove_unpinned(version: Path) -> None:
    """Remove the version folder unless a reader holds its pin; the pin is held exclusively meanwhile, so no
    reader can take it while the folder goes (a version without a pin, from an older release: removed)."""
    try:
        fd = _try_lock(version / PIN_FILE, create=False, blocking=False, readonly=True)
    except OSError:  # cannot open it (permissions): remove as before pins existed
        fd = None
    else:
        if fd is None and (version / PIN_FILE).exists():
            logger.debug("%s: a reader holds it; a later save removes it", version)
            return
    try:
        _remove(version)
    finally:
        if fd is not None:
            os.close(fd)


def pin_version(version: Path) -> int | None:
    """A file descriptor holding a shared ``flock`` on the version folder's pin, so no save removes the folder
    until it is closed; None where the version has no pin (saved by an older release), is being removed or went
    already, the pin cannot be opened, or locks are not available (not POSIX). Opens the pin read-only."""
    if _fcntl is None:  # pragma: no cover - not POSIX
        return None
    pin = version / PIN_FILE
    try:  # None: no pin, or a save removing the version holds it
        fd = _try_lock(pin, create=False, blocking=False, readonly=True, shared=True)
    except OSError:
        return None
    if fd is None:
        return None
    try:
        same = os.fstat(fd).st_ino == os.stat(pin).st_ino  # else removed (and maybe made again) meanwhile
    except OSError:  # gone
        same = False
    if not same:
        os.close(fd)
        return None
    return fd


# -- what is at a path -----------------------------------------------------------------------------
#: Reads of a saved engine that a concurrent save's commit (which deletes the version being read) makes a
#: reader start over. Each retry needs another commit meanwhile. Without pins, saves committing faster than one
#: load could use them all up (8 did once, on a machine busy with two other jobs, against a process saving a small
#: engine in a tight loop: tests/core/test_persistence_race.py in CI, 2026-11-27; and 32 later the same day, on a
#: machine running two other heavy jobs). Since versions are pinned (:func:`pin_version`) a retry needs a commit
#: between reading the pointer and taking the pin, or a version saved without a pin.
_READ_ATTEMPTS = 32


def _pointer_name(file: Path) -> str:
    data = read_json(file, POINTER_FILE)
    if not isinstance(data, dict) or data.get("library") != LIBRARY:
        raise PersistenceError(f"{file}: not a {LIBRARY} version pointer (foreign or corrupt file)")
    name = data.get("current")
    if not isinstance(name, str) or not _VERSION_RE.fullmatch(name):
        raise PersistenceError(f"{file}: corrupt version pointer ('current' is {name!r}, expected 'v-NNNNNN')")
    return name


def _read_pointer(path: Path) -> str:
    """The committed version's folder name from ``path/current.json`` (checked: no path can escape ``path``).

    A save may commit a newer version and delete the one the pointer named between reading the pointer and
    looking for that folder: the pointer is then read again (up to ``_READ_ATTEMPTS`` times); a folder that
    is missing while the pointer still names it is a damaged directory.
    """
    file = path / POINTER_FILE
    name = _pointer_name(file)
    for _ in range(_READ_ATTEMPTS):
        if (path / name).is_dir():
            return name
        newer = _pointer_name(file)
        if newer == name:
            break
        name = newer  # a save committed meanwhile
    raise PersistenceError(f"{file}: names version {name}, which is missing; the engine directory is damaged")


def _is_ours(p: Path) -> bool:
    """Entries this module creates inside an engine directory besides a committed version."""
    return p.name in (LOCK_FILE, POINTER_FILE) or p.name.startswith(_TMP) or bool(_VERSION_RE.fullmatch(p.name))


def _inspect(path: Path) -> str:
    """``missing``, ``empty`` (an empty folder or one holding only our temporaries), ``versioned``, ``legacy``;
    raises PersistenceError for anything that is not a saved engine."""
    if not os.path.lexists(path):
        return "missing"
    if not path.is_dir():
        kind = "a regular file" if path.is_file() else "not a directory"
        raise PersistenceError(f"{path} is {kind}, not a saved engine; refusing to replace it")
    if (path / POINTER_FILE).exists():
        try:
            _read_pointer(path)
        except PersistenceError as exc:
            raise PersistenceError(
                f"{path}: refusing to replace a damaged engine directory ({exc}); remove it yourself"
            ) from exc
        return "versioned"
    if (path / "config.json").exists():
        try:
            cfg = read_json(path / "config.json", "config.json")
        except PersistenceError as exc:
            raise PersistenceError(f"{path}: refusing to replace it: {exc}") from exc
        if not isinstance(cfg, dict) or cfg.get("library") != LIBRARY:
            raise PersistenceError(
                f"{path} holds a config.json that was not written by {LIBRARY}; refusing to replace it"
            )
        return "legacy"
    others = [p.name for p in path.iterdir() if not _is_ours(p)]
    if others:
        shown = ", ".join(sorted(others)[:5]) + (", ..." if len(others) > 5 else "")
        raise PersistenceError(
            f"{path} is a folder of other files ({shown}), not a saved engine; refusing to replace it"
        )
    return "empty"


def version_dir(path: str | Path) -> Path:
    """The folder that holds the files of the engine saved at ``path`` (its committed version).

    ``path`` itself for the single-folder layout of earlier releases.

    Raises:
        PersistenceError: ``path`` is missing, not a folder, or holds no saved engine.
    """
    path = Path(path)
    if not path.is_dir():
        hint = ""
        prefix = f".{path.name}.old-"
        olds = sorted(p for p in path.parent.iterdir() if p.name.startswith(prefix)) if path.parent.is_dir() else []
        if olds and not os.path.lexists(path):
            hint = (
                f"; a save by an older release was interrupted and left {olds[0]}: it may hold the engine "
                f"(rename it to {path} to load it)"
            )
        raise PersistenceError(f"{path}: not an engine directory (does not exist or is not a folder){hint}")
    if (path / POINTER_FILE).exists():
        return path / _read_pointer(path)
    if (path / "config.json").exists():
        return path
    if any(_VERSION_RE.fullmatch(p.name) or p.name.startswith(_TMP) for p in path.iterdir()):
        raise PersistenceError(f"{path}: no committed engine (a first save into this folder did not finish)")
    raise PersistenceError(f"{path}: no config.json; not a saved toolrerank-plugins engine")


# -- writing ---------------------------------------------------------------------------------------
def _config_json(path: Path, catalog: Catalog, config: EngineConfig) -> bytes:
    """``config.json``'s bytes, checked to load back: the config holds nothing a config may not
    (:func:`~toolrerank_plugins._compat.check_config_value`: NaN, infinity, a lone surrogate, a huge integer),
    the dumped config validates again as an :class:`EngineConfig` and each stage's ``params`` through its stage
    type's config model, and JSON holds no NaN or infinity. Called before anything is written, so a config
    that would not load (an infinite parameter dumped as ``null``, a lone surrogate) raises
    :class:`PersistenceError` and leaves the previous save as it was."""
    try:
        check_config_value(config.model_dump())  # changed in place since it was validated: NaN would dump as null
        dumped = config.model_dump(mode="json")
        checked = EngineConfig.model_validate(dumped)
        for spec in checked.stages:
            get_stage_type(spec.type).config_model.model_validate(spec.params)
        meta = {
            "library": LIBRARY,
            "library_version": __version__,
            "format_version": FORMAT_VERSION,
            "engine": dumped,
            "seen_tools": sorted(catalog.seen_tools),
            "n_apis": len(catalog),
        }
        return json.dumps(meta, indent=2, allow_nan=False).encode("utf-8")
    except (ValidationError, ValueError, TypeError) as exc:  # ConfigError, UnicodeEncodeError: ValueErrors
        raise PersistenceError(
            f"{path}: cannot save the engine: its config would not load back ({exc}); fix the config (the "
            "previous save, if any, is unchanged)"
        ) from exc


def _write_version(
    dest: Path, *, catalog: Catalog, config_json: bytes, first_stage: FirstStage, stages: Sequence[Stage]
) -> None:
    """Write one complete version into the (existing, empty) folder ``dest`` and flush it to disk."""
    write_tools_jsonl(catalog, dest / "tools.jsonl")
    write_edges(catalog.edges, dest / "edges.jsonl")
    first_stage.save(dest)
    for i, stage in enumerate(stages):
        d = _stage_dir(dest, i, stage.name)
        d.mkdir(parents=True, exist_ok=True)
        stage.save(d)
        if not any(d.iterdir()):  # a stage with nothing to save loads with path=None
            d.rmdir()
    write_atomic(dest / "config.json", config_json)
    files = {
        p.relative_to(dest).as_posix(): {"sha256": _hash_and_sync(p), "size": p.stat().st_size}
        for p in sorted(dest.rglob("*"))
        if p.is_file()
    }
    write_atomic(dest / "manifest.json", json.dumps({"files": files}, indent=1).encode("utf-8"))
    write_atomic(dest / PIN_FILE, b"")  # after the manifest: hidden, not an engine file
    _sync_tree_dirs(dest)


def _write_pointer(folder: Path, version: str) -> None:
    """Atomically point ``folder/current.json`` at ``version`` (:func:`~toolrerank_plugins._atomic.write_atomic`:
    temp file + fsync + ``os.replace``; its temporary is named like the save's, so the next save removes one
    a killed writer left); the caller then fsyncs ``folder`` to make the switch durable."""
    data = json.dumps({"library": LIBRARY, "current": version}).encode("utf-8")
    write_atomic(folder / POINTER_FILE, data, tmp_prefix=f"{_TMP}current-", sync_folder=False)


def _sync_committed(path: Path, folder: Path) -> None:
    """fsync ``folder`` after a commit; the new engine is already in place, so say that if it fails."""
    try:
        fsync_dir(folder)
    except OSError as exc:
        err = SaveError(f"{path}: the engine was saved but flushing {folder} to disk failed ({exc})")
        err.errno = exc.errno
        raise err from exc


def _new_tmp_name(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{secrets.token_hex(6)}"


def _save_fresh(path: Path, parts: dict[str, Any]) -> bool:
    """First save into a missing ``path``: build everything aside, rename it in. False if ``path`` appeared."""
    tmp = path.parent / _new_tmp_name(f".{path.name}{_TMP}")
    try:
        os.mkdir(tmp)
    except OSError as exc:
        raise _save_error(path, f"cannot create a temporary folder in {path.parent}", exc) from exc
    fd: int | None = None
    try:
        fd = _try_lock(tmp / LOCK_FILE, create=True, blocking=True)
        version = "v-000001"
        os.mkdir(tmp / version)
        _write_version(tmp / version, **parts)
        _write_pointer(tmp, version)
        fsync_dir(tmp)
        try:
            os.rename(tmp, path)  # the commit point: atomic; fails when something appeared at path meanwhile
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            raise
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _save_error(path, "writing failed", exc) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if fd is not None:
            os.close(fd)
    _sync_committed(path, path.parent)
    return True


def _save_version(path: Path, parts: dict[str, Any]) -> None:
    """Add a version to the engine directory ``path`` and commit it, holding the writer lock."""
    try:
        lock_fd = _try_lock(path / LOCK_FILE, create=True, blocking=True)
    except OSError as exc:
        raise _save_error(path, f"cannot lock {path / LOCK_FILE}", exc) from exc
    try:
        state = _inspect(path)  # again, under the lock: another writer may have committed meanwhile
        if state not in ("empty", "versioned", "legacy"):
            raise PersistenceError(f"{path}: changed while waiting for the writer lock ({state})")
        old = _read_pointer(path) if state == "versioned" else None
        _clean_inside(path, old)
        _clean_siblings(path, committed=state != "empty")
        seqs = [int(m.group(1)) for p in path.iterdir() if (m := _VERSION_RE.fullmatch(p.name))]
        final = path / f"v-{max(seqs, default=0) + 1:06d}"
        tmp = path / _new_tmp_name(_TMP)
        try:
            os.mkdir(tmp)
            _write_version(tmp, **parts)
            os.rename(tmp, final)
            fsync_dir(path)
            _write_pointer(path, final.name)  # the commit point
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)
            if isinstance(exc, OSError):  # also a file's SaveError: say that the engine was not saved
                raise _save_error(path, "writing failed", exc) from exc
            raise
        _sync_committed(path, path)
        # Committed and durable: the previous version (or the single-folder layout) can go.
        _clean_inside(path, final.name)
    except SaveError:
        raise
    except OSError as exc:
        raise _save_error(path, "writing failed", exc) from exc
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def write_engine(
    path: Path,
    *,
    catalog: Catalog,
    config: EngineConfig,
    first_stage: FirstStage,
    stages: Sequence[Stage],
    overwrite: bool = False,
) -> Path:
    """Write an engine's parts to ``path`` as a new committed version (see the module docstring).

    Raises:
        PersistenceError: ``path`` exists and ``overwrite`` is false, or ``path`` is not a saved engine
            (a file, a folder of other files), or holds a NUL byte; the config would not load back (checked
            before anything is written), or text cannot be encoded. The previous save is left as it was.
        SaveError: the operating system refused a write (a :class:`PersistenceError` and an ``OSError``).
    """
    path = Path(path)
    if "\0" in str(path):  # no file system takes it (os calls would raise a bare ValueError)
        raise PersistenceError(f"{str(path)!r}: cannot save the engine there: a path cannot hold a NUL byte")
    parts = {
        "catalog": catalog,
        "config_json": _config_json(path, catalog, config),
        "first_stage": first_stage,
        "stages": stages,
    }
    try:
        return _write_engine(path, parts, overwrite=overwrite)
    except UnicodeError as exc:  # text a stage or the first stage could not encode; nothing was committed
        raise PersistenceError(
            f"{path}: cannot save the engine: {exc}; the previous save, if any, is unchanged"
        ) from exc


def _write_engine(path: Path, parts: dict[str, Any], *, overwrite: bool) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _save_error(path, f"cannot create the parent folder {path.parent}", exc) from exc
    try:
        state = _inspect(path)
        if state == "missing":
            _clean_siblings(path, committed=False)
            if _save_fresh(path, parts):
                return path
            state = _inspect(path)  # something appeared at path while we wrote
    except SaveError:
        raise
    except OSError as exc:
        raise _save_error(path, "cannot inspect it", exc) from exc
    if not overwrite:
        raise PersistenceError(f"{path} already exists; pass overwrite=True to replace it")
    _save_version(path, parts)
    return path


# -- reading ---------------------------------------------------------------------------------------
def read_config(path: Path) -> dict[str, Any]:
    """Read and check ``config.json`` of a saved engine version (library, format version, field types)."""
    if not path.is_dir():
        raise PersistenceError(f"{path}: not an engine directory (does not exist or is not a folder)")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise PersistenceError(f"{path}: no config.json; not a saved toolrerank-plugins engine")
    cfg = read_json(cfg_file, "config.json")
    if not isinstance(cfg, dict) or cfg.get("library") != LIBRARY:
        raise PersistenceError(f"{path}: config.json was not written by {LIBRARY} (foreign directory)")
    fv = cfg.get("format_version")
    if type(fv) is not int:
        raise PersistenceError(f"{cfg_file}: missing or invalid format_version {fv!r} (expected an integer)")
    if fv > FORMAT_VERSION:
        raise PersistenceError(
            f"{path}: saved with format version {fv} by {LIBRARY} {cfg.get('library_version')}; this is "
            f"{__version__} (format {FORMAT_VERSION}). Upgrade toolrerank-plugins to load it."
        )
    if fv < 1:
        raise PersistenceError(f"{cfg_file}: invalid format_version {fv} (formats start at 1)")
    seen = cfg.get("seen_tools", [])
    if not isinstance(seen, list) or not all(isinstance(t, str) for t in seen):
        raise PersistenceError(f"{cfg_file}: 'seen_tools' must be a list of tool names, got {seen!r:.80}")
    n_apis = cfg.get("n_apis")
    if n_apis is not None and (type(n_apis) is not int or n_apis < 0):
        raise PersistenceError(f"{cfg_file}: 'n_apis' must be a non-negative integer, got {n_apis!r:.80}")
    if not isinstance(cfg.get("engine"), dict):
        raise PersistenceError(f"{cfg_file}: 'engine' (the EngineConfig) is missing or not an object")
    return cfg


def _listed_name(rel: object, mfile: Path) -> str:
    if not isinstance(rel, str) or not rel:
        raise PersistenceError(f"{mfile}: corrupt manifest (file name {rel!r} is not a relative path)")
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel or p.as_posix() != rel:
        raise PersistenceError(f"{mfile}: corrupt manifest (file name {rel!r} is not a plain relative path)")
    return rel


def required_files(config: EngineConfig) -> list[str]:
    """Files the manifest of an engine with this config must list (whatever else it lists)."""
    # each first stage declares its own (an empty manifest would otherwise verify nothing)
    return ["config.json", "tools.jsonl", "edges.jsonl", *get_first_stage_type(config.retriever).files(config)]


def verify_manifest(path: Path, required: Sequence[str] = ("config.json", "tools.jsonl", "edges.jsonl")) -> None:
    """Check ``manifest.json`` of the version folder ``path``: it lists every file there (and ``required``),
    and every listed file has its recorded size and sha256."""
    mfile = path / "manifest.json"
    if not mfile.is_file():
        raise PersistenceError(f"{mfile}: missing manifest; the engine directory is incomplete")
    manifest = read_json(mfile, "manifest")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise PersistenceError(
            f"{mfile}: corrupt manifest ('files' must be a non-empty object of file name -> sha256 and size, "
            f"got {type(files).__name__})"
        )
    expected: dict[str, tuple[str, int]] = {}
    for rel, meta in files.items():
        name = _listed_name(rel, mfile)
        sha = meta.get("sha256") if isinstance(meta, dict) else None
        size = meta.get("size") if isinstance(meta, dict) else None
        if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha) or type(size) is not int or size < 0:
            raise PersistenceError(f"{mfile}: corrupt manifest entry for {name!r} (needs a sha256 hex and a size)")
        expected[name] = (sha, size)
    missing = [r for r in required if r not in expected]
    if missing:
        raise PersistenceError(
            f"{mfile}: the manifest does not list {', '.join(missing)}, which this engine needs; the directory "
            "is incomplete or the manifest was edited"
        )
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        top = rel.parts[0]
        if any(part.startswith(".") for part in rel.parts) or rel.as_posix() == "manifest.json":
            continue  # hidden files (.DS_Store, our .lock and temporaries) are not engine files
        if top == POINTER_FILE or _VERSION_RE.fullmatch(top):
            continue  # a single-folder engine being switched to versions (never inside a version)
        if f.is_file() and rel.as_posix() not in expected:
            raise PersistenceError(f"{path}: file {rel.as_posix()} is not listed in the manifest (added or corrupt)")
    for rel, (sha, size) in expected.items():
        f = path / rel
        if not f.is_file():
            raise PersistenceError(f"{path}: file {rel} listed in the manifest is missing")
        actual = f.stat().st_size
        if actual != size:
            raise PersistenceError(f"{f}: truncated or changed ({actual} bytes, expected {size})")
        if _sha256(f) != sha:
            raise PersistenceError(f"{f}: checksum mismatch; the file is corrupt or was edited")


def _read_version(
    root: Path, *, embedder: Embedder | None, verify: bool, resources: Mapping[str, Any] | None = None
) -> EngineParts:
    cfg = _os_errors_named(root, read_config, root)
    cfg_file = root / "config.json"
    try:
        config = saved_config(cfg["engine"])  # fields an older save left out keep their old meaning
    except (ValidationError, ValueError, TypeError) as exc:
        if verify:
            _os_errors_named(root, verify_manifest, root)  # a corrupt file is the likelier cause: say so
        raise PersistenceError(f"{cfg_file}: invalid engine config ({exc})") from exc
    if verify:
        _os_errors_named(root, verify_manifest, root, required_files(config))
    try:
        specs = load_tools_jsonl(root / "tools.jsonl")
        edges = load_edges(root / "edges.jsonl") if (root / "edges.jsonl").exists() else []
        catalog = Catalog(specs, edges=edges, seen_tools=cfg.get("seen_tools", []), source=str(root / "tools.jsonl"))
    except CatalogError as exc:
        raise PersistenceError(f"{root}: saved catalog is invalid: {exc}") from exc
    n_apis = cfg.get("n_apis")
    if n_apis is not None and n_apis != len(catalog):
        raise PersistenceError(f"{root}: tools.jsonl holds {len(catalog)} APIs but config.json records {n_apis}")
    first_stage = get_first_stage_type(config.retriever).open(root, config, embedder, resources)
    ids = catalog.ids
    for name, part in first_stage.parts.items():
        if part.ids != ids:
            raise PersistenceError(
                f"{root}: {name} index ids do not match tools.jsonl ({len(part.ids)} indexed, {len(ids)} APIs); "
                "the index was saved for another catalog"
            )
    stage_dirs: list[Path | None] = []
    for i, spec in enumerate(config.stages):
        d = _stage_dir(root, i, spec.label)
        if os.path.lexists(d) and not d.is_dir():
            raise PersistenceError(f"{d}: a stage's saved folder is not a folder")
        stage_dirs.append(d if d.exists() else None)
    return EngineParts(catalog, config, first_stage, stage_dirs, root)


def read_engine(
    path: Path, *, embedder: Embedder | None = None, verify: bool = True, resources: Mapping[str, Any] | None = None
) -> EngineParts:
    """Read and check the committed version's parts (config, manifest, catalog, first stage, stage folders).
    ``resources`` (live objects such as a connection pool) go to a first stage that takes them.

    The version is pinned (:func:`pin_version`) as soon as the pointer names it, so a save committing meanwhile
    leaves it in place; the parts hold the pin until :meth:`EngineParts.release`. Where it could not be pinned (a
    save removed it first, or an older release saved it without a pin) and the read fails, the pointer is re-read
    and the read retried, up to ``_READ_ATTEMPTS`` times.
    """
    path = Path(path)
    for attempt in range(_READ_ATTEMPTS):
        root = _os_errors_named(path, version_dir, path)  # re-reads the pointer itself if a commit races it
        pin = pin_version(root) if root != path else None  # the single-folder layout of earlier releases: none
        try:
            parts = _read_version(root, embedder=embedder, verify=verify, resources=resources)
        except BaseException as exc:
            if pin is not None:
                os.close(pin)
            if (
                isinstance(exc, PersistenceError)
                and attempt + 1 < _READ_ATTEMPTS
                and _os_errors_named(path, version_dir, path) != root
            ):
                continue  # a newer version was committed meanwhile
            raise
        parts.pin = pin
        return parts
    raise AssertionError("unreachable")  # pragma: no cover


def _os_errors_named(path: Path, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, with an OSError (permission denied, a file removed meanwhile) as a PersistenceError."""
    try:
        return fn(*args)
    except OSError as exc:
        raise PersistenceError(f"{path}: cannot read the saved engine ({exc})") from exc
