"""Saved engines under corruption and hostile paths: load never raises a raw Python error, never loads silently
different data, and save never destroys what it should not.

Property-based part: a saved engine (hybrid first stage, a TGR stage with its graph, a toolrerank stage with a
query-type classifier) is copied and one file is corrupted (truncated, bytes flipped, deleted, non-UTF-8 bytes,
garbage appended, a JSON value replaced by generated JSON of any type). With the manifest intact, ``Engine.load``
raises a library error or loads an engine whose catalog, config and search results equal the original's. With
the manifest recomputed after the corruption (what ``verify=False`` or a rewritten manifest amounts to), load
and search raise only library errors.

How these fail on the previous code (checked by running them there): an empty manifest switched verification
off (a truncated tools.jsonl loaded and searches returned []); a bm25.json from another catalog loaded;
``format_version`` 0 / -1 / true loaded; ``seen_tools: 5`` raised a raw TypeError and ``"abc"`` loaded as three
tool names; non-UTF-8 config/manifest/stage files raised UnicodeDecodeError; corrupt graph.json and stage.json
raised KeyError/TypeError/AttributeError; ``save(overwrite=True)`` deleted a regular file or a folder of other
files; OS errors while saving came out as bare OSError.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig, PersistenceError, ToolSpec
from toolrerank_plugins import persistence as P
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.persistence import LOCK_FILE, POINTER_FILE, SaveError, version_dir
from toolrerank_plugins.rerank.classifier import QueryTypeClassifier
from toolrerank_plugins.stages import Stage, StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

QUERIES = ["weather forecast", "send email to bob", "change my email address", "geocode an address and mail it"]
DIM = 32


def _embedder() -> FakeEmbedder:
    return FakeEmbedder(DIM)


def _signature(engine: Engine) -> Any:
    return {
        "results": [[(r.id, round(r.score, 6)) for r in engine.search(q, 5)] for q in QUERIES],
        "catalog": [s.to_dict() for s in engine.catalog],
        "edges": engine.catalog.edges,
        "seen": sorted(engine.catalog.seen_tools),
        "config": engine.config.model_dump(mode="json"),
    }


def _full_engine(tmp: Path) -> Engine:
    emb = _embedder()
    clf = QueryTypeClassifier(emb).fit(
        ["weather today", "forecast tomorrow", "mail and weather", "email then map"],
        ["single", "single", "multi", "multi"],
    )
    clf_dir = clf.save(tmp / "clf")
    cfg = EngineConfig(
        retriever="hybrid",
        stages=[
            StageSpec(type="tgr", params={"expansion": {"enabled": True}}),
            StageSpec(
                type="toolrerank",
                params={"classifier_path": str(clf_dir), "classification": "classifier", "m_s": 4, "m_u": 6},
            ),
        ],
    )
    engine = Engine.build(tiny_catalog(), cfg, embedder=emb)
    engine.catalog.mark_seen(["Auth/Keyring"])
    return engine


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[str]]:
    tmp = tmp_path_factory.mktemp("pristine")
    engine = _full_engine(tmp)
    path = engine.save(tmp / "eng")
    sig = _signature(engine)
    assert _signature(Engine.load(path, embedder=_embedder())) == sig
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.name != LOCK_FILE)
    assert POINTER_FILE in files and any(f.endswith("graph.json") for f in files)
    assert any(f.endswith("stage.json") for f in files) and any(f.endswith("classifier.json") for f in files)
    return path, sig, files


# -- generated corruptions ------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
KINDS = ["truncate", "flip", "delete", "non_utf8", "append", "json_value", "json_value", "json_value"]


def _json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:20]):
            out += _json_paths(v, (*prefix, i))
    return out


def _replace_at(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return doc


def _corrupt(file: Path, data: st.DataObject) -> str:
    """Apply one generated corruption to ``file``; returns a description (for failure messages)."""
    raw = file.read_bytes()
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    is_json = file.suffix in (".json", ".jsonl")
    if kind == "json_value" and not is_json:
        kind = "flip"
    if kind == "truncate":
        n = data.draw(st.integers(0, max(0, len(raw) - 1)), label="keep")
        file.write_bytes(raw[:n])
        return f"truncate {file.name} to {n}"
    if kind == "flip":
        if not raw:
            file.write_bytes(b"\x00")
            return f"fill empty {file.name}"
        b = bytearray(raw)
        pos = data.draw(st.integers(0, len(b) - 1), label="pos")
        b[pos] ^= data.draw(st.integers(1, 255), label="mask")
        file.write_bytes(bytes(b))
        return f"flip byte {pos} of {file.name}"
    if kind == "delete":
        file.unlink()
        return f"delete {file.name}"
    if kind == "non_utf8":
        pos = data.draw(st.integers(0, len(raw)), label="pos")
        file.write_bytes(raw[:pos] + b"\xff\xfe\xc3" + raw[pos:])
        return f"non-UTF-8 bytes at {pos} of {file.name}"
    if kind == "append":
        extra = data.draw(st.binary(min_size=1, max_size=16), label="extra")
        file.write_bytes(raw + extra)
        return f"append {extra!r} to {file.name}"
    # json_value: replace one value (or the whole document / one JSONL record) with generated JSON
    new = data.draw(json_values, label="new value")
    if file.suffix == ".jsonl":
        lines = raw.decode("utf-8").splitlines()
        if not lines:
            file.write_text(json.dumps(new) + "\n", encoding="utf-8")
            return f"{file.name}: write {new!r}"
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        doc = json.loads(lines[i])
        where = data.draw(st.sampled_from(_json_paths(doc)), label="where")
        lines[i] = json.dumps(_replace_at(doc, where, new))
        file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return f"{file.name}:{i + 1}: {where} := {new!r}"
    doc = json.loads(raw.decode("utf-8"))
    where = data.draw(st.sampled_from(_json_paths(doc)), label="where")
    file.write_text(json.dumps(_replace_at(doc, where, new)), encoding="utf-8")
    return f"{file.name}: {where} := {new!r}"


def _remanifest(path: Path) -> None:
    """Recompute the committed version's manifest (as if someone rewrote it after editing a file)."""
    try:
        root = version_dir(path)
    except PersistenceError:
        return
    mfile = root / "manifest.json"
    files = {
        p.relative_to(root).as_posix(): {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p != mfile
    }
    mfile.write_text(json.dumps({"files": files}), encoding="utf-8")


def _load_and_search(path: Path) -> Any:
    engine = Engine.load(path, embedder=_embedder())
    return _signature(engine)


@pytest.mark.fuzz
@FUZZ
@given(data=st.data())
def test_corruption_of_any_file_is_refused_or_harmless(pristine: tuple[Path, Any, list[str]], data: Any) -> None:
    src, sig, files = pristine
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "eng"
        shutil.copytree(src, path)
        # One or two files (two: e.g. a manifest that stopped listing a file, and that file truncated).
        rels = data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=2, unique=True), label="files")
        what = [_corrupt(path / rel, data) for rel in rels]
        try:
            loaded = _load_and_search(path)
        except ToolRerankError:
            return  # refused with the library's error (PersistenceError, ConfigError, CatalogError, GraphError)
        assert loaded == sig, f"{what} loaded an engine that differs from the saved one"


