"""Saving and loading engines as a directory of non-pickle files, written atomically.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins._version import FORMAT_VERSION, __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError, PersistenceError
from toolrerank_plugins.loaders.jsonl import load_edges, load_tools_jsonl, write_tools_jsonl

if TYPE_CHECKING:
    from toolrerank_plugins.encoders import Embedder
    from toolrerank_plugins.engine import Engine

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


def save_engine(engine: Engine, path: Path, *, overwrite: bool = False) -> Path:
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
        write_tools_jsonl(engine.catalog, tmp / "tools.jsonl")
        with (tmp / "edges.jsonl").open("w", encoding="utf-8") as fh:
            for e in engine.catalog.edges:
                fh.write(
                    json.dumps(
                        {
                            "source": e.source,
                            "target": e.target,
                            "type": e.type,
                            "origin": e.origin,
                            "weight": e.weight,
                        }
                    )
                    + "\n"
                )
        if engine.dense is not None:
            engine.dense.save(tmp / "dense")
        if engine.bm25 is not None:
            engine.bm25.save(tmp / "bm25")
        for i, stage in enumerate(engine.stages):
            saver = getattr(stage, "save", None)
            if saver is not None:
                d = _stage_dir(tmp, i, stage.name)
                d.mkdir(parents=True, exist_ok=True)
                saver(d)
        config = {
            "library": LIBRARY,
            "library_version": __version__,
            "format_version": FORMAT_VERSION,
            "engine": engine.config.model_dump(mode="json"),
            "seen_tools": sorted(engine.catalog.seen_tools),
            "n_apis": len(engine.catalog),
        }
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
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


def load_engine(path: Path, *, embedder: Embedder | None = None, verify: bool = True) -> Engine:
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever
    from toolrerank_plugins.retrieval.dense import DenseRetriever
    from toolrerank_plugins.stages import build_stage

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
    engine = Engine(catalog, config, embedder=embedder)
    if config.retriever in ("dense", "hybrid"):
        engine.dense = DenseRetriever.load(path / "dense", config.dense, embedder=embedder)
        if engine.dense.ids != catalog.ids:
            raise PersistenceError(f"{path}: dense index ids do not match tools.jsonl")
    if config.retriever in ("bm25", "hybrid"):
        engine.bm25 = BM25Retriever.load(path / "bm25", config.bm25)
    engine.stages = []
    for i, spec in enumerate(config.stages):
        d = _stage_dir(path, i, spec.label)
        engine.stages.append(build_stage(spec, engine, d if d.exists() else None))
    engine._notify_index()
    return engine
