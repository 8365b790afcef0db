"""Pipeline presets are plain data usable from Python, and the CLI lists them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolrerank_plugins.pipelines import known_pipelines, pipeline_config

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "default",
    "default-fast",
    "default-onnx",
    "default-static",
    "default-word-map",
    "dense",
    "bm25",
    "hybrid",
    "dense-hnsw",
    "hybrid+tgr",
    "bm25-hierarchy",
    "dense-hierarchy",
    "hybrid-hierarchy",
    "dense+querygen",
    "bm25+querygen",
    "dense+qta",
    "bm25+qta",
    "dense+feedback",
    "bm25+feedback",
}


def test_every_preset_resolves_in_a_fresh_interpreter_without_the_cli() -> None:
    code = (
        "import json, sys\n"
        "from toolrerank_plugins.pipelines import known_pipelines, pipeline_config\n"
        "configs = {n: pipeline_config(n).model_dump(mode='json') for n in known_pipelines()}\n"
        "cli = sorted(m for m in sys.modules if m.startswith('toolrerank_plugins.cli'))\n"
        "print(json.dumps({'cli': cli, 'configs': configs}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    data = json.loads(proc.stdout)
    assert data["cli"] == []
    configs = data["configs"]
    assert set(configs) == EXPECTED
    word_map = {k: v for k, v in configs["default-word-map"].items() if k != "dense"}
    assert word_map == {k: v for k, v in configs["default"].items() if k != "dense"}  # the default but its requests
    assert configs["default-word-map"]["dense"]["part_vectors"] == "word-map"
    assert configs["default"]["dense"]["part_vectors"] == "encoder"
    for retriever in ("bm25", "dense", "hybrid"):
        cfg = configs[f"{retriever}-hierarchy"]
        assert cfg["retriever"] == retriever and cfg["depth"] == 50
        assert [(s["type"], s["params"]) for s in cfg["stages"]] == [
            ("toolrerank", {"classification": "single", "m_s": 30, "m_u": 30})
        ]
    llm_stages = {"querygen": "query_generation", "qta": "qta_rewrite", "feedback": "iterative_feedback"}
    for retriever in ("bm25", "dense"):
        for suffix, stage in llm_stages.items():
            cfg = configs[f"{retriever}+{suffix}"]
            assert cfg["retriever"] == retriever
            assert [(s["type"], s["params"]) for s in cfg["stages"]] == [(stage, {})]
    assert configs["dense-hnsw"]["dense"]["index"] == "hnsw"
    default = configs["default"]
    assert default["retriever"] == "hybrid"
    # identifier splitting, stemming, the action verbs, the split at "and" before a verb and tool_evidence fail the
    # transfer rule with the default's other parts (issue 29; benchmarks/transfer_fixed_point.py): options
    assert (default["bm25"]["tokenizer"], default["bm25"]["stemmer"]) == ("plain", None)
    assert [s["type"] for s in default["stages"]] == ["multi_intent", "tgr"]
    assert default["stages"][0]["params"] == {"actions": False, "named_tools": False, "min_words": 4}
    assert configs["hybrid+tgr"]["stages"][0]["params"] == {"expansion": {"enabled": True}}
    fast = configs["default-fast"]  # the default, with the requests matched lexically
    assert fast["stages"][0] == {
        **default["stages"][0], "params": {**default["stages"][0]["params"], "requests_by": "lexical"}
    }
    assert default["auto_tune"] == [] and configs["hybrid"]["auto_tune"] == []
    assert default["hybrid"]["fusion"] == "rrf" and configs["hybrid"]["hybrid"]["fusion"] == "rrf"
    assert {k: v for k, v in fast.items() if k != "stages"} == {k: v for k, v in default.items() if k != "stages"}
    assert fast["stages"][1:] == default["stages"][1:]


def test_preset_configs_are_fresh_copies() -> None:
    first = pipeline_config("hybrid+tgr")
    first.stages[0].params["expansion"]["enabled"] = False
    assert pipeline_config("hybrid+tgr").stages[0].params == {"expansion": {"enabled": True}}


@pytest.mark.parametrize("command", ["eval", "index"])
def test_help_lists_the_pipelines(command: str) -> None:
    env = {**os.environ, "COLUMNS": "2000"}  # one line per option: no name split at a hyphen
    proc = subprocess.run(
        [sys.executable, "-m", "toolrerank_plugins.cli", command, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.strip().startswith("--pipeline"))
    listed = set(re.split(r"[\s,;]+", line))
    assert set(known_pipelines()) >= EXPECTED
    assert set(known_pipelines()) <= listed


def test_the_library_never_imports_the_cli() -> None:
    pattern = re.compile(
        r"^\s*(from\s+toolrerank_plugins\.cli\b|import\s+toolrerank_plugins\.cli\b|"
        r"from\s+toolrerank_plugins\s+import\s+[^\n]*\bcli\b)",
        re.M,
    )
    package = ROOT / "toolrerank_plugins"
    offenders = [
        str(p.relative_to(ROOT))
        for p in package.rglob("*.py")
        if (package / "cli") not in p.parents and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize("value", [5, None, 2.5, b"default", ["default"]])
def test_pipeline_config_of_a_wrong_type_names_the_argument(value: object) -> None:
    # was a TypeError from pathlib ("expected str, bytes or os.PathLike object, not int")
    with pytest.raises(TypeError, match="pipeline_config: name_or_path must be a pipeline name or the path"):
        pipeline_config(value)  # type: ignore[arg-type]


def test_pipeline_config_reads_a_path_object_and_refuses_infinity(tmp_path: Path) -> None:
    from toolrerank_plugins.errors import ConfigError

    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"retriever": "bm25", "depth": 7}')
    assert pipeline_config(cfg).depth == 7
    cfg.write_text('{"retriever": "bm25", "bm25": {"k1": Infinity}}')
    with pytest.raises(ConfigError, match="(?s)cfg.json: not a valid engine config .*finite number"):
        pipeline_config(cfg)


def test_one_default_everywhere() -> None:
    """Issue 26: EngineConfig() and Engine.build(catalog) gave plain dense while the CLI gave the default."""
    from toolrerank_plugins.config import DEFAULT_PIPELINE, EngineConfig, default_config
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

    default = pipeline_config("default")
    assert EngineConfig() == default == default_config()
    assert EngineConfig.model_validate(DEFAULT_PIPELINE) == default  # the documented mapping is the defaults
    assert default.retriever == "hybrid" and [s.type for s in default.stages] == ["multi_intent", "tgr"]
    assert Engine.build(tiny_catalog(), embedder=FakeEmbedder()).config == default
    # A named field changes that part only; the plain baselines are presets without stages.
    assert EngineConfig(retriever="bm25").stages == default.stages
    for name in ("bm25", "dense", "hybrid"):
        plain = pipeline_config(name)
        assert plain.stages == [] and plain.bm25.tokenizer == "plain" and plain.hybrid.fusion == "rrf"


def test_pipeline_config_fields_replace_and_are_validated() -> None:
    from pydantic import ValidationError

    cfg = pipeline_config("bm25", depth=7, stages=[{"type": "multi_intent"}])
    assert cfg.depth == 7 and [s.type for s in cfg.stages] == ["multi_intent"] and cfg.bm25.stemmer is None
    with pytest.raises(ValidationError):
        pipeline_config("bm25", depth=0)


@pytest.mark.parametrize("name", [n for n in known_pipelines() if "+" not in n or n == "hybrid+tgr"])
def test_every_stage_score_has_a_stated_scale(name: str) -> None:
    """Issue 26 item 7: per-stage scores were on unlabelled scales, and "hybrid" meant RRF or z-scores unsaid."""
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

    engine = Engine.build(tiny_catalog(), pipeline_config(name), embedder=FakeEmbedder())
    scales = engine.score_scales()
    for query in ("send an email and check the weather", "log in", "zzz qqq"):
        for hit in engine.search(query, top_k=5):
            assert set(hit.stage_scores) <= set(scales), (name, hit.stage_scores)
            assert hit.score == list(hit.stage_scores.values())[-1]  # the final score is the last key's
    if engine.config.retriever == "hybrid":
        fusion = engine.config.hybrid.fusion
        named = {"rrf": "reciprocal-rank", "zscore": "z-score", "minmax": "min-max", "agreement": "agreement fusion"}
        assert named[fusion] in scales["hybrid"]