@pytest.mark.fuzz
# Without checksums, flipped bits can turn embeddings into huge finite numbers: numpy then warns about overflow.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@FUZZ
@given(data=st.data())
def test_corruption_behind_a_consistent_manifest_is_never_a_raw_error(
    pristine: tuple[Path, Any, list[str]], data: Any
) -> None:
    src, _, files = pristine
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "eng"
        shutil.copytree(src, path)
        rel = data.draw(st.sampled_from([f for f in files if not f.endswith("manifest.json")]), label="file")
        _corrupt(path / rel, data)
        _remanifest(path)
        try:
            _load_and_search(path)
        except ToolRerankError:
            pass


# -- the examples of issue 11, item 5 -------------------------------------------------------------
@pytest.fixture
def saved(tmp_path: Path) -> tuple[Engine, Path]:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=_embedder())
    engine.catalog.mark_seen(["Auth/Keyring"])
    return engine, engine.save(tmp_path / "eng")


def _edit_json(file: Path, edit: Callable[[Any], Any]) -> None:
    file.write_text(json.dumps(edit(json.loads(file.read_text(encoding="utf-8")))), encoding="utf-8")


def _set(key: str, value: Any) -> Callable[[Any], Any]:
    def edit(doc: Any) -> Any:
        doc[key] = value
        return doc

    return edit


