from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolrerank_plugins import ConfigError, Engine, EngineConfig, PersistenceError, ToolSpec
from toolrerank_plugins._version import FORMAT_VERSION
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

Q = ["weather forecast", "send email to bob", "change my email address"]


def _ids(engine: Engine) -> list[list[str]]:
    return [[r.id for r in rs] for rs in engine.search_batch(Q, 5)]


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Engine, Path]:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=FakeEmbedder())
    engine.catalog.mark_seen(["Auth/Keyring"])
    return engine, engine.save(tmp_path / "eng")


def test_roundtrip_same_results_catalog_edges_seen(saved: tuple[Engine, Path]) -> None:
    engine, path = saved
    emb = FakeEmbedder()
    loaded = Engine.load(path, embedder=emb)
    assert emb.texts_encoded == 0  # nothing re-encoded on load
    assert _ids(loaded) == _ids(engine)
    assert [s.to_dict() for s in loaded.catalog] == [s.to_dict() for s in engine.catalog]
    assert len(loaded.catalog.edges) == 2 and loaded.catalog.seen_tools == {"Auth/Keyring"}
    cfg = json.loads((version_dir(path) / "config.json").read_text())
    assert cfg["format_version"] == FORMAT_VERSION and cfg["library"] == "toolrerank-plugins"
    assert not any(p.suffix in {".pkl", ".pickle"} for p in path.rglob("*"))


def test_roundtrip_after_incremental_updates(tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    engine.add([ToolSpec(id="x/new", name="new", description="book a table at a restaurant")])
    engine.remove(["Maps/GeoFind/geocode"])
    loaded = Engine.load(engine.save(tmp_path / "e"), embedder=FakeEmbedder())
    assert _ids(loaded) == _ids(engine)
    assert loaded.search("book a restaurant table", 1)[0].id == "x/new"


def test_save_refuses_to_clobber_without_overwrite(saved: tuple[Engine, Path]) -> None:
    engine, path = saved
    with pytest.raises(PersistenceError, match="already exists"):
        engine.save(path)
    engine.save(path, overwrite=True)
    assert Engine.load(path, embedder=FakeEmbedder())


def test_corrupt_file_is_detected(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    f = version_dir(path) / "dense" / "faiss.index"
    data = bytearray(f.read_bytes())
    data[100] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(PersistenceError, match="checksum mismatch"):
        Engine.load(path, embedder=FakeEmbedder())


def test_truncated_file_is_detected(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    f = version_dir(path) / "tools.jsonl"
    f.write_bytes(f.read_bytes()[:50])
    with pytest.raises(PersistenceError, match="truncated"):
        Engine.load(path, embedder=FakeEmbedder())


def test_missing_file_is_detected(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    (version_dir(path) / "dense" / "embeddings.npy").unlink()
    with pytest.raises(PersistenceError, match="embeddings.npy listed in the manifest is missing"):
        Engine.load(path, embedder=FakeEmbedder())


def test_newer_format_and_foreign_dirs(saved: tuple[Engine, Path], tmp_path: Path) -> None:
    _, path = saved
    cfg = json.loads((version_dir(path) / "config.json").read_text())
    cfg["format_version"] = FORMAT_VERSION + 1
    (version_dir(path) / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PersistenceError, match=f"format version {FORMAT_VERSION + 1} .* Upgrade"):
        Engine.load(path, embedder=FakeEmbedder())
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"library": "other"}))
    with pytest.raises(PersistenceError, match="foreign directory"):
        Engine.load(foreign)
    with pytest.raises(PersistenceError, match="not an engine directory"):
        Engine.load(tmp_path / "missing")
    (foreign / "config.json").write_text("{broken")
    with pytest.raises(PersistenceError, match="corrupt config.json"):
        Engine.load(foreign)


def test_loading_with_a_different_encoder_is_refused(saved: tuple[Engine, Path]) -> None:
    _, path = saved
    with pytest.raises(ConfigError, match="built with encoder 'fake:128'"):
        Engine.load(path, embedder=FakeEmbedder(dimension=64))


def test_failed_save_leaves_previous_engine_intact(saved: tuple[Engine, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    engine, path = saved
    before = sorted(p.name for p in path.rglob("*"))

    def boom(*a: object, **k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(type(engine.bm25), "save", boom)
    with pytest.raises(OSError, match="disk full"):
        engine.save(path, overwrite=True)
    assert sorted(p.name for p in path.rglob("*")) == before
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".eng.tmp")]
    Engine.load(path, embedder=FakeEmbedder())
