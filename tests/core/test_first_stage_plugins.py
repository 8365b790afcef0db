"""First stages as plug-ins (issue 27, "the shape"): a backend's own config section, hybrid over any named parts,
the engine asking the first stage for its encoder, live resources passed to build/load and never saved, the
begin/commit/rollback change contract, and plug-ins found through entry points in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.retrieval.base import known_first_stages, register_first_stage
from toolrerank_plugins.stages import Stage, StageContext, StageType, register_stage_type
from toolrerank_plugins.testing import (
    STORE_WORDS_TYPE,
    FakeEmbedder,
    SharedWordStore,
    WordsConfig,
    tiny_catalog,
    words_first_stage_type,
)

register_first_stage("words", words_first_stage_type("words"), replace=True)
register_first_stage("store_words", STORE_WORDS_TYPE, replace=True)


def test_a_backend_declares_its_own_config_section(tmp_path: Path) -> None:
    cfg = EngineConfig(retriever="words", words={"min_length": 4}, stages=[])
    assert cfg.section("words") == WordsConfig(min_length=4) and cfg.section("dense") is cfg.dense
    assert EngineConfig(retriever="words").section("words") == WordsConfig()  # none named: the model's defaults
    with pytest.raises(ValidationError, match="min_length"):
        EngineConfig(retriever="words", words={"min_length": 0})
    with pytest.raises(ValidationError, match="extra field 'wrods' not permitted"):
        EngineConfig(retriever="words", wrods={"min_length": 2})  # a typo is still an error
    with pytest.raises(ConfigError, match="has no config section"):
        cfg.section("nope")
    engine = Engine.build(tiny_catalog(), cfg)
    # min_length 4 drops "an": the section reached the backend
    assert engine.first_stage.config.min_length == 4  # type: ignore[attr-defined]
    path = engine.save(tmp_path / "e")
    saved = json.loads((version_dir(path) / "config.json").read_text())["engine"]
    assert saved["words"] == {"min_length": 4}
    back = Engine.load(path)
    assert back.config == cfg
    assert [r.id for r in back.search("send the email", 3)] == [r.id for r in engine.search("send the email", 3)]


def test_hybrid_fuses_any_named_parts(tmp_path: Path) -> None:
    cfg = pipeline_config("hybrid", hybrid={"parts": ["dense", "words"], "weights": {"words": 2.0}})
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    assert set(engine.first_stage.parts) == {"dense", "words"}
    hit = engine.search("send an email message", top_k=3)[0]
    assert set(hit.stage_scores) == {"dense", "words", "hybrid"}
    assert engine.embedder is engine.first_stage.parts["dense"].encoder  # the engine asks the first stage
    back = Engine.load(engine.save(tmp_path / "e"), embedder=FakeEmbedder())
    assert [r.id for r in back.search("send an email message", 5)] == [
        r.id for r in engine.search("send an email message", 5)
    ]
    # only lexical parts: no encoder in the first stage, stages needing one get the configured default
    lexical = Engine.build(tiny_catalog(), pipeline_config("hybrid", hybrid={"parts": ["bm25", "words"]}))
    assert lexical.first_stage.encoder is None and not lexical.first_stage.has_embeddings
    assert lexical.search("send an email message", top_k=1)[0].tool.name == "send_email"
    with pytest.raises(ValidationError, match="two or more different"):
        HybridOnly = {"parts": ["dense"]}  # noqa: N806
        pipeline_config("hybrid", hybrid=HybridOnly)


def test_live_resources_reach_the_backend_and_are_never_saved(tmp_path: Path) -> None:
    store = SharedWordStore()
    cfg = EngineConfig(retriever="store_words", stages=[])
    with pytest.raises(ConfigError, match=r"needs resources=\{'store'"):
        Engine.build(tiny_catalog(), cfg)
    engine = Engine.build(tiny_catalog(), cfg, resources={"store": store})
    assert len(store.rows) == len(tiny_catalog())
    path = engine.save(tmp_path / "e")
    assert "SharedWordStore" not in (version_dir(path) / "config.json").read_text()
    other = Engine.load(path, resources={"store": store})  # a second worker on the same store
    assert other.first_stage.store is store  # type: ignore[attr-defined]
    assert [r.id for r in other.search("send an email", 3)] == [r.id for r in engine.search("send an email", 3)]


class _FailOnIndex(Stage):
    """Fails ``on_index`` while ``fail`` is set (to make a change fail after the first stage changed)."""

    fail = False

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, object]
    ) -> list[ScoredTool]:
        return candidates

    def on_index(self, ctx: StageContext) -> None:
        if _FailOnIndex.fail:
            raise RuntimeError("stage failed on the new index")


register_stage_type(
    "test_fail_on_index_toggle", StageType(WordsConfig, lambda cfg, ctx, path: _FailOnIndex()), replace=True
)


def test_changes_go_through_begin_commit_rollback() -> None:
    store = SharedWordStore()
    cfg = EngineConfig(retriever="store_words", stages=[{"type": "test_fail_on_index_toggle"}])
    engine = Engine.build(tiny_catalog(), cfg, resources={"store": store})
    assert store.log == ["begin", "commit"]  # the build indexes inside a transaction too
    store.log.clear()
    pizza = ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")
    engine.add([pizza])
    assert store.log == ["begin", "commit"] and "Food/Pizza/order" in store.rows
    assert engine.search("order a pizza", 1)[0].id == "Food/Pizza/order"

    _FailOnIndex.fail = True
    try:
        with pytest.raises(RuntimeError, match="stage failed"):
            engine.remove(["Food/Pizza/order"])
    finally:
        _FailOnIndex.fail = False
    assert store.log[-2:] == ["begin", "rollback"] and "Food/Pizza/order" in store.rows  # nothing committed
    assert "Food/Pizza/order" in engine.catalog.ids

    store.fail_commit = True
    with pytest.raises(ConnectionError):
        engine.update([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a calzone")])
    assert store.log[-2:] == ["begin", "rollback"] and store.rows["Food/Pizza/order"].endswith("order a pizza")
    assert engine.catalog["Food/Pizza/order"].description == "order a pizza"  # the engine is unchanged too

    report = engine.sync([*engine.catalog])
    assert not report.changed and store.log[-1] == "rollback"  # nothing to change: no transaction begun


def test_in_memory_backends_keep_copy_and_swap() -> None:
    engine = Engine.build(tiny_catalog(), pipeline_config("bm25"))
    before = engine.first_stage
    engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")])
    assert engine.first_stage is not before and "Food/Pizza/order" not in before.ids  # the old one is untouched


def _plugin_package(root: Path) -> Path:
    """An installed distribution (a dist-info on the path) whose entry point adds the 'ep_words' first stage."""
    root.mkdir()
    (root / "toolrerank_ep_plugin.py").write_text(
        "from toolrerank_plugins.testing.first_stages import words_first_stage_type\n"
        "FIRST_STAGE_TYPE = words_first_stage_type('ep_words')\n"
    )
    info = root / "toolrerank_ep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toolrerank-ep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[toolrerank_plugins.first_stages]\nep_words = toolrerank_ep_plugin:FIRST_STAGE_TYPE\n"
    )
    return root


def test_a_saved_engine_names_a_plugin_that_loads_in_a_fresh_process(tmp_path: Path) -> None:
    site = _plugin_package(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    build = textwrap.dedent(
        f"""
        from toolrerank_plugins import Engine, EngineConfig
        from toolrerank_plugins.testing import tiny_catalog
        cfg = EngineConfig(retriever="ep_words", ep_words={{"min_length": 3}}, stages=[])
        Engine.build(tiny_catalog(), cfg).save({str(tmp_path / "engine")!r})
        """
    )
    load = textwrap.dedent(
        f"""
        import sys
        from toolrerank_plugins import Engine
        engine = Engine.load({str(tmp_path / "engine")!r})
        assert "toolrerank_ep_plugin" in sys.modules  # imported by the load, through its entry point
        print(engine.config.section("ep_words").min_length, engine.search("send an email", 1)[0].tool.name)
        """
    )
    for code in (build, load):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["3", "send_email"]
    # without the distribution installed the saved engine names a backend nobody provides: a clear error
    proc = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "unknown retriever 'ep_words'" in proc.stderr


def test_entry_points_are_listed_without_being_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _plugin_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    assert "ep_words" in known_first_stages() and "toolrerank_ep_plugin" not in sys.modules


def test_an_engine_follows_what_another_engine_committed_to_the_store() -> None:
    store = SharedWordStore()
    cfg = EngineConfig(retriever="store_words", stages=[])
    writer = Engine.build(tiny_catalog(), cfg, resources={"store": store})
    # a worker that starts later: the catalog and the store as the writer left them, nothing indexed again
    reader = Engine.from_parts(writer.catalog.copy(), cfg, STORE_WORDS_TYPE.make(cfg, None, {"store": store}))
    reader.first_stage.version = store.version  # type: ignore[attr-defined]
    pizza = ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")
    writer.add([pizza])
    writer.remove(["Weather/SkyCast/forecast"])
    # the reader polls before its search (poll_interval 0): the two commits arrive as one change
    assert reader.search("order a pizza", 1)[0].id == "Food/Pizza/order"
    assert "Food/Pizza/order" in reader.catalog and "Weather/SkyCast/forecast" not in reader.catalog
    assert not reader.refresh()  # nothing new
    # a change made on an older snapshot is stale: the engine follows the store, then applies it again
    writer.add([ToolSpec(id="Food/Pizza/track", name="track_pizza", description="track my pizza order")])
    store.log.clear()
    reader.update([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza or a calzone")])
    assert store.log == ["begin", "stale", "begin", "commit"]
    assert "Food/Pizza/track" in reader.catalog and store.specs["Food/Pizza/order"].description.endswith("calzone")
    assert writer.search("calzone", 1)[0].id == "Food/Pizza/order"