@pytest.mark.parametrize("name", ["config.json", "manifest.json"])
def test_non_utf8_config_or_manifest_is_a_persistence_error(saved: tuple[Engine, Path], name: str) -> None:
    _, path = saved
    f = version_dir(path) / name
    f.write_bytes(f.read_bytes().replace(b'"', b'"\xff', 1))
    with pytest.raises(PersistenceError, match=rf"{name}: corrupt .*not UTF-8"):
        Engine.load(path, embedder=_embedder())


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ([], "corrupt manifest"),
        (5, "corrupt manifest"),
        ({}, "corrupt manifest"),
        ("tools.jsonl", "corrupt manifest"),
        ({"tools.jsonl": {"sha256": "0" * 64, "size": True}}, "corrupt manifest entry"),
        ({"../tools.jsonl": {"sha256": "0" * 64, "size": 1}}, "not a plain relative path"),
    ],
)
def test_manifest_files_of_the_wrong_shape_are_refused(saved: tuple[Engine, Path], files: Any, match: str) -> None:
    _, path = saved
    _edit_json(version_dir(path) / "manifest.json", _set("files", files))
    with pytest.raises(PersistenceError, match=match):
        Engine.load(path, embedder=_embedder())


def test_a_manifest_that_omits_files_no_longer_switches_verification_off(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    root = version_dir(path)
    tools = root / "tools.jsonl"
    tools.write_bytes(tools.read_bytes()[:-1].rsplit(b"\n", 3)[0] + b"\n")  # drop the last records
    manifest = json.loads((root / "manifest.json").read_text())
    only_config = {"config.json": manifest["files"]["config.json"]}
    (root / "manifest.json").write_text(json.dumps({"files": only_config}))
    with pytest.raises(PersistenceError, match="does not list tools.jsonl, edges.jsonl, dense/"):
        Engine.load(path, embedder=_embedder())
    # Listing the required files is not enough either: every file present must be listed.
    manifest["files"].pop("bm25/bm25.json")
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PersistenceError, match="does not list bm25/bm25.json"):
        Engine.load(path, embedder=_embedder())


def test_a_stage_file_missing_from_the_manifest_is_detected(tmp_path: Path) -> None:
    engine = Engine.build(
        tiny_catalog(), EngineConfig(retriever="dense", stages=[StageSpec(type="tgr")]), embedder=_embedder()
    )
    root = version_dir(engine.save(tmp_path / "eng"))
    _edit_json(root / "manifest.json", lambda m: {"files": {k: v for k, v in m["files"].items() if "stages" not in k}})
    with pytest.raises(PersistenceError, match="stages/00-tgr/graph.json is not listed in the manifest"):
        Engine.load(tmp_path / "eng", embedder=_embedder())


@pytest.mark.parametrize("retriever", ["bm25", "hybrid"])
def test_a_bm25_index_from_another_catalog_is_refused(tmp_path: Path, retriever: str) -> None:
    cfg = EngineConfig(retriever=retriever)  # type: ignore[arg-type]
    engine = Engine.build(tiny_catalog(), cfg, embedder=_embedder())
    other_cat = tiny_catalog()
    other = Engine.build(
        Catalog([*other_cat, ToolSpec(id="x/y/z", name="z", description="zebra crossing")]), cfg, embedder=_embedder()
    )
    path = engine.save(tmp_path / "eng")
    other_root = version_dir(other.save(tmp_path / "other"))
    shutil.copy(other_root / "bm25" / "bm25.json", version_dir(path) / "bm25" / "bm25.json")
    with pytest.raises(PersistenceError, match="bm25 index ids do not match tools.jsonl"):
        Engine.load(path, embedder=_embedder(), verify=False)
    _remanifest(path)
    with pytest.raises(PersistenceError, match="bm25 index ids do not match tools.jsonl"):
        Engine.load(path, embedder=_embedder())


