"""Saving and loading engines as a directory of non-pickle files, written atomically.

This module reads and writes an engine's *parts* (:class:`EngineParts`); it does not know the
:class:`~toolrerank_plugins.engine.Engine` class, which saves itself through :func:`write_engine` and
assembles itself from :func:`read_engine` (``Engine.from_parts``).

Layout::

    engine_dir/
      config.json     library name + version, format version, EngineConfig, seen tools
      manifest.json   sha256 and size of every other file (verified on load)
      tools.jsonl     the catalog          edges.jsonl   its dependencies
      dense/          faiss.index, embeddings.npy (the embeddings cache), ids.json, dense.json
      bm25/           bm25.json (ids + texts; re-indexed on load)
      stages/NN-name/ each stage's own files (models as save_pretrained folders, graphs as JSON)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins._version import FORMAT_VERSION, __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.errors import CatalogError, PersistenceError
from toolrerank_plugins.loaders.jsonl import load_edges, load_tools_jsonl, write_edges, write_tools_jsonl
from toolrerank_plugins.retrieval.base import FirstStage, get_first_stage_type
from toolrerank_plugins.stages import Stage

if TYPE_CHECKING:
    from toolrerank_plugins.encoders import Embedder

LIBRARY = "toolrerank-plugins"


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

    ``stage_dirs[i]`` is stage ``i``'s folder when it saved files, else None.
    """

    catalog: Catalog
    config: EngineConfig
    first_stage: FirstStage
    stage_dirs: list[Path | None]


def write_engine(
    path: Path,
    *,
    catalog: Catalog,
    config: EngineConfig,
    first_stage: FirstStage,
    stages: Sequence[Stage],
    overwrite: bool = False,
) -> Path:
    """Write an engine's parts to ``path`` atomically (a temporary sibling folder renamed into place)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise PersistenceError(f"{path} already exists; pass overwrite=True to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    # mkdtemp creates 0700; a saved engine gets the permissions of any directory the user creates.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    try:
        write_tools_jsonl(catalog, tmp / "tools.jsonl")
        write_edges(catalog.edges, tmp / "edges.jsonl")
        first_stage.save(tmp)
        for i, stage in enumerate(stages):
            d = _stage_dir(tmp, i, stage.name)
            d.mkdir(parents=True, exist_ok=True)
            stage.save(d)
            if not any(d.iterdir()):  # a stage with nothing to save loads with path=None
                d.rmdir()
        meta = {
            "library": LIBRARY,
            "library_version": __version__,
            "format_version": FORMAT_VERSION,
            "engine": config.model_dump(mode="json"),
            "seen_tools": sorted(catalog.seen_tools),
            "n_apis": len(catalog),
        }
        (tmp / "config.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        files = {
            str(p.relative_to(tmp)): {"sha256": _sha256(p), "size": p.stat().st_size}
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        (tmp / "manifest.json").write_text(json.dumps({"files": files}, indent=1), encoding="utf-8")
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_config(path: Path) -> dict[str, Any]:
    """Read and check ``config.json`` of a saved engine (library, format version)."""
    if not path.is_dir():
        raise PersistenceError(f"{path}: not an engine directory (does not exist or is not a folder)")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise PersistenceError(f"{path}: no config.json; not a saved toolrerank-plugins engine")
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PersistenceError(f"{cfg_file}: corrupt config.json ({exc})") from exc
    if not isinstance(cfg, dict) or cfg.get("library") != LIBRARY:
        raise PersistenceError(f"{path}: config.json was not written by {LIBRARY} (foreign directory)")
    fv = cfg.get("format_version")
    if not isinstance(fv, int):
        raise PersistenceError(f"{cfg_file}: missing format_version")
    if fv > FORMAT_VERSION:
        raise PersistenceError(
            f"{path}: saved with format version {fv} by {LIBRARY} {cfg.get('library_version')}; this is "
            f"{__version__} (format {FORMAT_VERSION}). Upgrade toolrerank-plugins to load it."
        )
    return cfg


def verify_manifest(path: Path) -> None:
    mfile = path / "manifest.json"
    try:
        manifest = json.loads(mfile.read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise PersistenceError(f"{mfile}: missing or corrupt manifest ({exc})") from exc
    for rel, meta in files.items():
        f = path / rel
        if not f.is_file():
            raise PersistenceError(f"{path}: file {rel} listed in the manifest is missing")
        if f.stat().st_size != meta["size"]:
            raise PersistenceError(f"{f}: truncated or changed ({f.stat().st_size} bytes, expected {meta['size']})")
        if _sha256(f) != meta["sha256"]:
            raise PersistenceError(f"{f}: checksum mismatch; the file is corrupt or was edited")


def read_engine(path: Path, *, embedder: Embedder | None = None, verify: bool = True) -> EngineParts:
    """Read and check an engine directory's parts (config, manifest, catalog, first stage, stage folders)."""
    path = Path(path)
    cfg = read_config(path)
    if verify:
        verify_manifest(path)
    try:
        config = EngineConfig.model_validate(cfg["engine"])
    except Exception as exc:
        raise PersistenceError(f"{path}/config.json: invalid engine config ({exc})") from exc
    try:
        specs = load_tools_jsonl(path / "tools.jsonl")
        edges = load_edges(path / "edges.jsonl") if (path / "edges.jsonl").exists() else []
        catalog = Catalog(specs, edges=edges, seen_tools=cfg.get("seen_tools") or [], source=str(path / "tools.jsonl"))
    except CatalogError as exc:
        raise PersistenceError(f"{path}: saved catalog is invalid: {exc}") from exc
    first_stage = get_first_stage_type(config.retriever).load(path, config, embedder)
    if first_stage.has_embeddings and first_stage.ids != catalog.ids:
        raise PersistenceError(f"{path}: dense index ids do not match tools.jsonl")
    stage_dirs: list[Path | None] = []
    for i, spec in enumerate(config.stages):
        d = _stage_dir(path, i, spec.label)
        stage_dirs.append(d if d.exists() else None)
    return EngineParts(catalog, config, first_stage, stage_dirs)