@pytest.mark.parametrize("value", [0, -1, True, False, "2", 2.0, None])
def test_format_versions_that_are_not_a_positive_integer_are_refused(saved: tuple[Engine, Path], value: Any) -> None:
    _, path = saved
    _edit_json(version_dir(path) / "config.json", _set("format_version", value))
    with pytest.raises(PersistenceError, match="format_version"):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize("value", ["Auth/Keyring", 5, {"Auth/Keyring": 1}, [1], None])
def test_seen_tools_that_are_not_a_list_of_names_are_refused(saved: tuple[Engine, Path], value: Any) -> None:
    _, path = saved
    _edit_json(version_dir(path) / "config.json", _set("seen_tools", value))
    with pytest.raises(PersistenceError, match="'seen_tools' must be a list of tool names"):
        Engine.load(path, embedder=_embedder(), verify=False)


def test_truncated_tools_jsonl_without_verification_is_caught_by_the_api_count(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    tools = version_dir(path) / "tools.jsonl"
    in_edges = {end for e in tiny_catalog().edges for end in (e.source, e.target)}
    kept = [line for line in tools.read_text().splitlines() if json.loads(line)["id"] in in_edges]
    tools.write_text("\n".join(kept) + "\n")
    with pytest.raises(PersistenceError, match=f"tools.jsonl holds {len(kept)} APIs but config.json records 10"):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(10, np.float32),
        np.zeros((10, DIM), np.int64),
        np.full((10, DIM), np.nan, np.float32),
        np.zeros((3, DIM)),
    ],
)
def test_embeddings_of_the_wrong_shape_type_or_value_are_refused(saved: tuple[Engine, Path], array: Any) -> None:
    _, path = saved
    np.save(version_dir(path) / "dense" / "embeddings.npy", array)
    with pytest.raises(PersistenceError, match="embeddings"):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize("name", ["embeddings.npy", "faiss.index"])
@pytest.mark.parametrize("keep", [0, 10, 100, -1])
def test_truncated_binary_files_are_refused_without_verification(
    saved: tuple[Engine, Path], name: str, keep: int
) -> None:
    _, path = saved
    f = version_dir(path) / "dense" / name
    f.write_bytes(f.read_bytes()[:keep])
    with pytest.raises(PersistenceError, match=name):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("ids.json", _set("ids", "abc")),
        ("ids.json", _set("text_keys", [1, 2])),
        ("ids.json", lambda d: [d]),
        ("dense.json", _set("count", "10")),
        ("dense.json", _set("model_id", None)),
    ],
)
def test_corrupt_dense_metadata_is_refused(saved: tuple[Engine, Path], name: str, edit: Any) -> None:
    _, path = saved
    _edit_json(version_dir(path) / "dense" / name, edit)
    with pytest.raises(PersistenceError, match=name):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize(
    "edit", [_set("ids", 5), _set("texts", [1] * 10), _set("ids", ["a"] * 10), lambda d: [d], lambda d: "x"]
)
def test_corrupt_bm25_json_is_refused(saved: tuple[Engine, Path], edit: Any) -> None:
    _, path = saved
    _edit_json(version_dir(path) / "bm25" / "bm25.json", edit)
    with pytest.raises(PersistenceError, match="bm25"):
        Engine.load(path, embedder=_embedder(), verify=False)


def _graph_edits() -> list[Any]:
    def first_link(key: str, value: Any) -> Callable[[Any], Any]:
        def edit(d: Any) -> Any:
            d["graph"]["links"][0][key] = value
            return d

        return edit

    def drop_node(d: Any) -> Any:
        d["graph"]["nodes"].pop()
        return d

    return [
        _set("graph", None),
        _set("graph", {"nodes": 5, "links": []}),
        _set("format", "1"),
        _set("catalog_fingerprint", 5),
        first_link("weight", "heavy"),
        first_link("weight", float("nan")),
        first_link("source", ["x"]),
        first_link("target", "not-a-node"),
        drop_node,
        lambda d: [d],
    ]


@pytest.mark.parametrize("edit", _graph_edits())
def test_corrupt_graph_json_is_a_library_error(
    pristine: tuple[Path, Any, list[str]], tmp_path: Path, edit: Any
) -> None:
    src, _, _ = pristine
    path = tmp_path / "eng"
    shutil.copytree(src, path)
    _edit_json(version_dir(path) / "stages" / "00-tgr" / "graph.json", edit)
    with pytest.raises(ToolRerankError, match="graph.json"):
        Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize(
    ("rel", "content"),
    [
        ("stages/01-toolrerank/stage.json", b"\xff\xfe"),
        ("stages/01-toolrerank/stage.json", b"[1, 2]"),
        ("stages/01-toolrerank/stage.json", b'{"format_version": "1", "has_reranker": false, "has_classifier": true}'),
        ("stages/01-toolrerank/stage.json", b'{"format_version": 0, "has_reranker": false, "has_classifier": true}'),
        ("stages/01-toolrerank/stage.json", b'{"format_version": 1, "has_reranker": 1, "has_classifier": true}'),
        ("stages/01-toolrerank/stage.json", b'{"format_version": 1, "has_reranker": true, "has_classifier": true}'),
        ("stages/01-toolrerank/classifier/classifier.json", b'{"format_version": 1, "weights": [1], "bias": "x"}'),
        ("stages/00-tgr/graph.json", b"\xff"),
    ],
)
def test_corrupt_stage_files_are_library_errors(
    pristine: tuple[Path, Any, list[str]], tmp_path: Path, rel: str, content: bytes
) -> None:
    src, _, _ = pristine
    path = tmp_path / "eng"
    shutil.copytree(src, path)
    (version_dir(path) / rel).write_bytes(content)
    with pytest.raises(ToolRerankError, match=Path(rel).parts[1]):  # names the stage's folder
        Engine.load(path, embedder=_embedder(), verify=False)


def test_classifier_threshold_and_info_of_the_wrong_type_are_refused(
    pristine: tuple[Path, Any, list[str]], tmp_path: Path
) -> None:
    src, _, _ = pristine
    for key, value in [("threshold", "high"), ("threshold", [1]), ("info", 5), ("weights", [[1.0]])]:
        path = tmp_path / f"eng-{key}-{type(value).__name__}"
        shutil.copytree(src, path)
        _edit_json(version_dir(path) / "stages" / "01-toolrerank" / "classifier" / "classifier.json", _set(key, value))
        with pytest.raises(PersistenceError, match="classifier.json: corrupt classifier file"):
            Engine.load(path, embedder=_embedder(), verify=False)


@pytest.mark.parametrize(
    "content",
    [
        b"\xff",
        b"[]",
        b'{"library": "other", "current": "v-000001"}',
        b'{"library": "toolrerank-plugins", "current": "../../etc"}',
        b'{"library": "toolrerank-plugins", "current": "v-000009"}',
        b'{"library": "toolrerank-plugins", "current": 1}',
    ],
)
def test_a_corrupt_version_pointer_is_a_persistence_error(saved: tuple[Engine, Path], content: bytes) -> None:
    engine, path = saved
    (path / POINTER_FILE).write_bytes(content)
    with pytest.raises(PersistenceError, match=POINTER_FILE):
        Engine.load(path, embedder=_embedder())
    with pytest.raises(PersistenceError, match="refusing to replace a damaged engine directory"):
        engine.save(path, overwrite=True)


# -- layouts, temporaries, concurrency ------------------------------------------------------------
def test_the_single_folder_layout_still_loads_and_is_switched_by_the_next_save(
    saved: tuple[Engine, Path], tmp_path: Path
) -> None:
    engine, path = saved
    legacy = tmp_path / "legacy"
    shutil.copytree(version_dir(path), legacy)  # config.json at the root: how earlier releases saved
    assert version_dir(legacy) == legacy
    assert _signature(Engine.load(legacy, embedder=_embedder())) == _signature(engine)
    (legacy / "notes.txt").write_text("kept")  # not an engine file: left alone
    engine.save(legacy, overwrite=True)
    assert sorted(p.name for p in legacy.iterdir()) == [LOCK_FILE, POINTER_FILE, "notes.txt", "v-000001"]
    assert _signature(Engine.load(legacy, embedder=_embedder())) == _signature(engine)


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_stale_temporaries_of_dead_writers_are_removed_live_ones_kept(saved: tuple[Engine, Path]) -> None:
    engine, path = saved
    dead = _dead_pid()
    inside = path / f".tmp-{dead}-abc123"
    uncommitted = path / "v-000007"
    beside_dead = path.parent / f".eng.tmp-{dead}-abc123"
    beside_live = path.parent / f".eng.tmp-{os.getpid()}-def456"
    old_backup = path.parent / f".eng.old-{dead}"
    for d in (inside, uncommitted, beside_dead, beside_live, old_backup):
        d.mkdir()
        (d / "x").write_text("x")
    (beside_dead / LOCK_FILE).touch()
    fd = os.open(beside_live / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer that is still running
    try:
        engine.save(path, overwrite=True)
    finally:
        os.close(fd)
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000002"]
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".eng.")) == [beside_live.name]


def test_load_points_at_the_backup_an_interrupted_older_save_left(tmp_path: Path) -> None:
    (tmp_path / ".eng.old-123").mkdir()
    with pytest.raises(PersistenceError, match=r"\.eng\.old-123: it may hold the engine"):
        Engine.load(tmp_path / "eng")


def test_concurrent_saves_are_serialised_by_the_writer_lock(saved: tuple[Engine, Path]) -> None:
    engine, path = saved
    fd = os.open(path / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another writer holds the engine directory
    done: list[float] = []
    t = threading.Thread(target=lambda: (engine.save(path, overwrite=True), done.append(time.monotonic())))
    t.start()
    time.sleep(0.3)
    assert not done  # waiting for the lock
    released = time.monotonic()
    os.close(fd)
    t.join(10)
    assert done and done[0] >= released
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000002"]


def _race_a_save_into_the_load(path: Path, other: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Make the next load's first config read wait for ``other`` to be saved (committed) at ``path``."""
    real = P.read_config
    calls: list[Path] = []

    def racing_read_config(root: Path) -> dict[str, Any]:
        if not calls:  # a save commits a new version just as the load starts
            other.save(path, overwrite=True)
        calls.append(root)
        return real(root)

    monkeypatch.setattr(P, "read_config", racing_read_config)
    return calls


def test_a_load_racing_a_save_reads_the_version_it_pinned(
    saved: tuple[Engine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, path = saved
    other = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid", depth=7), embedder=_embedder())
    assert engine.config.depth != 7
    calls = _race_a_save_into_the_load(path, other, monkeypatch)
    loaded = Engine.load(path, embedder=_embedder())
    # the version committed when the load began, whole: the save left it in place while the load held its pin
    assert _signature(loaded) == _signature(engine) and [c.name for c in calls] == ["v-000001"]
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000001", "v-000002"]
    monkeypatch.undo()
    assert Engine.load(path, embedder=_embedder()).config.depth == 7
    other.save(path, overwrite=True)  # nobody reads v-000001 now: the next save removes it
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000003"]


def test_a_load_racing_a_save_of_a_version_without_a_pin_rereads_the_pointer(
    saved: tuple[Engine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, path = saved
    (path / "v-000001" / P.PIN_FILE).unlink()  # as an older release saved it
    other = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid", depth=7), embedder=_embedder())
    calls = _race_a_save_into_the_load(path, other, monkeypatch)
    loaded = Engine.load(path, embedder=_embedder())
    assert loaded.config.depth == 7 and [c.name for c in calls] == ["v-000001", "v-000002"]
    assert not (path / "v-000001").exists()


def test_a_version_is_pinned_only_while_it_is_read(saved: tuple[Engine, Path]) -> None:
    engine, path = saved
    version = P.version_dir(path)
    pins = [P.pin_version(version), P.pin_version(version)]  # shared: two readers pin it at once
    assert None not in pins
    try:
        engine.save(path, overwrite=True)
        assert version.is_dir()  # pinned: kept
        os.close(pins.pop())
        engine.save(path, overwrite=True)
        assert version.is_dir()  # still pinned by the other reader
    finally:
        for pin in pins:
            os.close(pin)  # type: ignore[arg-type]
    engine.save(path, overwrite=True)
    assert not version.exists() and P.pin_version(version) is None  # unpinned: removed; gone: nothing to pin


# -- what save refuses, and OS errors --------------------------------------------------------------
def test_overwrite_refuses_a_regular_file(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    engine, _ = saved
    f = tmp_path / "precious.txt"
    f.write_text("keep me")
    with pytest.raises(PersistenceError, match=r"precious.txt is a regular file, not a saved engine; refusing"):
        engine.save(f, overwrite=True)
    assert f.read_text() == "keep me"


def test_overwrite_refuses_a_folder_of_other_files(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    engine, _ = saved
    d = tmp_path / "project"
    (d / "src").mkdir(parents=True)
    (d / "README.md").write_text("keep me")
    with pytest.raises(PersistenceError, match=r"project is a folder of other files \(README.md, src\)"):
        engine.save(d, overwrite=True)
    assert (d / "README.md").read_text() == "keep me" and (d / "src").is_dir()
    (d / "config.json").write_text(json.dumps({"library": "someone-else"}))
    with pytest.raises(PersistenceError, match="config.json that was not written by toolrerank-plugins"):
        engine.save(d, overwrite=True)


def test_overwrite_fills_an_empty_folder(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    engine, _ = saved
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(PersistenceError, match="already exists"):
        engine.save(d)
    engine.save(d, overwrite=True)
    assert _signature(Engine.load(d, embedder=_embedder())) == _signature(engine)


def test_a_parent_that_is_a_file_is_a_save_error(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    engine, _ = saved
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "eng"
    with pytest.raises(SaveError, match=r"afile/eng: cannot save the engine") as info:
        engine.save(target)
    assert isinstance(info.value, PersistenceError) and isinstance(info.value, OSError)


def test_a_read_only_parent_is_a_save_error(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    engine, path = saved
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write to a read-only folder (root)")
        with pytest.raises(SaveError, match=r"ro/eng: cannot save the engine"):
            engine.save(ro / "eng")
        path.chmod(0o555)  # an engine directory that cannot be written to: the previous save stays
        with pytest.raises(SaveError, match="cannot save the engine"):
            engine.save(path, overwrite=True)
        Engine.load(path, embedder=_embedder())
    finally:
        ro.chmod(0o755)
        path.chmod(0o755)


def _enospc(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("target", "attr"),
    [(os, "replace"), (os, "rename"), (os, "fsync"), (os, "write"), (np, "save")],
)
def test_disk_full_is_a_save_error_and_keeps_the_previous_save(
    saved: tuple[Engine, Path], monkeypatch: pytest.MonkeyPatch, target: Any, attr: str
) -> None:
    engine, path = saved
    before = _signature(Engine.load(path, embedder=_embedder()))
    other = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid", depth=7), embedder=_embedder())
    monkeypatch.setattr(target, attr, _enospc)
    with pytest.raises(SaveError, match=r"eng: cannot save the engine: .*No space left") as info:
        other.save(path, overwrite=True)
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(SaveError, match="No space left"):
        other.save(path.parent / "fresh")
    monkeypatch.undo()
    assert _signature(Engine.load(path, embedder=_embedder())) == before
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000001"]
    assert not (path.parent / "fresh").exists()
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


# -- a save that would not load back is refused before anything is written (fuzz findings 1, 4, 6, 7) --
class _LooseParams(BaseModel):
    """A third-party stage's config model that is not the library's (NaN, infinity and any text allowed)."""

    w: Any = 1.0


class _NoOpStage(Stage):
    name = "loose"

    def run(self, query: str, candidates: list, ctx: Any, trace: dict) -> list:
        return candidates


register_stage_type("test_loose", StageType(_LooseParams, lambda cfg, ctx, path: _NoOpStage()), replace=True)

_UNLOADABLE = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan]),
    st.tuples(st.text(max_size=3), st.sampled_from(["\ud800", "\udfff", "\udc80"])).map("".join),
    st.sampled_from([2**1100, 10**5000]).map(lambda v: v),
)


def _assert_unchanged(path: Path, before: Any) -> None:
    assert _signature(Engine.load(path, embedder=_embedder())) == before
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, POINTER_FILE, "v-000001"]


@pytest.mark.fuzz
@FUZZ
@given(value=_UNLOADABLE, where=st.sampled_from(["params", "nested params"]))
def test_generated_configs_that_would_not_load_back_are_refused_and_keep_the_previous_save(
    value: Any, where: str
) -> None:
    # An infinite parameter used to save as null; save(overwrite=True) then replaced a good save with one that
    # would not load. The configs reach save without validation (changed in place after the engine was built).
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eng"
        good = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        good.save(path)
        before = _signature(Engine.load(path, embedder=_embedder()))
        bad = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "test_loose"}]))
        bad.config.stages[0].params["w"] = value if where == "params" else {"x": [value]}
        with pytest.raises(PersistenceError, match="its config would not load back"):
            bad.save(path, overwrite=True)
        _assert_unchanged(path, before)
        with pytest.raises(PersistenceError, match="its config would not load back"):
            bad.save(Path(tmp) / "fresh")
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["eng"]


def test_config_fields_changed_without_validation_are_checked_on_save(saved: tuple[Engine, Path]) -> None:
    # probe7: render.separator "\ud800" made save raise a raw UnicodeEncodeError (bm25.py, writing the texts)
    from toolrerank_plugins.render import RenderConfig

    engine, path = saved
    before = _signature(Engine.load(path, embedder=_embedder()))
    for change in (
        lambda c: setattr(c, "render", RenderConfig.model_construct(**{**c.render.__dict__, "separator": "\ud800"})),
        lambda c: setattr(c, "depth", 10**5000),
        lambda c: setattr(c.stages[0], "params", {"whole_weight": math.inf}) if c.stages else None,
    ):
        bad = Engine.build(
            tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "multi_intent"}]), embedder=_embedder()
        )
        change(bad.config)
        with pytest.raises(PersistenceError, match="would not load back"):
            bad.save(path, overwrite=True)
        _assert_unchanged(path, before)


class _SurrogateSavingStage(Stage):
    """A stage whose own files cannot be encoded (a surrogate that slipped past every check)."""

    name = "bad_saver"

    def run(self, query: str, candidates: list, ctx: Any, trace: dict) -> list:
        return candidates

    def save(self, path: Path) -> None:
        (path / "x.txt").write_text("\ud800", encoding="utf-8")


def test_an_encoding_error_while_saving_is_a_persistence_error_and_keeps_the_previous_save(
    saved: tuple[Engine, Path],
) -> None:
    engine, path = saved
    before = _signature(Engine.load(path, embedder=_embedder()))
    bad = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    bad.set_stages([_SurrogateSavingStage()])
    with pytest.raises(PersistenceError, match="cannot save the engine: 'utf-8' codec"):
        bad.save(path, overwrite=True)
    _assert_unchanged(path, before)
    with pytest.raises(PersistenceError, match="cannot save the engine"):
        bad.save(path.parent / "fresh")
    assert not (path.parent / "fresh").exists()
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("name", ["a\x00b", "eng/\x00"])
def test_a_path_with_a_nul_byte_is_a_persistence_error(saved: tuple[Engine, Path], name: str) -> None:
    engine, path = saved
    with pytest.raises(PersistenceError, match="NUL byte"):
        engine.save(path.parent / name)
    with pytest.raises(PersistenceError):
        Engine.load(path.parent / name)


@pytest.mark.parametrize("name", ["config.json", "manifest.json", POINTER_FILE])
def test_json_integers_past_pythons_digit_limit_are_a_persistence_error(saved: tuple[Engine, Path], name: str) -> None:
    # json.loads raises a bare ValueError for an integer over 4,300 digits
    _, path = saved
    f = path / name if name == POINTER_FILE else version_dir(path) / name
    text = f.read_text(encoding="utf-8")
    f.write_text('{"zz_big": 1' + "0" * 5000 + ", " + text.lstrip()[1:], encoding="utf-8")
    with pytest.raises(PersistenceError, match="not valid JSON"):
        Engine.load(path, embedder=_embedder())
